// Listings page: keyset pages bounded in count and in bytes, in a stable
// order, so following the pages yields every entry once; against every
// store.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/server/store/store_fixture.h"

namespace headroom {
namespace {

class PagingStoreTest : public StoreFixture {};
HEADROOM_INSTANTIATE_FOR_EVERY_STORE(PagingStoreTest);

v1::Probe QueuedProbe(const std::string& note) {
  v1::Probe probe;
  probe.set_gpu("L4");
  probe.set_template_("gpt2");
  probe.mutable_request()->add_batches(8);
  probe.set_error(note);
  return probe;
}

v1::WorkerStatus Worker(const std::string& id, size_t note_bytes) {
  v1::WorkerStatus worker;
  worker.mutable_hello()->set_worker_id(id);
  worker.mutable_hello()->add_notes(std::string(note_bytes, 'n'));
  return worker;
}

// Every page of `list` from the first, and the ids in order.
template <typename Entry, typename List, typename Id>
std::vector<std::vector<std::string>> FollowPages(const List& list,
                                                  const Id& id, PageSpec spec) {
  std::vector<std::vector<std::string>> pages;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<Page<Entry>> page = list(spec);
    EXPECT_TRUE(page.ok()) << page.status();
    if (!page.ok()) break;
    pages.emplace_back();
    for (const Entry& entry : page->entries) pages.back().push_back(id(entry));
    if (page->next_after.empty()) break;
    spec.after = page->next_after;
  }
  return pages;
}

TEST_P(PagingStoreTest, ProbesPageNewestFirstWithTheStateFilter) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 1; i <= 25; ++i) {
    ASSERT_TRUE((*store)->AddProbe(QueuedProbe("")).ok());
  }
  for (int i = 1; i <= 25; i += 3) {
    ASSERT_TRUE((*store)->CancelProbe(absl::StrCat("p-", i)).ok());
  }
  PageSpec spec;
  spec.max_entries = 10;
  const auto id = [](const v1::Probe& p) { return p.id(); };
  const auto all = FollowPages<v1::Probe>(
      [&](const PageSpec& s) {
        return (*store)->ListProbes(v1::Probe::STATE_UNSPECIFIED, s);
      },
      id, spec);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].size(), 10u);
  EXPECT_EQ(all[1].size(), 10u);
  EXPECT_EQ(all[2].size(), 5u);
  EXPECT_EQ(all[0].front(), "p-25");
  EXPECT_EQ(all[1].front(), "p-15");
  EXPECT_EQ(all[2].back(), "p-1");

  // p-1, p-4, ..., p-25 are cancelled: 9 of them, newest first.
  spec.max_entries = 4;
  const auto cancelled = FollowPages<v1::Probe>(
      [&](const PageSpec& s) {
        return (*store)->ListProbes(v1::Probe::CANCELLED, s);
      },
      id, spec);
  ASSERT_EQ(cancelled.size(), 3u);
  EXPECT_EQ(cancelled[0],
            (std::vector<std::string>{"p-25", "p-22", "p-19", "p-16"}));
  EXPECT_EQ(cancelled[2], (std::vector<std::string>{"p-1"}));

  // Exactly a page's worth: the last page says so (no empty page after).
  spec.max_entries = 9;
  const auto exact = FollowPages<v1::Probe>(
      [&](const PageSpec& s) {
        return (*store)->ListProbes(v1::Probe::CANCELLED, s);
      },
      id, spec);
  EXPECT_EQ(exact.size(), 1u);
  // The unpaged call follows the pages.
  EXPECT_EQ((*store)->ListProbes(v1::Probe::STATE_UNSPECIFIED, -1)->size(),
            25u);
  EXPECT_EQ((*store)->ListProbes(v1::Probe::STATE_UNSPECIFIED, 7)->size(), 7u);
}

TEST_P(PagingStoreTest, APageStopsBeforeItsByteBudget) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  // Six workers of about 100 kB each; a 250 kB budget holds two.
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(
        (*store)->PutWorker(Worker(absl::StrCat("w-", i), 100000)).ok());
  }
  PageSpec spec;
  spec.max_entries = 500;
  spec.max_bytes = 250000;
  const auto pages = FollowPages<v1::WorkerStatus>(
      [&](const PageSpec& s) { return (*store)->ListWorkers(s); },
      [](const v1::WorkerStatus& w) { return w.hello().worker_id(); }, spec);
  ASSERT_EQ(pages.size(), 3u);
  EXPECT_EQ(pages[0], (std::vector<std::string>{"w-0", "w-1"}));
  EXPECT_EQ(pages[1], (std::vector<std::string>{"w-2", "w-3"}));
  EXPECT_EQ(pages[2], (std::vector<std::string>{"w-4", "w-5"}));

  // An entry over the budget by itself still comes, alone, so paging
  // goes on past it.
  spec.max_bytes = 50000;
  const auto single = FollowPages<v1::WorkerStatus>(
      [&](const PageSpec& s) { return (*store)->ListWorkers(s); },
      [](const v1::WorkerStatus& w) { return w.hello().worker_id(); }, spec);
  ASSERT_EQ(single.size(), 6u);
  for (const auto& page : single) EXPECT_EQ(page.size(), 1u);
}

