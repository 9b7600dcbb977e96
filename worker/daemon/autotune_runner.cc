#include "worker/daemon/autotune_runner.h"

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/microbatch/cache_key.h"
#include "core/microbatch/search.h"
#include "core/microbatch/select.h"

namespace headroom::worker {
namespace {

using RunKey = std::pair<std::string, uint32_t>;  // mode, microbatch

// Forwards to the daemon's sink and keeps the one result of the run.
class CapturingSink final : public ExecutionSink {
 public:
  explicit CapturingSink(ExecutionSink* next) : next_(next) {}
  void Sample(const v1::BatchRun& run, int64_t t_ms,
              const GpuReading& reading) override {
    next_->Sample(run, t_ms, reading);
  }
  void BatchDone(const v1::BatchRun& run, v1::BatchResult result) override {
    captured_ = result;
    next_->BatchDone(run, std::move(result));
  }
  const std::optional<v1::BatchResult>& captured() const { return captured_; }

 private:
  ExecutionSink* next_;
  std::optional<v1::BatchResult> captured_;
};

bool Fits(const v1::BatchResult& result, double budget_gb) {
  return !result.oom() && result.error().empty() &&
         result.has_peak_allocated_gb() &&
         result.peak_allocated_gb() <= budget_gb;
}

std::string AttentionInWords(const v1::PlanMicrobatchRequest& request,
                             bool simulated) {
  const std::string& backend = request.attention_backend();
  std::string words = backend == "flash"   ? "flash (fused; no score matrix)"
                      : backend == "sdpa"  ? "sdpa (fused; no score matrix)"
                      : backend == "eager" ? "eager (score matrix materialized)"
                      : request.setup().attention() == v1::TrainingSetup::EAGER
                          ? "eager (setup.attention)"
                      : request.setup().attention() !=
                                  v1::TrainingSetup::ATTENTION_UNSPECIFIED ||
                              request.setup().fused_attention()
                          ? "fused (setup.attention)"
                          : "the model's own (setup.attention unset)";
  return simulated ? absl::StrCat(words, ", simulated") : words;
}

}  // namespace

ExecutionOutcome RunAutotune(
    const v1::Assignment& assignment, const v1::GpuDevice& gpu,
    const google::protobuf::Map<std::string, std::string>& framework_versions,
    Executor* executor, ExecutionSink* sink,
    const std::atomic<StopReason>& stop) {
  const v1::AutotunePlan& autotune = assignment.autotune();
  const v1::PlanMicrobatchRequest& request = autotune.request();
  const v1::PlanMicrobatchResponse& plan = autotune.plan();
  const double budget_gb = plan.budget_gb();
  std::vector<uint32_t> candidates;
  for (const v1::PlannedMicrobatch& p : plan.candidates()) {
    if (p.mode() == kEagerMode) candidates.push_back(p.microbatch());
  }
  std::vector<std::string> modes = {std::string(kEagerMode)};
  if (request.compile_model()) modes.emplace_back(kCompiledMode);

  std::map<RunKey, v1::BatchResult> known;
  for (const v1::BatchResult& result : assignment.measured()) {
    if (result.repetition() == 0) {
      known[RunKey(result.mode(), result.batch())] = result;
    }
  }
  ExecutionOutcome outcome;
  bool stopped = false;
  std::map<std::string, std::vector<PlannedFit>> planned_of;
  for (const std::string& mode : modes) {
    planned_of[mode] = PlannedFitsOf(plan, mode);
    if (planned_of[mode].size() != candidates.size()) {
      outcome.error =
          absl::StrCat("autotune plan has ", planned_of[mode].size(), " ", mode,
                       " candidates; expected ", candidates.size());
      return outcome;
    }
    const RunCandidate run = [&](int i) -> RunOutcome {
      const RunKey key(mode, candidates[i]);
      auto it = known.find(key);
      if (it == known.end()) {
        if (stop.load() != StopReason::kNone) {
          stopped = true;
          outcome.handed_back = stop.load() == StopReason::kShutdown;
          if (stop.load() == StopReason::kCancelled)
            outcome.error = "cancelled";
          return RunOutcome::kAbort;
        }
        v1::Assignment one = assignment;
        one.clear_runs();
        one.clear_measured();
        v1::BatchRun* batch_run = one.add_runs();
        batch_run->set_batch(candidates[i]);
        batch_run->set_repetition(0);
        batch_run->set_mode(mode);
        CapturingSink capture(sink);
        ExecutionOutcome ran = executor->Run(one, &capture, stop);
        if (!capture.captured().has_value() || ran.handed_back ||
            !ran.error.empty()) {
          stopped = true;
          outcome.handed_back = ran.handed_back;
          outcome.error =
              ran.error.empty() && !ran.handed_back
                  ? absl::StrCat("the ", executor->name(),
                                 " executor gave no result for ", mode,
                                 " microbatch ", candidates[i])
                  : ran.error;
          return RunOutcome::kAbort;
        }
        it = known.emplace(key, *capture.captured()).first;
      }
      const v1::BatchResult& result = it->second;
      if (!result.oom() && !result.error().empty()) return RunOutcome::kAbort;
      return Fits(result, budget_gb) ? RunOutcome::kFits
                                     : RunOutcome::kDoesNotFit;
    };
    const SearchResult found = VerifyThenBisect(planned_of[mode], run);
    if (stopped) return outcome;
    if (autotune.policy() == kMaxThroughputPolicy && !found.aborted) {
      for (int i = 0; i < found.best; ++i) {
        run(i);
        if (stopped) return outcome;
      }
    }
  }

  v1::AutotuneRecord record;
  *record.mutable_cache_key() =
      AutotuneKeyFor(autotune, assignment.spec(), gpu, framework_versions);
  record.set_attention(AttentionInWords(request, gpu.simulated()));
  record.set_selection_policy(autotune.policy());
  record.set_budget_gb(budget_gb * kRecordGibPerGb);
  record.set_reserve_gb(request.reserve_gb() * kRecordGibPerGb);
  record.set_note(absl::StrCat(
      "Measured by the ", executor->name(), " executor",
      gpu.simulated() ? " on a simulated GPU" : "",
      "; microbatch_seconds is one full training step (forward, backward, "
      "optimizer) at the microbatch; peaks are allocator peaks."));
  for (const std::string& mode : modes) {
    const std::vector<PlannedFit>& planned = planned_of[mode];
    bool errored = false;
    bool failed_below = false;
    for (size_t i = 0; i < candidates.size(); ++i) {
      auto it = known.find(RunKey(mode, candidates[i]));
      if (it == known.end()) {
        v1::MicrobatchFailure* failure = record.add_failures();
        failure->set_microbatch(candidates[i]);
        failure->set_mode(mode);
        if (!errored && failed_below) {
          failure->set_reason("inferred_oom");
        } else if (!errored && planned[i] == PlannedFit::kPredictedOom) {
          failure->set_reason("predicted_oom");
        } else {
          failure->set_reason("not_measured");
        }
        continue;
      }
      const v1::BatchResult& result = it->second;
      if (result.oom() || !result.error().empty()) {
        v1::MicrobatchFailure* failure = record.add_failures();
        failure->set_microbatch(candidates[i]);
        failure->set_mode(mode);
        failure->set_reason(
            result.oom() ? "oom" : absl::StrCat("error: ", result.error()));
        errored = errored || !result.oom();
        failed_below = true;
        continue;
      }
      if (!result.has_peak_allocated_gb() || !(result.step_seconds() > 0)) {
        v1::MicrobatchFailure* failure = record.add_failures();
        failure->set_microbatch(candidates[i]);
        failure->set_mode(mode);
        failure->set_reason("error: no allocator peak or step time reported");
        failed_below = true;
        continue;
      }
      v1::MicrobatchMeasurement* m = record.add_measurements();
      m->set_microbatch(candidates[i]);
      m->set_mode(mode);
      m->set_microbatch_seconds(result.step_seconds());
      m->set_peak_gb(result.peak_allocated_gb() * kRecordGibPerGb);
      m->set_fits_budget(Fits(result, budget_gb));
      if (!m->fits_budget()) failed_below = true;
      m->set_estimated_update_seconds(EstimatedUpdateSeconds(
          request.global_batch(), candidates[i], result.step_seconds()));
      m->set_input_tokens_per_second(static_cast<double>(candidates[i]) *
                                     request.context() / result.step_seconds());
    }
  }
  absl::StatusOr<v1::MicrobatchSelection> selection =
      SelectMicrobatch(record, autotune.policy());
  if (!selection.ok()) {
    outcome.error = absl::StrCat("autotune selection failed: ",
                                 selection.status().message());
    return outcome;
  }
  *record.mutable_failures() = selection->failures();
  if (selection->has_selected()) {
    *record.mutable_selected() = selection->selected();
  }
  outcome.autotune_record = std::move(record);
  return outcome;
}

}  // namespace headroom::worker
