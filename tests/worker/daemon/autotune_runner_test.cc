#include "worker/daemon/autotune_runner.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/microbatch/cache_key.h"
#include "core/microbatch/select.h"
#include "gtest/gtest.h"

namespace headroom::worker {
namespace {

// A card whose truth is a table: (mode, microbatch) -> allocator peak in GB
// (absent: OOM), or an error for a whole mode. Records what it ran.
class TableExecutor final : public Executor {
 public:
  std::map<std::pair<std::string, uint32_t>, double> peak_gb;
  std::map<std::string, std::string> mode_error;
  std::vector<std::pair<std::string, uint32_t>> ran;
  // Stop the daemon after this many runs (-1: never).
  int stop_after = -1;
  std::atomic<StopReason>* stop = nullptr;

  std::string name() const override { return "table"; }
  ExecutionOutcome Run(const v1::Assignment& assignment, ExecutionSink* sink,
                       const std::atomic<StopReason>&) override {
    for (const v1::BatchRun& run : assignment.runs()) {
      ran.emplace_back(run.mode(), run.batch());
      v1::BatchResult result;
      result.set_batch(run.batch());
      result.set_mode(run.mode());
      auto error = mode_error.find(run.mode());
      auto it = peak_gb.find({run.mode(), run.batch()});
      if (error != mode_error.end()) {
        result.set_error(error->second);
      } else if (it == peak_gb.end()) {
        result.set_oom(true);
      } else {
        result.set_peak_allocated_gb(it->second);
        // Compiled is faster per sample.
        result.set_step_seconds((run.mode() == "compiled" ? 0.006 : 0.01) *
                                run.batch());
      }
      sink->BatchDone(run, result);
    }
    if (stop != nullptr && static_cast<int>(ran.size()) == stop_after) {
      *stop = StopReason::kShutdown;
    }
    return {};
  }
};

class CollectingSink final : public ExecutionSink {
 public:
  std::vector<v1::BatchResult> results;
  void Sample(const v1::BatchRun&, int64_t, const GpuReading&) override {}
  void BatchDone(const v1::BatchRun&, v1::BatchResult result) override {
    results.push_back(std::move(result));
  }
};

constexpr uint32_t kCandidates[] = {1, 2, 4, 8, 16, 32, 64, 128};

// A plan over kCandidates with budget 20 GB: eager 1..4 predicted fits, 8..32
// open, 64.. predicted OOM; compiled 1..4 fits, the rest open.
v1::Assignment PlannedAssignment(bool compile, const std::string& policy) {
  v1::Assignment a;
  a.set_assignment_id("a-1");
  a.set_probe_id("p-1");
  a.mutable_spec()->set_name("toy");
  v1::AutotunePlan& autotune = *a.mutable_autotune();
  autotune.set_policy(policy);
  v1::PlanMicrobatchRequest& request = *autotune.mutable_request();
  request.set_template_("toy");
  request.set_context(512);
  request.set_global_batch(128);
  request.set_compile_model(compile);
  request.set_vram_fraction(0.9);
  request.set_reserve_gb(1);
  request.set_gpu("L4");
  v1::PlanMicrobatchResponse& plan = *autotune.mutable_plan();
  plan.set_budget_gb(20);
  for (const char* mode : {"eager", "compiled"}) {
    if (std::string(mode) == "compiled" && !compile) break;
    for (uint32_t c : kCandidates) {
      v1::PlannedMicrobatch* p = plan.add_candidates();
      p->set_microbatch(c);
      p->set_mode(mode);
      if (c <= 4) {
        p->set_verdict(v1::FITS);
        p->set_action(v1::PlannedMicrobatch::SKIP);
      } else if (c <= 32 || std::string(mode) == "compiled") {
        p->set_verdict(v1::BORDERLINE);
        p->set_action(v1::PlannedMicrobatch::MEASURE);
      } else {
        p->set_verdict(v1::DOES_NOT_FIT);
        p->set_action(v1::PlannedMicrobatch::SKIP);
      }
    }
  }
  for (uint32_t c : kCandidates) request.add_microbatch_candidates(c);
  return a;
}

v1::GpuDevice Card() {
  v1::GpuDevice gpu;
  gpu.set_name("NVIDIA L4");
  gpu.set_memory_bytes(23034466304);
  gpu.set_compute_capability("8.9");
  gpu.set_cuda_version("12.2");
  return gpu;
}

google::protobuf::Map<std::string, std::string> Versions() {
  google::protobuf::Map<std::string, std::string> v;
  v["torch"] = "2.3.0";
  v["python"] = "3.11.2";
  v["numpy"] = "1.26.4";
  return v;
}

// Truth: eager peaks 2 GB per sample (fits up to 8), compiled 1 GB per
// sample (fits up to 16).
TableExecutor Truth() {
  TableExecutor table;
  for (uint32_t c : kCandidates) {
    if (2.0 * c <= 24) table.peak_gb[{"eager", c}] = 2.0 * c;
    if (1.0 * c <= 24) table.peak_gb[{"compiled", c}] = 1.0 * c;
  }
  return table;
}

TEST(RunAutotune, RunsOnlyWhatItMustAndPicksWhatExhaustiveWould) {
  TableExecutor table = Truth();
  CollectingSink sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const v1::Assignment a = PlannedAssignment(true, "max_batch");
  const ExecutionOutcome outcome =
      RunAutotune(a, Card(), Versions(), &table, &sink, stop);
  ASSERT_TRUE(outcome.error.empty()) << outcome.error;
  ASSERT_TRUE(outcome.autotune_record.has_value());
  // Eager: verify 4, bisect 8..32 (16 no, 8 yes). Compiled: verify 4, bisect
  // 8..128 (32 no, 8 yes, 16 yes). 16 eager peaks 32 GB: over budget, OOM
  // on the 24 GB card.
  const std::vector<std::pair<std::string, uint32_t>> want = {
      {"eager", 4},     {"eager", 16},   {"eager", 8},    {"compiled", 4},
      {"compiled", 32}, {"compiled", 8}, {"compiled", 16}};
  EXPECT_EQ(table.ran, want);
  EXPECT_EQ(sink.results.size(), want.size());
  const v1::AutotuneRecord& record = *outcome.autotune_record;
  EXPECT_EQ(record.selected().microbatch(), 16u);
  EXPECT_EQ(record.selected().mode(), "compiled");
  EXPECT_EQ(record.measurements_size(), 5);
  EXPECT_NEAR(record.budget_gb(), 20 * 1e9 / 1073741824.0, 1e-12);

  // The same choice an exhaustive record (every candidate run) gives.
  v1::AutotuneRecord full = record;
  full.clear_measurements();
  full.clear_failures();
  for (const auto& [key, peak] : table.peak_gb) {
    v1::MicrobatchMeasurement* m = full.add_measurements();
    m->set_mode(key.first);
    m->set_microbatch(key.second);
    m->set_peak_gb(peak * kRecordGibPerGb);
    m->set_microbatch_seconds(0.01 * key.second);
  }
  absl::StatusOr<v1::MicrobatchSelection> exhaustive =
      SelectMicrobatch(full, "max_batch");
  ASSERT_TRUE(exhaustive.ok()) << exhaustive.status();
  EXPECT_EQ(exhaustive->selected().microbatch(), 16u);
  EXPECT_EQ(exhaustive->selected().mode(), "compiled");

  // Failures say why each candidate is out.
  std::map<std::pair<std::string, uint32_t>, std::string> reasons;
  for (const auto& f : record.failures()) {
    reasons[{f.mode(), f.microbatch()}] = f.reason();
  }
  EXPECT_EQ(reasons[std::make_pair(std::string("eager"), 16u)], "oom");
  EXPECT_EQ(reasons[std::make_pair(std::string("eager"), 32u)], "inferred_oom");
  EXPECT_EQ(reasons[std::make_pair(std::string("eager"), 1u)], "not_measured");
  EXPECT_EQ(reasons[std::make_pair(std::string("compiled"), 32u)], "oom");
  // The key is the one the planner derives for this card and versions.
  EXPECT_EQ(CacheKeyBytes(record.cache_key()),
            CacheKeyBytes(
                AutotuneKeyFor(a.autotune(), a.spec(), Card(), Versions())));
  EXPECT_EQ(record.cache_key().gpu().capability_size(), 2);
  EXPECT_EQ(record.cache_key().torch(), "2.3.0");
  EXPECT_EQ(record.cache_key().packages().at("numpy"), "1.26.4");
}

TEST(RunAutotune, CompiledWinsATieUnderMaxBatch) {
  TableExecutor table;
  for (uint32_t c : kCandidates) {
    if (c <= 8) {
      table.peak_gb[{"eager", c}] = 2.0 * c;
      table.peak_gb[{"compiled", c}] = 1.5 * c;
    }
  }
  CollectingSink sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome =
      RunAutotune(PlannedAssignment(true, "max_batch"), Card(), Versions(),
                  &table, &sink, stop);
  ASSERT_TRUE(outcome.autotune_record.has_value()) << outcome.error;
  EXPECT_EQ(outcome.autotune_record->selected().microbatch(), 8u);
  EXPECT_EQ(outcome.autotune_record->selected().mode(), "compiled");
}

TEST(RunAutotune, ResumesWithoutRunningWhatIsMeasured) {
  TableExecutor first = Truth();
  CollectingSink sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  first.stop = &stop;
  first.stop_after = 3;  // the daemon is told to stop after 3 runs
  v1::Assignment a = PlannedAssignment(true, "max_batch");
  const ExecutionOutcome handed =
      RunAutotune(a, Card(), Versions(), &first, &sink, stop);
  EXPECT_TRUE(handed.handed_back);
  EXPECT_FALSE(handed.autotune_record.has_value());
  ASSERT_EQ(first.ran.size(), 3u);

  // The re-queued assignment carries what was stored.
  for (const v1::BatchResult& r : sink.results) *a.add_measured() = r;
  TableExecutor second = Truth();
  std::atomic<StopReason> go{StopReason::kNone};
  const ExecutionOutcome resumed =
      RunAutotune(a, Card(), Versions(), &second, &sink, go);
  ASSERT_TRUE(resumed.autotune_record.has_value()) << resumed.error;
  const std::vector<std::pair<std::string, uint32_t>> rest = {
      {"compiled", 4}, {"compiled", 32}, {"compiled", 8}, {"compiled", 16}};
  EXPECT_EQ(second.ran, rest);
  EXPECT_EQ(resumed.autotune_record->selected().microbatch(), 16u);
  EXPECT_EQ(resumed.autotune_record->measurements_size(), 5);
}

TEST(RunAutotune, ACompileErrorIsAFailureRecordNotACrash) {
  TableExecutor table = Truth();
  table.mode_error["compiled"] =
      "SpecError: torch.compile needs torch >= 2.0, found 1.13.0a0";
  CollectingSink sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome =
      RunAutotune(PlannedAssignment(true, "max_batch"), Card(), Versions(),
                  &table, &sink, stop);
  ASSERT_TRUE(outcome.error.empty()) << outcome.error;
  ASSERT_TRUE(outcome.autotune_record.has_value());
  const v1::AutotuneRecord& record = *outcome.autotune_record;
  EXPECT_EQ(record.selected().mode(), "eager");
  EXPECT_EQ(record.selected().microbatch(), 8u);
  // One compiled run, then the mode is given up.
  int compiled_runs = 0;
  for (const auto& [mode, batch] : table.ran)
    compiled_runs += mode == "compiled";
  EXPECT_EQ(compiled_runs, 1);
  bool named = false;
  for (const auto& f : record.failures()) {
    if (f.mode() == "compiled" &&
        f.reason().find("torch.compile needs torch >= 2.0, found 1.13.0a0") !=
            std::string::npos) {
      named = true;
    }
  }
  EXPECT_TRUE(named);
}

TEST(RunAutotune, MaxThroughputMeasuresEveryFitBelowTheEdge) {
  TableExecutor table = Truth();
  CollectingSink sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome =
      RunAutotune(PlannedAssignment(false, "max_throughput"), Card(),
                  Versions(), &table, &sink, stop);
  ASSERT_TRUE(outcome.autotune_record.has_value()) << outcome.error;
  // Eager fits 1..8: all four measured.
  EXPECT_EQ(outcome.autotune_record->measurements_size(), 4);
  EXPECT_EQ(table.ran.size(), 5u);  // 4, 16, 8, then 1 and 2
}

}  // namespace
}  // namespace headroom::worker
