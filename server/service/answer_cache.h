#ifndef HEADROOM_SERVER_SERVICE_ANSWER_CACHE_H_
#define HEADROOM_SERVER_SERVICE_ANSWER_CACHE_H_

// CheckFit answers kept by request, for the planner and evidence they were
// computed from. FitPlanner::CheckFit is a pure function of the request,
// the planner and the evidence (core/ reads no clock, file or environment),
// and both are immutable once installed (PlannerState::Answering), so a kept
// answer is the answer: byte for byte what the planner would compute again.
// A scheduler asks the same question (one pod's setup on one node's GPU)
// again and again; a kept answer skips resolving the model, building the
// profile and judging every target (about 70 µs of the 2-core VM's CPU for
// the catalog bert-base request of bench/load_gen.cc, 2026-12-02 profile).
//
// When the planner or the evidence installed changes (a refit, a promotion,
// a stored run), every kept answer is dropped on the next lookup: an answer
// never outlives the snapshot it came from. That holds only while a new
// snapshot is a new object: whoever changes the evidence must install a new
// Evidence, never change an installed one.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "headroom/v1/planner.pb.h"
#include "server/service/planner_state.h"

namespace headroom {

class AnswerCache {
 public:
  struct Limits {
    // Answers kept, and their bytes (the request's serialized bytes plus
    // the answer's in memory, estimated as 3x its serialized bytes), per
    // generation; two generations are kept, so at most twice these.
    size_t max_entries = 2048;
    size_t max_bytes = size_t{16} << 20;
    // Requests larger than this (an ONNX graph, a large inline spec) are
    // never kept: their key alone would crowd out many catalog answers.
    size_t max_request_bytes = size_t{64} << 10;
  };

  AnswerCache() : AnswerCache(Limits{}) {}
  explicit AnswerCache(Limits limits) : limits_(limits) {}
  AnswerCache(const AnswerCache&) = delete;
  AnswerCache& operator=(const AnswerCache&) = delete;

  // The key `request` is kept under: its deterministic serialization.
  // Empty when the request is over max_request_bytes (it is not kept).
  std::string KeyOf(const v1::CheckFitRequest& request) const;

  // The answer kept under `key` for exactly `from`'s planner and evidence,
  // or null. A lookup under another snapshot drops every kept answer.
  std::shared_ptr<const v1::CheckFitResponse> Find(
      const PlannerState::Answering& from, const std::string& key);

  // Keeps `answer` (computed from `from` for the request of `key`). Does
  // nothing for an empty key or when `from` is no longer the snapshot the
  // cache holds answers for (another thread saw a newer one).
  void Insert(const PlannerState::Answering& from, std::string key,
              std::shared_ptr<const v1::CheckFitResponse> answer);

  // Answers kept now (both generations), for tests and metrics.
  size_t size() const;

 private:
  using Answers =
      absl::flat_hash_map<std::string,
                          std::shared_ptr<const v1::CheckFitResponse>>;

  // Drops every answer when `from` is not the snapshot they came from, and
  // keeps answers for `from` from now on.
  void SwitchTo(const PlannerState::Answering& from)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the answers kept came from `from`.
  bool Holds(const PlannerState::Answering& from) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps `answer` in `recent_`, rotating the generations when it is full.
  void Keep(std::string key, std::shared_ptr<const v1::CheckFitResponse> answer)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Limits limits_;
  mutable absl::Mutex mu_;
  // The snapshot the answers came from; held so its address is not reused.
  PlannerState::Answering from_ ABSL_GUARDED_BY(mu_);
  // Answers kept since the last rotation, and those of the one before: a
  // full `recent_` becomes `older_`, and an answer found in `older_` moves
  // back to `recent_` (least recently used, approximately, at no cost per
  // lookup).
  Answers recent_ ABSL_GUARDED_BY(mu_);
  Answers older_ ABSL_GUARDED_BY(mu_);
  size_t recent_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_ANSWER_CACHE_H_
