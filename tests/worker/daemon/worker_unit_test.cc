// The worker's pieces without a planner: child processes are read line by
// line and stopped on time; the simulated GPU keeps its hidden truth, goes
// OOM above its card and labels everything simulated.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/catalog/model_catalog.h"
#include "core/memory/memory_profile.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "worker/daemon/gpu_executors.h"
#include "worker/daemon/gpu_setup.h"
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

// Readings by GPU index, and results.
class RankCollect : public ExecutionSink {
 public:
  void Sample(const v1::BatchRun&, int64_t, const GpuReading& r) override {
    ASSERT_TRUE(r.gpu_index.has_value());
    peak[*r.gpu_index] = std::max(peak[*r.gpu_index], r.memory_used_bytes);
  }
  void BatchDone(const v1::BatchRun&, v1::BatchResult r) override {
    results.push_back(std::move(r));
  }
  std::map<uint32_t, uint64_t> peak;
  std::vector<v1::BatchResult> results;
};

v1::Assignment FourGpuAssignment(const v1::ModelSpec& spec,
                                 v1::TrainingSetup::Parallel strategy,
                                 std::vector<uint32_t> batches) {
  v1::Assignment assignment;
  assignment.set_assignment_id("p-2.1");
  *assignment.mutable_spec() = spec;
  assignment.mutable_setup()->set_gpus(4);
  assignment.mutable_setup()->set_parallel(strategy);
  for (uint32_t index : {0u, 1u, 2u, 3u}) assignment.add_gpu_indices(index);
  assignment.set_warmup_steps(1);
  assignment.set_steps(2);
  for (uint32_t batch : batches) assignment.add_runs()->set_batch(batch);
  return assignment;
}

SimGpuConfig FourL4s() {
  SimGpuConfig config;
  config.kind = "L4";
  config.memory_gb = 24;
  config.step_ms = 5;
  config.sample_ms = 2;
  config.gpus = 4;
  return config;
}

TEST(SimExecutorTest, AFourGpuNodeRunsEachRankUnderTheParallelRules) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  SimExecutor sim(FourL4s());
  const std::vector<v1::GpuDevice> devices = sim.Devices();
  ASSERT_EQ(devices.size(), 4u);
  std::set<std::string> uuids;
  for (uint32_t i = 0; i < 4; ++i) {
    EXPECT_EQ(devices[i].index(), i);
    EXPECT_EQ(devices[i].name(), "L4");
    uuids.insert(devices[i].uuid());
  }
  EXPECT_EQ(uuids.size(), 4u);
  EXPECT_EQ(devices[0].uuid(), "SIM-L4-1");  // a one-card node's, as before

  const v1::Assignment assignment = FourGpuAssignment(
      **catalog->Find("gpt2"), v1::TrainingSetup::FSDP_FULL, {8, 64});
  RankCollect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome = sim.Run(assignment, &sink, stop);
  ASSERT_TRUE(outcome.error.empty()) << outcome.error;
  ASSERT_EQ(sink.results.size(), 2u);
  // The hidden collective constant and rank 0's extra, in their ranges.
  const double collective = sim.CollectiveGb(v1::TrainingSetup::FSDP_FULL);
  EXPECT_GE(collective, 0.2);
  EXPECT_LE(collective, 0.8);
  EXPECT_GE(sim.rank0_extra(), 0);
  EXPECT_LE(sim.rank0_extra(), 0.03);
  EXPECT_NE(collective, sim.CollectiveGb(v1::TrainingSetup::DDP));
  // Each rank near its own truth; the truth is the sharded per-GPU profile
  // plus the constant, under a one-GPU run's, rank 0 holding its extra.
  const v1::BatchResult& fits = sink.results[0];
  ASSERT_EQ(fits.rank_peaks_gb_size(), 4);
  for (uint32_t r = 0; r < 4; ++r) {
    const double truth = sim.TrueRankPeakGb(assignment, 8, r);
    EXPECT_NEAR(fits.rank_peaks_gb(r), truth, 0.15 * truth) << r;
  }
  EXPECT_DOUBLE_EQ(sim.TrueRankPeakGb(assignment, 8, 0),
                   sim.TruePeakGb(assignment, 8) * (1 + sim.rank0_extra()));
  EXPECT_DOUBLE_EQ(sim.TrueRankPeakGb(assignment, 8, 3),
                   sim.TruePeakGb(assignment, 8));
  v1::Assignment one_gpu = assignment;
  one_gpu.clear_setup();
  one_gpu.clear_gpu_indices();
  EXPECT_LT(sim.TruePeakGb(assignment, 8) - collective,
            sim.TruePeakGb(one_gpu, 8));
  EXPECT_DOUBLE_EQ(fits.peak_allocated_gb(),
                   *std::max_element(fits.rank_peaks_gb().begin(),
                                     fits.rank_peaks_gb().end()));
  EXPECT_FALSE(fits.oom());
  EXPECT_FALSE(fits.has_host_peak_gb());  // nothing offloaded
  EXPECT_FALSE(fits.has_energy_j());
  // Samples of every rank's GPU; a rank that does not fit is OOM.
  EXPECT_EQ(sink.peak.size(), 4u);
  EXPECT_GT(sim.TrueRankPeakGb(assignment, 64, 0) + sim.context_gb(), 24);
  EXPECT_TRUE(sink.results[1].oom());
  EXPECT_EQ(sink.results[1].rank_peaks_gb_size(), 0);
  EXPECT_FALSE(sink.results[1].has_peak_allocated_gb());
}