TEST_P(PagingStoreTest, FactorSetsAndTheAutotuneCachePageInTheirOrder) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), false).ok());
  }
  PageSpec spec;
  spec.max_entries = 3;
  const auto sets = FollowPages<v1::FactorSet>(
      [&](const PageSpec& s) { return (*store)->ListFactorSets(s); },
      [](const v1::FactorSet& set) { return set.version(); }, spec);
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[0], (std::vector<std::string>{"fs-1", "fs-2", "fs-3"}));
  EXPECT_EQ(sets[2], (std::vector<std::string>{"fs-7"}));

  for (const char* id : {"c", "a", "d", "b", "e"}) {
    ASSERT_TRUE(
        (*store)->PutAutotuneRecord(id, "key", v1::AutotuneRecord()).ok());
  }
  spec.max_entries = 2;
  const auto entries = FollowPages<v1::AutotuneCacheEntry>(
      [&](const PageSpec& s) { return (*store)->ListAutotuneRecords(s); },
      [](const v1::AutotuneCacheEntry& e) { return e.id(); }, spec);
  std::vector<std::string> ids;
  for (const auto& page : entries) {
    EXPECT_LE(page.size(), 2u);
    ids.insert(ids.end(), page.begin(), page.end());
  }
  // By creation second, then id: every entry once whatever the seconds.
  std::vector<std::string> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ((*store)->ListAutotuneRecords()->size(), 5u);
}

