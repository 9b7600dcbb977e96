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
//
// A simulated node holds config.gpus cards of the kind (indices 0..N-1).
// An assignment on N > 1 of them (setup.gpus, gpu_indices) follows the same
// rules as the planner: each rank's truth is the per-GPU profile
// (BuildProfile with the setup, which applies the parallel strategy) times
// the hidden factors, plus a hidden per-strategy collective constant
// (0.2-0.8 GB, drawn from a stream of its own so one-GPU truths stay what
// they were for a seed); rank 0 holds a hidden 0-3 % more. Each rank has
// its own noise; the run reports every rank's peak (rank_peaks_gb), the
// largest as peak_allocated_gb, goes OOM when any rank exceeds the card,
// and for an offload setup reports host_peak_gb (the profile's host bytes
// per node, with noise; beyond config.host_memory_gb the run fails saying
// so). Samples name each rank's GPU. A multi-GPU run reports no energy_j.
//
// Memory as the device holds it (issue 30): every run reports the context
// (device_context_gb) and its phases, each with allocated, reserved
// (allocated times 1.05, or 1.02 with expandable_segments) and device
// (reserved plus the context) GB, all with the run's own noise: load (the
// weights as stored, at most the GPU's model states), first-step and step
// (the step's peak), and where the setup's phases ask for them eval (the
// GPU's model states, the profile's optimizer component, plus the largest
// forward tensor at eval_batch) and save (the model states: a one-GPU state
// dict is views). The batch's peak is the largest phase; generate is not
// simulated (as the harness does not measure it).

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

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
  // Cards on the simulated node (1..kMaxSimGpus) and its host memory, GB.
  int gpus = 1;
  double host_memory_gb = 64;
};

inline constexpr int kMaxSimGpus = 16;

class SimExecutor final : public Executor {
 public:
  explicit SimExecutor(SimGpuConfig config);
  std::string name() const override { return "sim"; }
  ExecutionOutcome Run(const v1::Assignment& assignment, ExecutionSink* sink,
                       const std::atomic<StopReason>& stop) override;

  // The inventory entry of the simulated card `index` (0 by default), and
  // of every card of the node.
  v1::GpuDevice Device(uint32_t index = 0) const;
  std::vector<v1::GpuDevice> Devices() const;

  // The hidden truth, for tests: allocator peak in GB of `batch` in `mode`
  // ("" and "eager" alike, or "compiled") without noise, the context
  // overhead, and the modelled seconds of one training step.
  double TruePeakGb(const v1::Assignment& assignment, uint32_t batch,
                    const std::string& mode = "") const;
  double context_gb() const { return context_gb_; }
  // The hidden truth of a multi-GPU assignment, for tests: rank `rank`'s
  // allocator peak in GB without noise (TruePeakGb with the collective
  // constant, rank 0's extra on rank 0); the collective constant of a
  // strategy (PARALLEL_UNSPECIFIED is DDP), GB; rank 0's extra fraction.
  double TrueRankPeakGb(const v1::Assignment& assignment, uint32_t batch,
                        uint32_t rank, const std::string& mode = "") const;
  double CollectiveGb(v1::TrainingSetup::Parallel strategy) const;
  double rank0_extra() const { return rank0_extra_; }
  double StepSeconds(const v1::Assignment& assignment, uint32_t batch,
                     const std::string& mode = "") const;
  // The phases of a batch whose step peaked at `step_gb` (noise included)
  // against its truth `truth_gb`: the other phases carry the same noise.
  // Empty where the setup does not build.
  std::vector<v1::PhaseMeasurement> SimulatedPhases(
      const v1::Assignment& assignment, uint32_t batch, double step_gb,
      double truth_gb) const;
  // Reserved over allocated for a setup.
  static double ReservedRatio(const v1::TrainingSetup& setup) {
    return setup.expandable_segments() ? 1.02 : 1.05;
  }
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
  // Per strategy (TrainingSetup::Parallel, DDP..ZERO3), GB.
  std::array<double, 8> collective_gb_{};
  double rank0_extra_ = 0;

  // The card's training power (within idle..TDP, with noise) on `reading`,
  // and its card's energy counter advanced by one sample period (card 0
  // when the reading names none).
  void AddTrainingPower(GpuReading* reading) ABSL_LOCKS_EXCLUDED(mu_);
  // Samples every sample_ms over `total_ms` (until `stop`), each card of
  // `tops` (its gpu_index, none on a one-GPU run; its top GB) ramping up
  // over the first step from the context to its top; the samples sent.
  uint64_t RampSamples(
      const v1::BatchRun& run, int total_ms,
      const std::vector<std::pair<std::optional<uint32_t>, double>>& tops,
      ExecutionSink* sink, const std::atomic<StopReason>& stop)
      ABSL_LOCKS_EXCLUDED(mu_);
  ExecutionOutcome RunParallel(const v1::Assignment& assignment,
                               ExecutionSink* sink,
                               const std::atomic<StopReason>& stop);

  ExecutionOutcome RunEnergy(const v1::Assignment& assignment,
                             ExecutionSink* sink,
                             const std::atomic<StopReason>& stop);
  absl::Mutex mu_;
  std::mt19937_64 rng_ ABSL_GUARDED_BY(mu_);
  double energy_mj_ ABSL_GUARDED_BY(mu_) = 0;
  // The energy counters of cards 1..N-1 (card 0's is energy_mj_).
  std::array<double, kMaxSimGpus> rank_energy_mj_ ABSL_GUARDED_BY(mu_){};
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_SIM_EXECUTOR_H_
