// The torch executor's multi-GPU launch without a GPU: the command line and
// environment it builds for N ranks (torch.distributed.run, one process per
// GPU of the assignment, CUDA_VISIBLE_DEVICES from gpu_indices), the
// assignments it refuses, and a result line's per-rank peaks and host
// memory read into the BatchResult (a fake python stands in for torchrun).

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "worker/daemon/gpu_executors.h"

namespace headroom::worker {
namespace {

struct Collect : ExecutionSink {
  void Sample(const v1::BatchRun&, int64_t, const GpuReading&) override {}
  void BatchDone(const v1::BatchRun&, v1::BatchResult result) override {
    results.push_back(std::move(result));
  }
  std::vector<v1::BatchResult> results;
};

v1::Assignment MultiGpu(uint32_t gpus, const std::vector<uint32_t>& indices) {
  v1::Assignment assignment;
  assignment.set_assignment_id("p-9.1");
  assignment.mutable_spec()->set_name("tiny");
  assignment.mutable_setup()->set_gpus(gpus);
  assignment.mutable_setup()->set_parallel(v1::TrainingSetup::FSDP_FULL);
  assignment.set_gpu_index(indices.empty() ? 0 : indices[0]);
  for (uint32_t index : indices) assignment.add_gpu_indices(index);
  assignment.set_warmup_steps(1);
  assignment.set_steps(2);
  assignment.set_batch_timeout_s(30);
  assignment.add_runs()->set_batch(8);
  return assignment;
}

// The index of `value` in argv, or -1.
int Find(const std::vector<std::string>& argv, const std::string& value) {
  auto it = std::find(argv.begin(), argv.end(), value);
  return it == argv.end() ? -1 : static_cast<int>(it - argv.begin());
}

// The argument after flag `flag`, or "" when absent.
std::string After(const std::vector<std::string>& argv,
                  const std::string& flag) {
  const int i = Find(argv, flag);
  return i < 0 || i + 1 >= static_cast<int>(argv.size()) ? "" : argv[i + 1];
}

GpuExecutorOptions Options() {
  GpuExecutorOptions options;
  options.python = "/opt/venv/bin/python3";
  options.harness = "/usr/local/libexec/headroom_torch_probe.py";
  return options;
}

TEST(TorchRunCommandTest, FourRanksRunUnderTorchrunOnTheAssignmentsGpus) {
  const v1::Assignment assignment = MultiGpu(4, {2, 3, 4, 5});
  const HarnessCommand command =
      TorchRunCommand(Options(), assignment, assignment.runs(0), "/tmp/s.json",
                      "{\"gpus\":4}", 29555, "");
  ASSERT_TRUE(command.error.empty()) << command.error;
  const std::vector<std::string>& argv = command.argv;
  ASSERT_FALSE(argv.empty());
  EXPECT_EQ(argv[0], "env");
  EXPECT_GE(Find(argv, "CUDA_VISIBLE_DEVICES=2,3,4,5"), 1);
  EXPECT_GE(Find(argv, "NCCL_SOCKET_IFNAME=lo"), 1);
  // env's assignments come before the program, then python -m torchrun.
  const int python = Find(argv, "/opt/venv/bin/python3");
  ASSERT_GT(python, Find(argv, "CUDA_VISIBLE_DEVICES=2,3,4,5"));
  EXPECT_EQ(argv[python + 1], "-m");
  EXPECT_EQ(argv[python + 2], "torch.distributed.run");
  EXPECT_EQ(After(argv, "--nnodes"), "1");
  EXPECT_EQ(After(argv, "--nproc_per_node"), "4");
  EXPECT_EQ(After(argv, "--master_addr"), "127.0.0.1");
  EXPECT_EQ(After(argv, "--master_port"), "29555");
  EXPECT_EQ(After(argv, "--max_restarts"), "0");
  // torchrun's own flags end where the harness starts; its flags follow.
  const int harness = Find(argv, "/usr/local/libexec/headroom_torch_probe.py");
  ASSERT_GT(harness, Find(argv, "--master_port"));
  EXPECT_EQ(argv[harness + 1], "run");
  EXPECT_EQ(After(argv, "--spec"), "/tmp/s.json");
  EXPECT_EQ(After(argv, "--setup"), "{\"gpus\":4}");
  EXPECT_EQ(After(argv, "--batches"), "8");
  // Each rank takes cuda:LOCAL_RANK of the visible four.
  EXPECT_EQ(After(argv, "--device"), "cuda");
  EXPECT_EQ(Find(argv, "--compile"), -1);
}

TEST(TorchRunCommandTest, MapsThroughTheWorkersOwnVisibleDevices) {
  const v1::Assignment assignment = MultiGpu(4, {2, 3, 4, 5});
  const HarnessCommand command =
      TorchRunCommand(Options(), assignment, assignment.runs(0), "/tmp/s.json",
                      "{}", 29555, "GPU-a,GPU-b,7,6,5,4");
  ASSERT_TRUE(command.error.empty()) << command.error;
  EXPECT_GE(Find(command.argv, "CUDA_VISIBLE_DEVICES=7,6,5,4"), 1);
  const HarnessCommand beyond =
      TorchRunCommand(Options(), assignment, assignment.runs(0), "/tmp/s.json",
                      "{}", 29555, "0,1,2,3");
  EXPECT_NE(beyond.error.find("gpu_indices[2] = 4 is beyond"),
            std::string::npos)
      << beyond.error;
  EXPECT_TRUE(beyond.argv.empty());
}

TEST(TorchRunCommandTest, OneGpuRunsTheHarnessItself) {
  v1::Assignment assignment = MultiGpu(1, {});
  assignment.set_gpu_index(3);
  assignment.mutable_runs(0)->set_mode("compiled");
  const HarnessCommand command = TorchRunCommand(
      Options(), assignment, assignment.runs(0), "/tmp/s.json", "{}", 0, "");
  ASSERT_TRUE(command.error.empty()) << command.error;
  ASSERT_GE(command.argv.size(), 3u);
  EXPECT_EQ(command.argv[0], "/opt/venv/bin/python3");
  EXPECT_EQ(command.argv[1], "/usr/local/libexec/headroom_torch_probe.py");
  EXPECT_EQ(After(command.argv, "--device"), "cuda:3");
  EXPECT_EQ(Find(command.argv, "torch.distributed.run"), -1);
  EXPECT_GE(Find(command.argv, "--compile"), 0);
}

TEST(TorchRunCommandTest, RefusesGpusThatDoNotFitTheSetup) {
  const GpuExecutorOptions options = Options();
  struct Case {
    v1::Assignment assignment;
    uint16_t port;
    std::string error;
  };
  std::vector<Case> cases;
  cases.push_back({MultiGpu(4, {2, 3, 4}), 29555,
                   "assignment.gpu_indices has 3 entries for setup.gpus = 4"});
  cases.push_back({MultiGpu(4, {2, 3, 3, 5}), 29555,
                   "assignment.gpu_indices[2] = 3 repeats a GPU"});
  {
    v1::Assignment assignment = MultiGpu(2, {2, 3});
    assignment.set_gpu_index(0);
    cases.push_back({assignment, 29555,
                     "assignment.gpu_indices[0] = 2 is not gpu_index 0"});
  }
  cases.push_back(
      {MultiGpu(600, {}), 29555, "setup.gpus = 600 is out of range"});
  cases.push_back({MultiGpu(2, {0, 1}), 0, "no free loopback port"});
  for (const Case& c : cases) {
    const HarnessCommand command =
        TorchRunCommand(options, c.assignment, c.assignment.runs(0),
                        "/tmp/s.json", "{}", c.port, "");
    EXPECT_NE(command.error.find(c.error), std::string::npos)
        << "want '" << c.error << "', got '" << command.error << "'";
    EXPECT_TRUE(command.argv.empty());
  }
  // A worker that knows its GPUs refuses one it does not have.
  GpuExecutorOptions known = options;
  for (int i = 0; i < 4; ++i) {
    gpu::GpuInfo info;
    info.index = i;
    known.gpus.push_back(info);
  }
  const v1::Assignment assignment = MultiGpu(2, {3, 4});
  const HarnessCommand command = TorchRunCommand(
      known, assignment, assignment.runs(0), "/tmp/s.json", "{}", 29555, "");
  EXPECT_NE(
      command.error.find("gpu_indices[1] = 4 is not a GPU of this worker"),
      std::string::npos)
      << command.error;
}

TEST(TorchRunCommandTest, FreeLoopbackPortIsUsable) {
  const uint16_t port = FreeLoopbackPort();
  EXPECT_GT(port, 0);
}

// A stand-in for python: answers as torchrun's rank 0 would, but only when
// it was started as `python -m torch.distributed.run` with the four GPUs
// visible; otherwise its result line says what it saw.
std::string FakePython(const std::string& name, const std::string& result) {
  const std::string path = ::testing::TempDir() + "/" + name + "-python";
  std::ofstream(path)
      << "#!/bin/sh\n"
         "if [ \"$1 $2\" != '-m torch.distributed.run' ] || "
         "[ \"$CUDA_VISIBLE_DEVICES\" != '2,3,4,5' ]; then\n"
         "  echo \"{\\\"event\\\":\\\"result\\\",\\\"oom\\\":false,"
         "\\\"error\\\":\\\"started as $1 $2 with CUDA_VISIBLE_DEVICES="
         "$CUDA_VISIBLE_DEVICES\\\"}\"\n"
         "  exit 0\n"
         "fi\n"
         "echo 'torchrun: 4 ranks' >&2\n"
         "echo '"
      << result << "'\n";
  chmod(path.c_str(), 0755);
  return path;
}

TEST(TorchExecutorDistributedTest, ReadsEveryRanksPeakAndHostMemory) {
  GpuExecutorOptions options = Options();
  options.python = FakePython(
      "four",
      "{\"event\":\"result\",\"batch\":8,\"oom\":false,"
      "\"peak_allocated_bytes\":2500000000,\"step_seconds\":0.5,\"steps\":2,"
      "\"error\":\"\",\"world_size\":4,"
      "\"rank_peaks_gb\":[1.5,2.5,2.0,1.0],\"host_peak_gb\":12.5}");
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  const ExecutionOutcome outcome =
      TorchExecutor(options).Run(MultiGpu(4, {2, 3, 4, 5}), &sink, stop);
  EXPECT_TRUE(outcome.error.empty()) << outcome.error;
  ASSERT_EQ(sink.results.size(), 1u);
  const v1::BatchResult& r = sink.results[0];
  EXPECT_TRUE(r.error().empty()) << r.error();
  EXPECT_DOUBLE_EQ(r.peak_allocated_gb(), 2.5);
  ASSERT_EQ(r.rank_peaks_gb_size(), 4);
  EXPECT_DOUBLE_EQ(r.rank_peaks_gb(0), 1.5);
  EXPECT_DOUBLE_EQ(r.rank_peaks_gb(1), 2.5);
  EXPECT_DOUBLE_EQ(r.rank_peaks_gb(2), 2.0);
  EXPECT_DOUBLE_EQ(r.rank_peaks_gb(3), 1.0);
  ASSERT_TRUE(r.has_host_peak_gb());
  EXPECT_DOUBLE_EQ(r.host_peak_gb(), 12.5);
  EXPECT_EQ(r.timed_steps(), 2u);
}

TEST(TorchExecutorDistributedTest, IgnoresRankListsThatDoNotFit) {
  std::atomic<StopReason> stop{StopReason::kNone};
  for (const char* peaks :
       {"[1.5,2.5,2.0]", "[1.5,2.5,2.0,\"x\"]", "[1.5,2.5,2.0,-1]",
        "[1.5,2.5,2.0,1e9]", "{\"0\":1.5}"}) {
    GpuExecutorOptions options = Options();
    options.python = FakePython(
        "bad", std::string("{\"event\":\"result\",\"batch\":8,\"oom\":false,"
                           "\"peak_allocated_bytes\":2500000000,\"error\":\"\","
                           "\"host_peak_gb\":-3,\"rank_peaks_gb\":") +
                   peaks + "}");
    Collect sink;
    TorchExecutor(options).Run(MultiGpu(4, {2, 3, 4, 5}), &sink, stop);
    ASSERT_EQ(sink.results.size(), 1u) << peaks;
    EXPECT_TRUE(sink.results[0].error().empty()) << sink.results[0].error();
    EXPECT_EQ(sink.results[0].rank_peaks_gb_size(), 0) << peaks;
    EXPECT_FALSE(sink.results[0].has_host_peak_gb()) << peaks;
    EXPECT_DOUBLE_EQ(sink.results[0].peak_allocated_gb(), 2.5);
  }
}

TEST(TorchExecutorDistributedTest, OneGpuParallelReportsHostMemoryOnly) {
  // A parallel setup on one GPU runs the harness directly (a group of one):
  // its host memory is kept, a rank list is not (that is for gpus > 1).
  GpuExecutorOptions options = Options();
  options.python = "/bin/sh";
  options.harness = ::testing::TempDir() + "/one-gpu.sh";
  std::ofstream(options.harness)
      << "echo '{\"event\":\"result\",\"batch\":8,\"oom\":false,"
         "\"peak_allocated_bytes\":3000000000,\"error\":\"\","
         "\"world_size\":1,\"rank_peaks_gb\":[3.0],\"host_peak_gb\":41.5}'\n";
  v1::Assignment assignment = MultiGpu(1, {});
  assignment.mutable_setup()->set_offload(v1::TrainingSetup::PARAMS);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  TorchExecutor(options).Run(assignment, &sink, stop);
  ASSERT_EQ(sink.results.size(), 1u);
  EXPECT_TRUE(sink.results[0].error().empty()) << sink.results[0].error();
  EXPECT_DOUBLE_EQ(sink.results[0].peak_allocated_gb(), 3.0);
  EXPECT_EQ(sink.results[0].rank_peaks_gb_size(), 0);
  ASSERT_TRUE(sink.results[0].has_host_peak_gb());
  EXPECT_DOUBLE_EQ(sink.results[0].host_peak_gb(), 41.5);
}

TEST(TorchExecutorDistributedTest, AnAssignmentWithoutItsGpusIsAnErrorResult) {
  GpuExecutorOptions options = Options();
  options.python =
      FakePython("never", "{\"event\":\"result\",\"error\":\"ran\"}");
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  TorchExecutor(options).Run(MultiGpu(4, {2}), &sink, stop);
  ASSERT_EQ(sink.results.size(), 1u);
  EXPECT_NE(sink.results[0].error().find("gpu_indices has 1 entries"),
            std::string::npos)
      << sink.results[0].error();
}

}  // namespace
}  // namespace headroom::worker
