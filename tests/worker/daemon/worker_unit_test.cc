// The worker's pieces without a planner: child processes are read line by
// line and stopped on time; the simulated GPU keeps its hidden truth, goes
// OOM above its card and labels everything simulated.

#include <signal.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/catalog/model_catalog.h"
#include "worker/daemon/sim_executor.h"
#include "worker/daemon/subprocess.h"

namespace headroom::worker {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

TEST(SubprocessTest, ReadsLinesAndExitCode) {
  std::vector<std::string> lines;
  const ProcessResult result = RunProcess(
      {"/bin/sh", "-c", "echo one; echo two >&2; echo three; exit 3"},
      std::chrono::seconds(10),
      [&](const std::string& line) { lines.push_back(line); }, nullptr);
  EXPECT_EQ(result.exit_code, 3);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "three"}));
  EXPECT_EQ(result.stderr_tail, "two\n");
}

TEST(SubprocessTest, StopsAProgramThatRunsTooLong) {
  const auto start = std::chrono::steady_clock::now();
  const ProcessResult result = RunProcess(
      {"/bin/sleep", "30"}, std::chrono::milliseconds(200), nullptr, nullptr);
  EXPECT_TRUE(result.timed_out);
  EXPECT_EQ(result.exit_code, 128 + SIGTERM);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST(SubprocessTest, StopsWhenAsked) {
  std::atomic<bool> stop{false};
  std::vector<std::string> lines;
  const ProcessResult result = RunProcess(
      {"/bin/sh", "-c", "echo started; exec sleep 30"},
      std::chrono::seconds(60),
      [&](const std::string& line) {
        lines.push_back(line);
        stop = true;
      },
      [&] { return stop.load(); });
  EXPECT_TRUE(result.stopped);
  EXPECT_FALSE(result.timed_out);
  EXPECT_EQ(lines, std::vector<std::string>{"started"});
}

TEST(SubprocessTest, AMissingProgramIsAResult) {
  const ProcessResult result = RunProcess(
      {"/nonexistent/probe"}, std::chrono::seconds(5), nullptr, nullptr);
  EXPECT_EQ(result.exit_code, 127);
  EXPECT_NE(result.stderr_tail.find("cannot run"), std::string::npos);
}

class Collect : public ExecutionSink {
 public:
  void Sample(const v1::BatchRun&, int64_t, const GpuReading& r) override {
    peak = std::max(peak, r.memory_used_bytes);
    ++samples;
  }
  void BatchDone(const v1::BatchRun&, v1::BatchResult r) override {
    results.push_back(std::move(r));
  }
  uint64_t peak = 0;
  int samples = 0;
  std::vector<v1::BatchResult> results;
};

TEST(SimExecutorTest, HiddenTruthNoiseAndOom) {
  auto catalog = ModelCatalog::LoadDirectory(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  SimGpuConfig config;
  config.kind = "L4";
  config.memory_gb = 24;
  config.step_ms = 5;
  config.sample_ms = 2;
  SimExecutor sim(config);
  v1::Assignment assignment;
  assignment.set_assignment_id("p-1.1");
  *assignment.mutable_spec() = **catalog->Find("gpt2");
  assignment.set_warmup_steps(1);
  assignment.set_steps(2);
  for (uint32_t batch : {8u, 64u}) assignment.add_runs()->set_batch(batch);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome = sim.Run(assignment, &sink, stop);
  EXPECT_TRUE(outcome.error.empty()) << outcome.error;
  ASSERT_EQ(sink.results.size(), 2u);
  const double truth = sim.TruePeakGb(assignment, 8);
  ASSERT_GT(truth, 0);
  EXPECT_NEAR(sink.results[0].peak_allocated_gb(), truth, 0.15 * truth);
  EXPECT_FALSE(sink.results[0].oom());
  EXPECT_TRUE(sink.results[0].simulated());
  EXPECT_GT(sim.TruePeakGb(assignment, 64) + sim.context_gb(), 24);
  EXPECT_TRUE(sink.results[1].oom());
  EXPECT_FALSE(sink.results[1].has_peak_allocated_gb());
  EXPECT_GT(sink.samples, 2);
  EXPECT_LE(sink.peak, static_cast<uint64_t>(24e9) + 1);
  EXPECT_TRUE(sim.Device().simulated());
}

TEST(SimExecutorTest, ShutdownHandsBackCancelStops) {
  auto catalog = ModelCatalog::LoadDirectory(kRoot + "/models");
  ASSERT_TRUE(catalog.ok());
  SimExecutor sim(SimGpuConfig{});
  v1::Assignment assignment;
  *assignment.mutable_spec() = **catalog->Find("simple-cnn");
  assignment.add_runs()->set_batch(8);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kShutdown};
  ExecutionOutcome outcome = sim.Run(assignment, &sink, stop);
  EXPECT_TRUE(outcome.handed_back);
  EXPECT_TRUE(sink.results.empty());
  stop = StopReason::kCancelled;
  outcome = sim.Run(assignment, &sink, stop);
  EXPECT_FALSE(outcome.handed_back);
  EXPECT_EQ(outcome.error, "cancelled");
}

}  // namespace
}  // namespace headroom::worker