// Issue 34: every listing follows the one convention, so the runs, the
// energy runs and curve sets, the density runs, the histories and the
// expired probes page like the others, and following their pages gives what
// the unpaged call gives.
TEST_P(PagingStoreTest, EveryListingPagesInItsOrder) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  PageSpec spec;
  spec.max_entries = 2;

  std::vector<v1::MeasuredRun> runs(5);
  for (int i = 0; i < 5; ++i) runs[i].set_batch(i + 1);
  ASSERT_EQ(*(*store)->AddRuns(runs), 5);
  const auto batches = FollowPages<v1::MeasuredRun>(
      [&](const PageSpec& s) { return (*store)->ListRuns(s); },
      [](const v1::MeasuredRun& r) { return absl::StrCat(r.batch()); }, spec);
  EXPECT_EQ(batches, (std::vector<std::vector<std::string>>{
                         {"1", "2"}, {"3", "4"}, {"5"}}));
  EXPECT_EQ((*store)->ListRuns()->size(), 5u);

  for (int i = 0; i < 5; ++i) {
    v1::EnergyRun run;
    run.set_energy_j(i);
    run.set_simulated(i % 2 == 1);
    ASSERT_TRUE(*(*store)->AddEnergyRun(absl::StrCat("e", i), run));
  }
  const auto joules = [](const v1::EnergyRun& r) {
    return absl::StrCat(r.energy_j());
  };
  EXPECT_EQ(
      FollowPages<v1::EnergyRun>(
          [&](const PageSpec& s) { return (*store)->ListEnergyRuns(false, s); },
          joules, spec),
      (std::vector<std::vector<std::string>>{{"0", "2"}, {"4"}}));
  EXPECT_EQ(
      FollowPages<v1::EnergyRun>(
          [&](const PageSpec& s) { return (*store)->ListEnergyRuns(true, s); },
          joules, spec)
          .size(),
      3u);
  EXPECT_EQ((*store)->ListEnergyRuns(true, 4)->size(), 4u);
  EXPECT_EQ((*store)->ListEnergyRuns(true, -1)->size(), 5u);

  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*store)->AddEnergyCurveSet(v1::EnergyCurveSet(), true).ok());
    ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), true).ok());
  }
  ASSERT_TRUE((*store)->SetCurrentFactorSet("fs-1").ok());
  // A curve set's page key is its version (the List RPC's token).
  auto first = (*store)->ListEnergyCurveSets(spec);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->next_after, "ec-2");
  EXPECT_EQ((*store)->ListEnergyCurveSets(2)->size(), 2u);
  EXPECT_EQ((*store)->ListEnergyCurveSets(-1)->size(), 3u);
  const auto same = [](const std::string& v) { return v; };
  EXPECT_EQ(FollowPages<std::string>(
                [&](const PageSpec& s) { return (*store)->CurrentHistory(s); },
                same, spec),
            (std::vector<std::vector<std::string>>{{"fs-1", "fs-2"},
                                                   {"fs-3", "fs-1"}}));
  EXPECT_EQ(
      FollowPages<std::string>(
          [&](const PageSpec& s) { return (*store)->EnergyCurveHistory(s); },
          same, spec),
      (std::vector<std::vector<std::string>>{{"ec-1", "ec-2"}, {"ec-3"}}));

  std::vector<v1::DensityRawRun> density;
  for (const char* id : {"d", "b", "a", "c", "e"}) {
    density.emplace_back().set_id(id);
    density.back().set_arch(std::string(id) == "c" ? "lstm" : "mlp");
  }
  ASSERT_EQ(*(*store)->AddDensityRuns(density), 5);
  const auto id = [](const v1::DensityRawRun& r) { return r.id(); };
  EXPECT_EQ(FollowPages<v1::DensityRawRun>(
                [&](const PageSpec& s) {
                  return (*store)->ListDensityRuns("mlp", "", "", s);
                },
                id, spec),
            (std::vector<std::vector<std::string>>{{"a", "b"}, {"d", "e"}}));
  EXPECT_EQ((*store)->ListDensityRuns("", "", "")->size(), 5u);

  // Expired probes page by (deadline, seq): p-1 and p-3 share a deadline.
  for (uint32_t expires_s : {10u, 5u, 10u, 0u, 20u}) {
    v1::Probe probe = QueuedProbe("");
    probe.set_created_unix_ms(1000);
    probe.mutable_request()->set_expires_s(expires_s);
    ASSERT_TRUE((*store)->AddProbe(probe).ok());
  }
  EXPECT_EQ(
      FollowPages<v1::Probe>(
          [&](const PageSpec& s) {
            return (*store)->ListExpiredProbes(30000, s);
          },
          [](const v1::Probe& p) { return p.id(); }, spec),
      (std::vector<std::vector<std::string>>{{"p-2", "p-1"}, {"p-3", "p-5"}}));
  EXPECT_EQ((*store)->ListExpiredProbes(30000, 3)->size(), 3u);

  PageSpec malformed;
  malformed.after = "not-a-number";
  EXPECT_EQ((*store)->ListRuns(malformed).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->ListEnergyRuns(true, malformed).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->CurrentHistory(malformed).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->ListExpiredProbes(30000, malformed).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue 35 item 3: the evidence reads only what was stored since it last
// read, across pages (500 a page), each run once.
TEST_P(PagingStoreTest, ListRunsAfterReadsWhatWasStoredSinceOnce) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->LastRunKey(), "");
  std::vector<v1::MeasuredRun> first(1203);
  for (size_t i = 0; i < first.size(); ++i) first[i].set_batch(i + 1);
  ASSERT_EQ(*(*store)->AddRuns(first), 1203);
  std::string after;
  absl::StatusOr<std::vector<v1::MeasuredRun>> read =
      (*store)->ListRunsAfter(&after);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 1203u);
  EXPECT_EQ(read->back().batch(), 1203u);
  const std::string at_end = after;
  EXPECT_FALSE(at_end.empty());
  EXPECT_EQ(*(*store)->LastRunKey(), at_end);
  // Nothing new: nothing read, the key stays.
  read = (*store)->ListRunsAfter(&after);
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(read->empty());
  EXPECT_EQ(after, at_end);
  std::vector<v1::MeasuredRun> second(2);
  second[0].set_batch(5000);
  second[1].set_batch(5001);
  ASSERT_EQ(*(*store)->AddRuns(second), 1205);
  read = (*store)->ListRunsAfter(&after);
  ASSERT_TRUE(read.ok());
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].batch(), 5000u);
  EXPECT_EQ((*read)[1].batch(), 5001u);
  EXPECT_NE(after, at_end);
  EXPECT_EQ(*(*store)->LastRunKey(), after);
}

TEST_P(PagingStoreTest, AMalformedKeyIsRefused) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  PageSpec spec;
  spec.after = "not-a-number";
  EXPECT_EQ((*store)->ListFactorSets(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      (*store)->ListProbes(v1::Probe::STATE_UNSPECIFIED, spec).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->ListAutotuneRecords(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace headroom
