#ifndef HEADROOM_WORKER_DAEMON_GPU_EXECUTORS_H_
#define HEADROOM_WORKER_DAEMON_GPU_EXECUTORS_H_

// The executors that run on a real GPU: `torch` (the Python harness that
// builds the planner's own spec, one process per batch run) and `cuda` (the
// native probe program). Both sample the device through NVML while their
// child runs; without NVML they still measure, with no device-level or
// energy figures.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/daemon/executor.h"
#include "worker/gpu/cuda_driver.h"
#include "worker/gpu/nvml.h"

namespace headroom::worker {

struct GpuExecutorOptions {
  std::shared_ptr<const gpu::Nvml> nvml;  // null without NVML
  std::vector<gpu::GpuInfo> gpus;         // by CUDA ordinal
  int sample_ms = 20;
  std::string python = "python3";
  std::string harness;     // headroom_torch_probe.py
  std::string cuda_probe;  // headroom-cuda-probe
};

// The command the torch executor runs for one training batch run. One GPU
// (setup.gpus 0 or 1): the harness itself on cuda:gpu_index. N > 1:
// `env CUDA_VISIBLE_DEVICES=<gpu_indices> ... python -m
// torch.distributed.run --nnodes 1 --nproc_per_node N --master_addr
// 127.0.0.1 --master_port <port> <harness> run ... --device cuda`, so rank r
// runs on cuda:r, which is the assignment's gpu_indices[r] (mapped through
// `parent_visible`, the worker's own CUDA_VISIBLE_DEVICES, when it has one).
// `error` says why the assignment's GPUs do not fit its setup (then argv is
// empty).
struct HarnessCommand {
  std::vector<std::string> argv;
  std::string error;
};
HarnessCommand TorchRunCommand(const GpuExecutorOptions& options,
                               const v1::Assignment& assignment,
                               const v1::BatchRun& run,
                               const std::string& spec_path,
                               const std::string& setup_json,
                               uint16_t master_port,
                               const std::string& parent_visible);

// The local GPUs a run samples: gpu_indices for a multi-GPU setup, else
// gpu_index.
std::vector<uint32_t> AssignmentGpus(const v1::Assignment& assignment);

// A free TCP port on 127.0.0.1 (bound and released), 0 when none.
uint16_t FreeLoopbackPort();

class TorchExecutor final : public Executor {
 public:
  explicit TorchExecutor(GpuExecutorOptions options)
      : options_(std::move(options)) {}
  std::string name() const override { return "torch"; }
  ExecutionOutcome Run(const v1::Assignment& assignment, ExecutionSink* sink,
                       const std::atomic<StopReason>& stop) override;

 private:
  // An energy probe: the harness's `generate` per quantization.
  ExecutionOutcome RunEnergy(const v1::Assignment& assignment,
                             ExecutionSink* sink,
                             const std::atomic<StopReason>& stop);
  GpuExecutorOptions options_;
};

class CudaExecutor final : public Executor {
 public:
  explicit CudaExecutor(GpuExecutorOptions options)
      : options_(std::move(options)) {}
  std::string name() const override { return "cuda"; }
  ExecutionOutcome Run(const v1::Assignment& assignment, ExecutionSink* sink,
                       const std::atomic<StopReason>& stop) override;

 private:
  GpuExecutorOptions options_;
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_GPU_EXECUTORS_H_
