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
//
// Power: the card's catalog TDP and idle power (gpu_catalog.h). Training
// draws idle + u (TDP - idle), u hidden in 0.70-0.95; a memory probe's
// energy_j is that power times the modelled step time times the timed steps
// (warm-up excluded), with multiplicative noise.
//
// Energy probes (an assignment with `energy`): a hidden generation truth of
// the shipped curves' form. fp16 J per 1,000 generated tokens at N billion
// parameters is the generation power (idle + u_gen (TDP - idle), u_gen
// hidden in 0.55-0.85) times the time per token, a hidden overhead plus the
// fp16 weights (2 N GB) read at a hidden fraction (0.5-0.8) of the card's
// bandwidth; a quantization multiplies it by 1 + dE%(N) / 100 with
// dE%(N) = A - S x / (1 + x), x = N / Nstar, A, S, Nstar hidden per
// quantization and seed. Each window's energy has multiplicative noise
// (config.noise); its length is energy / power.

#include <array>
#include <atomic>
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
  // Training power of the card without noise, W.
  double TrainingWatts() const { return train_w_; }
  // The hidden generation truth: J per 1,000 generated tokens of a model of
  // `n_b` billion parameters at `quant` ("fp16", "nf4", "int8") without
  // noise, and dE% vs fp16 (0 for fp16). -1 for an unknown quantization.
  double TrueJPer1k(double n_b, const std::string& quant) const;
  double TrueDePct(double n_b, const std::string& quant) const;
  double GenerationWatts() const { return gen_w_; }
  double idle_w() const { return idle_w_; }

 private:
  SimGpuConfig config_;
  std::array<double, 6> factors_{};
  double context_gb_ = 0;
  double compiled_activation_ = 1;
  double compiled_time_ = 1;
  double step_overhead_s_ = 0;
  double flops_per_second_ = 1;
  // The card's power model (catalog TDP and idle) and the hidden truth.
  double tdp_w_ = 0;
  double idle_w_ = 0;
  double train_w_ = 0;
  double gen_w_ = 0;
  double token_overhead_s_ = 0;
  double bandwidth_fraction_ = 1;
  struct DeCurve {
    double a = 0, s = 0, nstar = 1;
  };
  DeCurve nf4_, int8_;
  double memory_bandwidth_gb_s_ = 0;

  ExecutionOutcome RunEnergy(const v1::Assignment& assignment,
                             ExecutionSink* sink,
                             const std::atomic<StopReason>& stop);
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  double energy_mj_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_SIM_EXECUTOR_H_
