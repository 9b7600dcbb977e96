// Kept CheckFit answers: found only for the same request under the same
// planner and evidence, dropped when either changes, bounded in count.

#include "server/service/answer_cache.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace headroom {
namespace {

// A snapshot distinct from every other one. The cache compares snapshots by
// identity and never reads them, so each pointer aliases a distinct owner
// instead of a built planner and evidence.
PlannerState::Answering Snapshot() {
  auto planner_owner = std::make_shared<int>(0);
  auto evidence_owner = std::make_shared<int>(0);
  return {std::shared_ptr<const FitPlanner>(
              planner_owner,
              reinterpret_cast<const FitPlanner*>(planner_owner.get())),
          std::shared_ptr<const Evidence>(
              evidence_owner,
              reinterpret_cast<const Evidence*>(evidence_owner.get()))};
}

v1::CheckFitRequest Request(uint32_t batch) {
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.add_batches(batch);
  request.add_targets()->set_gpu("L4");
  return request;
}

std::shared_ptr<const v1::CheckFitResponse> Answer(const std::string& model) {
  auto answer = std::make_shared<v1::CheckFitResponse>();
  answer->set_model(model);
  return answer;
}

TEST(AnswerCacheTest, FindsTheAnswerKeptForTheSameRequestAndSnapshot) {
  AnswerCache cache;
  const PlannerState::Answering from = Snapshot();
  const std::string key = cache.KeyOf(Request(8));
  ASSERT_FALSE(key.empty());
  EXPECT_EQ(cache.KeyOf(Request(8)), key);
  EXPECT_NE(cache.KeyOf(Request(64)), key);
  // learn is part of the request: its own key.
  v1::CheckFitRequest learn = Request(8);
  learn.set_learn(true);
  EXPECT_NE(cache.KeyOf(learn), key);

  EXPECT_EQ(cache.Find(from, key), nullptr);
  const auto answer = Answer("bert-base");
  cache.Insert(from, key, answer);
  EXPECT_EQ(cache.Find(from, key), answer);  // the same object, not a copy
  EXPECT_EQ(cache.Find(from, cache.KeyOf(Request(64))), nullptr);
  EXPECT_EQ(cache.size(), 1u);
}

TEST(AnswerCacheTest, ANewPlannerOrEvidenceDropsEveryKeptAnswer) {
  AnswerCache cache;
  const PlannerState::Answering from = Snapshot();
  const std::string key = cache.KeyOf(Request(8));
  cache.Insert(from, key, Answer("old"));  // not kept: no lookup switched yet
  EXPECT_EQ(cache.Find(from, key), nullptr);
  cache.Insert(from, key, Answer("old"));
  ASSERT_NE(cache.Find(from, key), nullptr);

  // The same planner with new evidence (a stored run).
  const PlannerState::Answering refreshed{from.planner, Snapshot().evidence};
  EXPECT_EQ(cache.Find(refreshed, key), nullptr);
  EXPECT_EQ(cache.size(), 0u);
  // A late insert computed from the old snapshot is not kept.
  cache.Insert(from, key, Answer("old"));
  EXPECT_EQ(cache.Find(refreshed, key), nullptr);
  cache.Insert(refreshed, key, Answer("new"));
  EXPECT_EQ(cache.Find(refreshed, key)->model(), "new");

  // A new planner (a refit) with the same evidence.
  const PlannerState::Answering refit{Snapshot().planner, refreshed.evidence};
  EXPECT_EQ(cache.Find(refit, key), nullptr);
}

TEST(AnswerCacheTest, KeepsAtMostTwoGenerationsOfMaxEntries) {
  AnswerCache::Limits limits;
  limits.max_entries = 2;
  AnswerCache cache(limits);
  const PlannerState::Answering from = Snapshot();
  auto key = [&](uint32_t batch) { return cache.KeyOf(Request(batch)); };
  EXPECT_EQ(cache.Find(from, key(1)), nullptr);  // switches to `from`
  cache.Insert(from, key(1), Answer("1"));
  cache.Insert(from, key(2), Answer("2"));
  // recent {1, 2} is full: 3 starts a new one and {1, 2} become older.
  cache.Insert(from, key(3), Answer("3"));
  EXPECT_EQ(cache.size(), 3u);
  // 1 is found in older and moves to recent {3, 1}; older keeps {2}.
  EXPECT_EQ(cache.Find(from, key(1))->model(), "1");
  EXPECT_EQ(cache.size(), 3u);
  // recent {3, 1} is full: 4 starts a new one, {3, 1} become older, 2 goes.
  cache.Insert(from, key(4), Answer("4"));
  EXPECT_EQ(cache.size(), 3u);
  EXPECT_EQ(cache.Find(from, key(2)), nullptr);
  EXPECT_EQ(cache.Find(from, key(3))->model(), "3");
  EXPECT_EQ(cache.Find(from, key(4))->model(), "4");
}

TEST(AnswerCacheTest, KeepsAtMostMaxBytesPerGeneration) {
  AnswerCache::Limits limits;
  limits.max_bytes = 4000;
  AnswerCache cache(limits);
  const PlannerState::Answering from = Snapshot();
  auto key = [&](uint32_t batch) { return cache.KeyOf(Request(batch)); };
  // An answer whose model is 1,000 bytes: 1,003 on the wire (tag, a 2-byte
  // length, the bytes), counted 3 x 1,003 = 3,009, plus a key of 22 bytes
  // (template 13, packed batches 3, a target 6): 3,031 bytes.
  const auto thousand = Answer(std::string(1000, 'm'));
  ASSERT_EQ(thousand->ByteSizeLong(), 1003u);
  ASSERT_EQ(key(1).size(), 22u);
  EXPECT_EQ(cache.Find(from, key(1)), nullptr);  // switches to `from`
  cache.Insert(from, key(1), thousand);
  EXPECT_EQ(cache.size(), 1u);
  // 3,031 + 3,031 > 4,000: the second starts a new generation.
  cache.Insert(from, key(2), thousand);
  EXPECT_EQ(cache.size(), 2u);
  cache.Insert(from, key(3), thousand);
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.Find(from, key(1)), nullptr);
  // Alone over max_bytes (3 x 2,003 + 22): never kept.
  cache.Insert(from, key(4), Answer(std::string(2000, 'm')));
  EXPECT_EQ(cache.Find(from, key(4)), nullptr);
}

TEST(AnswerCacheTest, LargeRequestsAreNotKept) {
  AnswerCache::Limits limits;
  limits.max_request_bytes = 64;
  AnswerCache cache(limits);
  v1::CheckFitRequest large = Request(8);
  large.mutable_model()->set_hf_config(std::string(100, 'x'));
  EXPECT_EQ(cache.KeyOf(large), "");
  const PlannerState::Answering from = Snapshot();
  cache.Insert(from, cache.KeyOf(large), Answer("large"));
  EXPECT_EQ(cache.Find(from, cache.KeyOf(large)), nullptr);
  EXPECT_EQ(cache.size(), 0u);
}

}  // namespace
}  // namespace headroom