TEST(SimExecutorTest, OffloadReportsHostMemoryAndBadRanksAreRefused) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  SimExecutor sim(FourL4s());
  v1::Assignment offload =
      FourGpuAssignment(**catalog->Find("gpt2"), v1::TrainingSetup::ZERO3, {8});
  offload.mutable_setup()->set_offload(v1::TrainingSetup::OPTIMIZER);
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(offload.spec(), offload.setup());
  ASSERT_TRUE(profile.ok()) << profile.status();
  const double host_gb = profile->parallel.host_bytes_per_node / 1e9;
  ASSERT_GT(host_gb, 0);
  RankCollect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  ASSERT_TRUE(sim.Run(offload, &sink, stop).error.empty());
  ASSERT_EQ(sink.results.size(), 1u);
  EXPECT_NEAR(sink.results[0].host_peak_gb(), host_gb, 0.15 * host_gb);
  EXPECT_EQ(sink.results[0].rank_peaks_gb_size(), 4);

  // Ranks without a GPU each, or a GPU the node does not have: refused.
  v1::Assignment short_list = offload;
  short_list.mutable_gpu_indices()->RemoveLast();
  EXPECT_EQ(sim.Run(short_list, &sink, stop).error,
            "setup.gpus = 4 but the assignment names 3 GPUs (gpu_indices); "
            "one per rank is needed");
  v1::Assignment elsewhere = offload;
  elsewhere.set_gpu_indices(3, 9);
  EXPECT_EQ(sim.Run(elsewhere, &sink, stop).error,
            "gpu_indices names GPU 9; this simulated node has 4 (0..3)");
}

// A node of several cards keeps a one-GPU probe's numbers what they were:
// the multi-GPU truths come from a stream of their own.
TEST(SimExecutorTest, OneGpuRunsDoNotDependOnTheNodesCardCount) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  SimGpuConfig one = FourL4s();
  one.gpus = 1;
  SimExecutor single(one);
  SimExecutor node(FourL4s());
  v1::Assignment assignment;
  *assignment.mutable_spec() = **catalog->Find("gpt2");
  assignment.set_steps(1);
  for (uint32_t batch : {4u, 8u}) assignment.add_runs()->set_batch(batch);
  Collect a, b;
  std::atomic<StopReason> stop{StopReason::kNone};
  ASSERT_TRUE(single.Run(assignment, &a, stop).error.empty());
  ASSERT_TRUE(node.Run(assignment, &b, stop).error.empty());
  ASSERT_EQ(a.results.size(), 2u);
  ASSERT_EQ(b.results.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(a.results[i].peak_allocated_gb(),
              b.results[i].peak_allocated_gb());
    EXPECT_EQ(a.results[i].rank_peaks_gb_size(), 0);
  }
  EXPECT_EQ(single.TruePeakGb(assignment, 8), node.TruePeakGb(assignment, 8));
  EXPECT_EQ(single.context_gb(), node.context_gb());
}

