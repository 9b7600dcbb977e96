// The worker's pieces without a planner: child processes are read line by
// line and stopped on time; the simulated GPU keeps its hidden truth, goes
// OOM above its card and labels everything simulated.

#include <signal.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "server/core/catalog/model_catalog.h"
#include "server/io/catalog_files.h"
#include "worker/daemon/gpu_executors.h"
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
  auto catalog = LoadModelCatalog(kRoot + "/models");
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
  auto catalog = LoadModelCatalog(kRoot + "/models");
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

namespace headroom::worker {
namespace {

// A stand-in for the Python harness: a shell script speaking its protocol.
std::string FakeHarness(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name + ".sh";
  std::ofstream(path) << body;
  return path;
}

v1::Assignment TorchAssignment(double timeout_s) {
  v1::Assignment assignment;
  assignment.set_assignment_id("p-3.1");
  assignment.set_probe_id("p-3");
  assignment.mutable_spec()->set_name("tiny");
  assignment.set_warmup_steps(1);
  assignment.set_steps(2);
  assignment.set_batch_timeout_s(timeout_s);
  assignment.add_runs()->set_batch(16);
  return assignment;
}

TEST(TorchExecutorTest, ReadsTheHarnessResultLine) {
  GpuExecutorOptions options;
  options.python = "/bin/sh";
  // The batch comes back in the result, as the harness echoes it.
  options.harness = FakeHarness(
      "ok",
      "echo '{\"event\":\"hello\",\"torch\":\"2.11.0\"}'\n"
      "echo '{\"event\":\"batch_start\",\"batch\":16}'\n"
      "echo '{\"event\":\"result\",\"batch\":16,\"oom\":false,"
      "\"peak_allocated_bytes\":5500000000,\"peak_reserved_bytes\":"
      "6000000000,\"step_seconds\":0.25,\"steps\":2,\"error\":\"\"}'\n");
  TorchExecutor torch(options);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome = torch.Run(TorchAssignment(30), &sink, stop);
  EXPECT_TRUE(outcome.error.empty()) << outcome.error;
  ASSERT_EQ(sink.results.size(), 1u);
  const v1::BatchResult& r = sink.results[0];
  EXPECT_EQ(r.batch(), 16u);
  EXPECT_FALSE(r.oom());
  EXPECT_DOUBLE_EQ(r.peak_allocated_gb(), 5.5);
  EXPECT_DOUBLE_EQ(r.peak_reserved_gb(), 6.0);
  EXPECT_DOUBLE_EQ(r.step_seconds(), 0.25);
  EXPECT_FALSE(r.simulated());
  EXPECT_TRUE(r.error().empty());
}

TEST(TorchExecutorTest, OomCrashAndTimeoutAreResults) {
  GpuExecutorOptions options;
  options.python = "/bin/sh";
  std::atomic<StopReason> stop{StopReason::kNone};
  {
    options.harness =
        FakeHarness("oom",
                    "echo '{\"event\":\"result\",\"batch\":16,\"oom\":true,"
                    "\"peak_allocated_bytes\":null,\"error\":\"\"}'\n");
    Collect sink;
    TorchExecutor(options).Run(TorchAssignment(30), &sink, stop);
    ASSERT_EQ(sink.results.size(), 1u);
    EXPECT_TRUE(sink.results[0].oom());
    EXPECT_FALSE(sink.results[0].has_peak_allocated_gb());
  }
  {
    options.harness =
        FakeHarness("crash", "echo 'Segmentation fault' >&2\nexit 139\n");
    Collect sink;
    TorchExecutor(options).Run(TorchAssignment(30), &sink, stop);
    ASSERT_EQ(sink.results.size(), 1u);
    EXPECT_NE(sink.results[0].error().find("exited with 139"),
              std::string::npos)
        << sink.results[0].error();
    EXPECT_NE(sink.results[0].error().find("Segmentation fault"),
              std::string::npos);
  }
  {
    options.harness = FakeHarness("hang", "exec sleep 30\n");
    Collect sink;
    const auto start = std::chrono::steady_clock::now();
    TorchExecutor(options).Run(TorchAssignment(0.3), &sink, stop);
    ASSERT_EQ(sink.results.size(), 1u);
    EXPECT_NE(sink.results[0].error().find("timed out"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - start,
              std::chrono::seconds(10));
  }
}

}  // namespace
}  // namespace headroom::worker
