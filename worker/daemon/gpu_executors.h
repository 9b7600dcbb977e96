#ifndef HEADROOM_WORKER_DAEMON_GPU_EXECUTORS_H_
#define HEADROOM_WORKER_DAEMON_GPU_EXECUTORS_H_

// The executors that run on a real GPU: `torch` (the Python harness that
// builds the planner's own spec, one process per batch run) and `cuda` (the
// native probe program). Both sample the device through NVML while their
// child runs; without NVML they still measure, with no device-level or
// energy figures.

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
