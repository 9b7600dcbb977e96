#include "worker/daemon/sim_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "server/core/memory/memory_profile.h"
#include "server/core/memory/model_spec.h"

namespace headroom::worker {

SimExecutor::SimExecutor(SimGpuConfig config)
    : config_(std::move(config)), rng_(config_.seed) {
  // Hidden factors: each component's true cost relative to the model's byte
  // count, the way allocators and kernels differ from the arithmetic.
  std::mt19937_64 hidden(config_.seed * 7919 + 17);
  std::uniform_real_distribution<double> factor(0.85, 1.35);
  for (double& f : factors_) f = factor(hidden);
  std::uniform_real_distribution<double> context(0.3, 0.6);
  context_gb_ = context(hidden);
  // Drawn after the factors and the context, so those stay what they were
  // for a seed before compiled mode existed.
  compiled_activation_ =
      std::uniform_real_distribution<double>(0.4, 0.75)(hidden);
  compiled_time_ = std::uniform_real_distribution<double>(0.45, 0.8)(hidden);
  step_overhead_s_ =
      std::uniform_real_distribution<double>(0.005, 0.02)(hidden);
  flops_per_second_ =
      std::uniform_real_distribution<double>(30e12, 90e12)(hidden);
}

v1::GpuDevice SimExecutor::Device() const {
  v1::GpuDevice gpu;
  gpu.set_index(0);
  gpu.set_name(config_.kind);
  gpu.set_uuid("SIM-" + config_.kind + "-" + std::to_string(config_.seed));
  gpu.set_memory_bytes(static_cast<uint64_t>(config_.memory_gb * 1e9));
  gpu.set_compute_capability("sim");
  gpu.set_driver_version("sim");
  gpu.set_cuda_version("sim");
  gpu.set_simulated(true);
  gpu.set_power_supported(true);
  gpu.set_energy_supported(true);
  return gpu;
}

double SimExecutor::TruePeakGb(const v1::Assignment& assignment, uint32_t batch,
                               const std::string& mode) const {
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(assignment.spec(), assignment.setup());
  if (!profile.ok()) return -1;
  ComponentArray bytes = profile->BytesAt(batch);
  if (mode == "compiled") {
    for (int c : {kOutputs, kAttention, kInternal, kRecurrent}) {
      bytes[c] *= compiled_activation_;
    }
  }
  return std::max(PeakGb(bytes, factors_),
                  PeakGb(profile->update_bytes, factors_));
}

double SimExecutor::StepSeconds(const v1::Assignment& assignment,
                                uint32_t batch, const std::string& mode) const {
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(assignment.spec(), assignment.setup());
  if (!profile.ok()) return -1;
  const double positions = static_cast<double>(
      assignment.setup().positions() != 0 ? assignment.setup().positions()
                                          : assignment.spec().positions());
  const double tokens = std::max(1.0, positions) * batch;
  const double seconds =
      step_overhead_s_ +
      6.0 * static_cast<double>(profile->params) * tokens / flops_per_second_;
  return mode == "compiled" ? seconds * compiled_time_ : seconds;
}

ExecutionOutcome SimExecutor::Run(const v1::Assignment& assignment,
                                  ExecutionSink* sink,
                                  const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  if (absl::Status valid = ValidateSpec(assignment.spec()); !valid.ok()) {
    outcome.error = std::string(valid.message());
    return outcome;
  }
  const int steps =
      static_cast<int>(assignment.warmup_steps() + assignment.steps());
  const double baseline_mib = 0;
  for (const v1::BatchRun& run : assignment.runs()) {
    if (stop.load() != StopReason::kNone) {
      outcome.handed_back = stop.load() == StopReason::kShutdown;
      if (stop.load() == StopReason::kCancelled) outcome.error = "cancelled";
      return outcome;
    }
    const double truth = TruePeakGb(assignment, run.batch(), run.mode());
    double measured;
    {
      absl::MutexLock lock(&mu_);
      std::normal_distribution<double> noise(1.0, config_.noise);
      measured = truth * std::max(0.5, noise(rng_));
    }
    const bool oom = measured + context_gb_ > config_.memory_gb;
    // Memory ramps up over the first step to the peak (or to the card when
    // the run goes OOM, which it does at the end of that step).
    const double top_gb = oom ? config_.memory_gb : measured + context_gb_;
    const int total_ms = oom ? config_.step_ms : steps * config_.step_ms;
    const auto start = std::chrono::steady_clock::now();
    uint64_t samples = 0;
    for (int t = 0; t <= total_ms; t += config_.sample_ms) {
      if (stop.load() != StopReason::kNone) break;
      const double ramp = std::min(
          1.0, static_cast<double>(t + 1) / std::max(1, config_.step_ms));
      GpuReading reading;
      reading.memory_used_bytes = static_cast<uint64_t>(
          (baseline_mib * 1048576.0) +
          (context_gb_ + (top_gb - context_gb_) * ramp) * 1e9);
      {
        absl::MutexLock lock(&mu_);
        std::normal_distribution<double> power(300.0, 15.0);
        const double watts = std::max(50.0, power(rng_));
        energy_mj_ += watts * config_.sample_ms;  // W * ms = mJ
        reading.power_w = watts;
        reading.total_energy_mj = energy_mj_;
      }
      sink->Sample(run, t, reading);
      ++samples;
      std::this_thread::sleep_until(
          start + std::chrono::milliseconds(t + config_.sample_ms));
    }
    // Stopped inside a batch: a cancel ends the probe, a shutdown hands
    // the unfinished batch back (the planner re-queues it).
    if (stop.load() == StopReason::kCancelled) {
      outcome.error = "cancelled";
      return outcome;
    }
    if (stop.load() == StopReason::kShutdown) {
      outcome.handed_back = true;
      return outcome;
    }
    v1::BatchResult result;
    result.set_batch(run.batch());
    result.set_repetition(run.repetition());
    result.set_mode(run.mode());
    result.set_oom(oom);
    result.set_simulated(true);
    result.set_samples(samples);
    if (!oom) {
      result.set_peak_allocated_gb(measured);
      result.set_peak_reserved_gb(measured * 1.05);
      result.set_device_peak_gb(measured * 1.05 + context_gb_);
      const double step_s = StepSeconds(assignment, run.batch(), run.mode());
      result.set_step_seconds(step_s);
      result.set_energy_j(300.0 * steps * step_s);
    }
    sink->BatchDone(run, std::move(result));
  }
  return outcome;
}

}  // namespace headroom::worker
