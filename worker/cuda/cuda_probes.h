#ifndef HEADROOM_WORKER_CUDA_CUDA_PROBES_H_
#define HEADROOM_WORKER_CUDA_CUDA_PROBES_H_

// The native CUDA probes of one device (README.md, "Workers and probes"):
// context and cuBLAS overhead, copy bandwidth, and energy per byte copied and
// per FLOP of a bf16 GEMM loop. Implemented in cuda_probes.cu; this header
// is plain C++ so that callers need no CUDA headers.

#include <functional>
#include <string>

#include "worker/cuda/probe_report.h"

namespace headroom {
namespace cuda {

// Why the probes stopped: the stage they were in and what failed, with the
// CUDA error's name and a hint where one is known (driver too old for this
// runtime, no kernel image for the device's architecture, ...).
struct ProbeFailure {
  std::string stage;
  std::string error;
};

// Runs every probe on `options.device` and fills `report`. `on_stage` (may
// be empty) is told each stage as it begins. Each timed measurement stops
// after `options.seconds` of wall time or a bounded number of iterations,
// whichever comes first. False with `failure` filled on any CUDA, cuBLAS or
// allocation error; NVML missing is not a failure (the report says so and
// energy figures are null).
bool RunCudaProbes(const ProbeOptions& options,
                   const std::function<void(const std::string&)>& on_stage,
                   ProbeReport* report, ProbeFailure* failure);

}  // namespace cuda
}  // namespace headroom

#endif  // HEADROOM_WORKER_CUDA_CUDA_PROBES_H_
