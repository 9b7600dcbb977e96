#ifndef HEADROOM_WORKER_DAEMON_SIM_EXECUTOR_H_
#define HEADROOM_WORKER_DAEMON_SIM_EXECUTOR_H_

// A simulated GPU of a declared kind and size. Its ground truth is hidden
// from the planner: the memory model's component bytes weighted by factors
// drawn from the seed, plus a context overhead and multiplicative noise. A
// run whose peak (context included) exceeds the card goes OOM. A run in
// "compiled" mode keeps a hidden, seeded fraction of the activation
// components (0.40-0.75: compilation frees intermediates) and takes a hidden
// fraction of the eager step (0.45-0.80). The step seconds it reports are
// modelled (a hidden per-step overhead plus 6 * params * tokens over a hidden
// FLOP rate), not the wall time it sleeps. Everything it reports is labelled
// simulated.

#include <cstdint>
#include <random>
#include <string>

#include "absl/synchronization/mutex.h"
#include "worker/daemon/executor.h"

namespace headroom::worker {

struct SimGpuConfig {
  std::string kind = "L4";  // a catalog GPU name
  double memory_gb = 24;    // the card, GB = 10^9 bytes
  uint64_t seed = 1;
  // Relative noise (standard deviation) on each measured peak.
  double noise = 0.02;
  // Wall time of one simulated training step, and the sampling period.
  int step_ms = 40;
  int sample_ms = 20;
};

class SimExecutor final : public Executor {
 public:
  explicit SimExecutor(SimGpuConfig config);
  std::string name() const override { return "sim"; }
  ExecutionOutcome Run(const v1::Assignment& assignment, ExecutionSink* sink,
                       const std::atomic<StopReason>& stop) override;

  // The inventory entry of the simulated card.
  v1::GpuDevice Device() const;

  // The hidden truth, for tests: allocator peak in GB of `batch` in `mode`
  // ("" and "eager" alike, or "compiled") without noise, the context
  // overhead, and the modelled seconds of one training step.
  double TruePeakGb(const v1::Assignment& assignment, uint32_t batch,
                    const std::string& mode = "") const;
  double context_gb() const { return context_gb_; }
  double StepSeconds(const v1::Assignment& assignment, uint32_t batch,
                     const std::string& mode = "") const;

 private:
  SimGpuConfig config_;
  std::array<double, 6> factors_{};
  double context_gb_ = 0;
  double compiled_activation_ = 1;
  double compiled_time_ = 1;
  double step_overhead_s_ = 0;
  double flops_per_second_ = 1;
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  double energy_mj_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_SIM_EXECUTOR_H_