TEST(GpuSetupTest, HostMemoryAndTheSimulatedNodeAreChecked) {
  const std::string path =
      ::testing::TempDir() + "/meminfo-" + std::to_string(getpid());
  std::ofstream(path) << "MemFree:  100 kB\nMemTotal:       131072 kB\n";
  EXPECT_EQ(HostMemoryBytes(path), uint64_t{131072} * 1024);
  std::ofstream(path) << "MemTotal: lots\n";
  EXPECT_EQ(HostMemoryBytes(path), 0u);
  EXPECT_EQ(HostMemoryBytes(path + ".missing"), 0u);
  std::remove(path.c_str());
  GpuSetupOptions options;
  options.executors = {"sim"};
  options.sim.gpus = 4;
  options.sim.host_memory_gb = 256;
  absl::StatusOr<GpuSetup> setup = SetUpExecutors(options);
  ASSERT_TRUE(setup.ok()) << setup.status();
  EXPECT_EQ(setup->gpus.size(), 4u);
  EXPECT_EQ(setup->host_memory_bytes, uint64_t{256'000'000'000});
  for (int gpus : {0, 17}) {
    options.sim.gpus = gpus;
    EXPECT_EQ(
        SetUpExecutors(options).status().message(),
        "sim_gpus = " + std::to_string(gpus) +
            " is out of range; allowed 1..16 cards on the simulated node");
  }
  options.sim.gpus = 1;
  options.sim.host_memory_gb = -1;
  EXPECT_EQ(SetUpExecutors(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The simulated card is the size of its kind (the planner refuses a hello
  // whose card is not): within 10 % of the catalog's.
  options.sim.host_memory_gb = 64;
  options.sim.kind = "L4";
  options.sim.memory_gb = 1024;
  EXPECT_EQ(SetUpExecutors(options).status().message(),
            "sim_memory_gb = 1024 is not a L4: the catalog's has 24 GB; "
            "allowed within 10 % of it, or 0 for the catalog's");
  options.sim.memory_gb = 25.7;
  EXPECT_TRUE(SetUpExecutors(options).ok());
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

// Issue 30: the harness's context and phases become the BatchResult's, in
// GB; a phase without a figure keeps it absent.
TEST(TorchExecutorTest, ReadsTheContextAndEveryPhase) {
  GpuExecutorOptions options;
  options.python = "/bin/sh";
  options.harness = FakeHarness(
      "phases",
      "echo '{\"event\":\"result\",\"batch\":16,\"oom\":false,"
      "\"peak_allocated_bytes\":5500000000,\"peak_reserved_bytes\":"
      "6000000000,\"steps\":2,\"error\":\"\","
      "\"device_context_bytes\":520093696,\"phases\":["
      "{\"phase\":\"load\",\"peak_allocated_bytes\":1000000000,"
      "\"peak_reserved_bytes\":1073741824,\"device_bytes\":1600000000},"
      "{\"phase\":\"first-step\",\"peak_allocated_bytes\":5500000000,"
      "\"peak_reserved_bytes\":6000000000,\"device_bytes\":null},"
      "{\"phase\":\"eval\",\"peak_allocated_bytes\":2000000000,"
      "\"peak_reserved_bytes\":6000000000,\"device_bytes\":6500000000}],"
      "\"unmeasured_phases\":[]}'\n");
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  TorchExecutor(options).Run(TorchAssignment(30), &sink, stop);
  ASSERT_EQ(sink.results.size(), 1u);
  const v1::BatchResult& r = sink.results[0];
  EXPECT_TRUE(r.error().empty()) << r.error();
  EXPECT_DOUBLE_EQ(r.device_context_gb(), 0.520093696);
  ASSERT_EQ(r.phases_size(), 3);
  EXPECT_EQ(r.phases(0).phase(), "load");
  EXPECT_DOUBLE_EQ(r.phases(0).allocated_gb(), 1.0);
  EXPECT_DOUBLE_EQ(r.phases(0).reserved_gb(), 1.073741824);
  EXPECT_DOUBLE_EQ(r.phases(0).device_gb(), 1.6);
  EXPECT_EQ(r.phases(1).phase(), "first-step");
  EXPECT_FALSE(r.phases(1).has_device_gb());
  EXPECT_DOUBLE_EQ(r.phases(2).device_gb(), 6.5);
}

// A bad figure or phase name is the batch's error, naming it; nothing of
// the context or phases is kept, and the executor goes on.
TEST(TorchExecutorTest, ABadPhaseOrFigureIsTheBatchsError) {
  GpuExecutorOptions options;
  options.python = "/bin/sh";
  const std::string head =
      "echo '{\"event\":\"result\",\"batch\":16,\"oom\":false,"
      "\"peak_allocated_bytes\":5500000000,\"error\":\"\",";
  const struct {
    const char* tail;
    const char* message;
  } cases[] = {
      {"\"phases\":[{\"phase\":\"lunch\",\"peak_allocated_bytes\":1}]}",
       "the harness's result phases[0].phase = \"lunch\" is unknown; "
       "allowed load, first-step, step, eval, generate, save"},
      {"\"phases\":[{\"peak_allocated_bytes\":1}]}",
       "phases[0].phase = (none) is unknown"},
      {"\"phases\":[{\"phase\":\"step\",\"peak_reserved_bytes\":-5}]}",
       "the harness's result phases[0].peak_reserved_bytes = -5 is not a "
       "byte count; allowed null or 0 .. "},
      {"\"phases\":[{\"phase\":\"step\",\"device_bytes\":1e30}]}",
       "phases[0].device_bytes = 1e+30 is not a byte count"},
      // Python's json writes a non-finite float as NaN / Infinity, which is
      // no JSON: the line is not read, and the batch says so.
      {"\"phases\":[{\"phase\":\"step\",\"device_bytes\":NaN}]}",
       "harness exited with 0 and no result"},
      {"\"phases\":[{\"phase\":\"step\",\"device_bytes\":\"4\"}]}",
       "phases[0].device_bytes = \"4\" is not a byte count"},
      {"\"device_context_bytes\":-1}",
       "the harness's result line.device_context_bytes = -1 is not a byte "
       "count"},
      {"\"phases\":{\"phase\":\"step\"}}",
       "phases is not a list of at most 6 phases"},
  };
  for (const auto& c : cases) {
    options.harness = FakeHarness("bad-phase", head + c.tail + "'\n");
    Collect sink;
    std::atomic<StopReason> stop{StopReason::kNone};
    const ExecutionOutcome outcome =
        TorchExecutor(options).Run(TorchAssignment(30), &sink, stop);
    EXPECT_TRUE(outcome.error.empty()) << outcome.error;
    ASSERT_EQ(sink.results.size(), 1u) << c.tail;
    const v1::BatchResult& r = sink.results[0];
    EXPECT_THAT(r.error(), ::testing::HasSubstr(c.message)) << c.tail;
    EXPECT_EQ(r.phases_size(), 0);
    EXPECT_FALSE(r.has_device_context_gb());
  }
}

// The sim reports the context and phases from its own model, in the
// device's order, and the batch's peak is its largest phase.
TEST(SimExecutorTest, ReportsTheContextAndPhasesInTheDevicesOrder) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  SimGpuConfig config;
  config.kind = "L4";
  config.memory_gb = 24;
  config.step_ms = 5;
  config.sample_ms = 2;
  SimExecutor sim(config);
  v1::Assignment assignment;
  assignment.set_assignment_id("p-1.2");
  *assignment.mutable_spec() = **catalog->Find("gpt2");
  assignment.set_warmup_steps(1);
  assignment.set_steps(1);
  assignment.add_runs()->set_batch(1);
  std::atomic<StopReason> stop{StopReason::kNone};
  {
    Collect sink;
    sim.Run(assignment, &sink, stop);
    ASSERT_EQ(sink.results.size(), 1u);
    const v1::BatchResult& r = sink.results[0];
    EXPECT_DOUBLE_EQ(r.device_context_gb(), sim.context_gb());
    std::vector<std::string> names;
    for (const v1::PhaseMeasurement& p : r.phases()) {
      names.push_back(p.phase());
      EXPECT_GT(p.allocated_gb(), 0) << p.phase();
      EXPECT_DOUBLE_EQ(p.reserved_gb(), p.allocated_gb() * 1.05) << p.phase();
      EXPECT_DOUBLE_EQ(p.device_gb(), p.reserved_gb() + sim.context_gb());
      EXPECT_LE(p.allocated_gb(), r.peak_allocated_gb()) << p.phase();
    }
    EXPECT_EQ(names, (std::vector<std::string>{"load", "first-step", "step"}));
    EXPECT_LT(r.phases(0).allocated_gb(), r.phases(2).allocated_gb());
    EXPECT_DOUBLE_EQ(r.phases(2).allocated_gb(), r.peak_allocated_gb());
    EXPECT_GE(r.peak_reserved_gb(), r.peak_allocated_gb());
    EXPECT_GE(r.device_peak_gb(), r.peak_reserved_gb());
  }
  // Eval at a large batch and save, asked for; expandable segments.
  v1::TrainingSetup& setup = *assignment.mutable_setup();
  for (v1::JobPhase p : {v1::LOAD, v1::STEP, v1::EVAL, v1::SAVE}) {
    setup.add_phases(p);
  }
  setup.set_eval_batch(16);
  setup.set_expandable_segments(true);
  Collect sink;
  sim.Run(assignment, &sink, stop);
  ASSERT_EQ(sink.results.size(), 1u);
  const v1::BatchResult& r = sink.results[0];
  ASSERT_EQ(r.phases_size(), 5);
  EXPECT_EQ(r.phases(3).phase(), "eval");
  EXPECT_EQ(r.phases(4).phase(), "save");
  // Forward-only at 16 beats the training step at 1 here: it is the peak.
  EXPECT_GT(r.phases(3).allocated_gb(), r.phases(2).allocated_gb());
  EXPECT_DOUBLE_EQ(r.peak_allocated_gb(), r.phases(3).allocated_gb());
  EXPECT_DOUBLE_EQ(r.phases(3).reserved_gb(),
                   r.phases(3).allocated_gb() * 1.02);
  EXPECT_DOUBLE_EQ(r.peak_reserved_gb(), r.peak_allocated_gb() * 1.02);
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
