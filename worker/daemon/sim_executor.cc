#include "worker/daemon/sim_executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "core/catalog/gpu_catalog.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"

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
  // The power model: the catalog card's TDP and idle power (an unknown kind
  // has none, and reports no power or energy).
  if (absl::StatusOr<GpuInfo> card = FindGpu(config_.kind); card.ok()) {
    tdp_w_ = card->tdp_w;
    idle_w_ = card->idle_w;
    memory_bandwidth_gb_s_ = card->memory_bandwidth_gb_s;
  }
  // Drawn from a stream of their own, so the memory truth above stays what
  // it was for a seed.
  std::mt19937_64 power(config_.seed * 104729 + 31);
  const auto draw = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(power);
  };
  train_w_ = idle_w_ + draw(0.70, 0.95) * (tdp_w_ - idle_w_);
  gen_w_ = idle_w_ + draw(0.55, 0.85) * (tdp_w_ - idle_w_);
  token_overhead_s_ = draw(0.004, 0.012);
  bandwidth_fraction_ = draw(0.5, 0.8);
  // The shipped curves' ranges: NF4 costs more than fp16 for small models
  // and saves for large ones (S - A within s_cap = 75); INT8 costs more at
  // every size, less so as N grows (S < A).
  nf4_.a = draw(40, 110);
  nf4_.s = nf4_.a + draw(20, 70);
  nf4_.nstar = draw(1, 8);
  int8_.a = draw(80, 180);
  int8_.s = int8_.a * draw(0.4, 0.9);
  int8_.nstar = draw(2, 12);
  // Multi-GPU truths: a stream of their own, so every draw above stays what
  // it was for a seed.
  std::mt19937_64 collective(config_.seed * 15485863 + 47);
  for (double& gb : collective_gb_) {
    gb = std::uniform_real_distribution<double>(0.2, 0.8)(collective);
  }
  rank0_extra_ = std::uniform_real_distribution<double>(0.0, 0.03)(collective);
}

double SimExecutor::CollectiveGb(v1::TrainingSetup::Parallel strategy) const {
  const int s = strategy == v1::TrainingSetup::PARALLEL_UNSPECIFIED
                    ? static_cast<int>(v1::TrainingSetup::DDP)
                    : static_cast<int>(strategy);
  if (s < 0 || s >= static_cast<int>(collective_gb_.size())) return 0;
  return collective_gb_[s];
}

double SimExecutor::TrueDePct(double n_b, const std::string& quant) const {
  if (quant == "fp16") return 0;
  const DeCurve* curve =
      quant == "nf4" ? &nf4_ : (quant == "int8" ? &int8_ : nullptr);
  if (curve == nullptr) return -1;
  const double x = n_b / curve->nstar;
  return curve->a - curve->s * x / (1 + x);
}

double SimExecutor::TrueJPer1k(double n_b, const std::string& quant) const {
  if (quant != "fp16" && quant != "nf4" && quant != "int8") return -1;
  if (memory_bandwidth_gb_s_ <= 0) return -1;
  const double token_s =
      token_overhead_s_ +
      2 * n_b / (memory_bandwidth_gb_s_ * bandwidth_fraction_);  // GB / GB/s
  const double fp16 = gen_w_ * token_s * 1000;
  return fp16 * (1 + TrueDePct(n_b, quant) / 100);
}

std::vector<v1::GpuDevice> SimExecutor::Devices() const {
  std::vector<v1::GpuDevice> gpus;
  for (int i = 0; i < std::clamp(config_.gpus, 1, kMaxSimGpus); ++i) {
    gpus.push_back(Device(static_cast<uint32_t>(i)));
  }
  return gpus;
}

v1::GpuDevice SimExecutor::Device(uint32_t index) const {
  v1::GpuDevice gpu;
  gpu.set_index(index);
  gpu.set_name(config_.kind);
  // Card 0 keeps the uuid a one-card node always had.
  gpu.set_uuid("SIM-" + config_.kind + "-" + std::to_string(config_.seed) +
               (index == 0 ? "" : "-" + std::to_string(index)));
  gpu.set_memory_bytes(static_cast<uint64_t>(config_.memory_gb * 1e9));
  gpu.set_compute_capability("sim");
  gpu.set_driver_version("sim");
  gpu.set_cuda_version("sim");
  gpu.set_simulated(true);
  gpu.set_power_supported(tdp_w_ > 0);
  gpu.set_energy_supported(tdp_w_ > 0);
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
  const double peak = std::max(PeakGb(bytes, factors_),
                               PeakGb(profile->update_bytes, factors_));
  // Several GPUs: the per-GPU profile above plus the collective buffers.
  if (assignment.setup().gpus() > 1) {
    return peak + CollectiveGb(assignment.setup().parallel());
  }
  return peak;
}

double SimExecutor::TrueRankPeakGb(const v1::Assignment& assignment,
                                   uint32_t batch, uint32_t rank,
                                   const std::string& mode) const {
  const double truth = TruePeakGb(assignment, batch, mode);
  if (truth < 0) return truth;
  return rank == 0 && assignment.setup().gpus() > 1 ? truth * (1 + rank0_extra_)
                                                    : truth;
}

std::vector<v1::PhaseMeasurement> SimExecutor::SimulatedPhases(
    const v1::Assignment& assignment, uint32_t batch, double step_gb,
    double truth_gb) const {
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(assignment.spec(), assignment.setup());
  if (!profile.ok() || truth_gb <= 0) return {};
  const v1::TrainingSetup& setup = assignment.setup();
  const double noise = step_gb / truth_gb;
  // The optimizer component is one GPU's model states (sharded where the
  // setup shards); the profile's states are the whole model's.
  const double resident = profile->fixed_bytes[kOptimizer];
  const double states_gb = resident * factors_[kOptimizer] / 1e9 * noise;
  const double weights_gb = std::min(profile->states.weights, resident) *
                            factors_[kOptimizer] / 1e9 * noise;
  const uint32_t eval_batch =
      setup.eval_batch() != 0 ? setup.eval_batch() : batch;
  const double eval_gb = states_gb + profile->per_sample_bytes[kTransient] *
                                         eval_batch * factors_[kTransient] /
                                         1e9 * noise;
  std::vector<std::pair<const char*, double>> allocated = {
      {"load", weights_gb}, {"first-step", step_gb}, {"step", step_gb}};
  const auto asked = [&](v1::JobPhase phase) {
    return std::find(setup.phases().begin(), setup.phases().end(), phase) !=
           setup.phases().end();
  };
  if (asked(v1::EVAL)) allocated.emplace_back("eval", eval_gb);
  if (asked(v1::SAVE)) allocated.emplace_back("save", states_gb);
  std::vector<v1::PhaseMeasurement> phases;
  for (const auto& [name, gb] : allocated) {
    v1::PhaseMeasurement& phase = phases.emplace_back();
    phase.set_phase(name);
    phase.set_allocated_gb(gb);
    phase.set_reserved_gb(gb * ReservedRatio(setup));
    phase.set_device_gb(gb * ReservedRatio(setup) + context_gb_);
  }
  return phases;
}

namespace {

// The batch's allocator peak: its largest phase, or `step_gb` without any.
double LargestPhaseGb(const std::vector<v1::PhaseMeasurement>& phases,
                      double step_gb) {
  for (const v1::PhaseMeasurement& phase : phases) {
    step_gb = std::max(step_gb, phase.allocated_gb());
  }
  return step_gb;
}

}  // namespace

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

namespace {

// Stopped before or inside a batch: a cancel ends the probe, a shutdown
// hands the unfinished batches back (the planner re-queues them).
bool Stopped(const std::atomic<StopReason>& stop, ExecutionOutcome* outcome) {
  if (stop.load() == StopReason::kCancelled) {
    outcome->error = "cancelled";
    return true;
  }
  if (stop.load() == StopReason::kShutdown) {
    outcome->handed_back = true;
    return true;
  }
  return false;
}

// A simulated batch's result before its figures.
v1::BatchResult SimulatedResult(const v1::BatchRun& run, bool oom,
                                uint64_t samples) {
  v1::BatchResult result;
  result.set_batch(run.batch());
  result.set_repetition(run.repetition());
  result.set_mode(run.mode());
  result.set_oom(oom);
  result.set_simulated(true);
  result.set_samples(samples);
  return result;
}

}  // namespace

void SimExecutor::AddTrainingPower(GpuReading* reading) {
  if (tdp_w_ <= 0) return;
  absl::MutexLock lock(&mu_);
  // The card's training power, within idle..TDP.
  std::normal_distribution<double> noise(1.0, config_.noise);
  const double watts = std::clamp(train_w_ * noise(rng_), idle_w_, tdp_w_);
  const uint32_t gpu = reading->gpu_index.value_or(0);
  double& counter = gpu == 0 ? energy_mj_ : rank_energy_mj_[gpu];
  counter += watts * config_.sample_ms;  // W * ms = mJ
  reading->power_w = watts;
  reading->total_energy_mj = counter;
}

uint64_t SimExecutor::RampSamples(
    const v1::BatchRun& run, int total_ms,
    const std::vector<std::pair<std::optional<uint32_t>, double>>& tops,
    ExecutionSink* sink, const std::atomic<StopReason>& stop) {
  const auto start = std::chrono::steady_clock::now();
  uint64_t samples = 0;
  for (int t = 0; t <= total_ms; t += config_.sample_ms) {
    if (stop.load() != StopReason::kNone) break;
    const double ramp = std::min(
        1.0, static_cast<double>(t + 1) / std::max(1, config_.step_ms));
    for (const auto& [gpu_index, top_gb] : tops) {
      GpuReading reading;
      reading.gpu_index = gpu_index;
      reading.memory_used_bytes = static_cast<uint64_t>(
          (context_gb_ + (top_gb - context_gb_) * ramp) * 1e9);
      AddTrainingPower(&reading);
      sink->Sample(run, t, reading);
      ++samples;
    }
    std::this_thread::sleep_until(
        start + std::chrono::milliseconds(t + config_.sample_ms));
  }
  return samples;
}

ExecutionOutcome SimExecutor::Run(const v1::Assignment& assignment,
                                  ExecutionSink* sink,
                                  const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  if (absl::Status valid = ValidateSpec(assignment.spec()); !valid.ok()) {
    outcome.error = std::string(valid.message());
    return outcome;
  }
  if (assignment.has_energy()) return RunEnergy(assignment, sink, stop);
  if (assignment.setup().gpus() > 1) {
    return RunParallel(assignment, sink, stop);
  }
  const int steps =
      static_cast<int>(assignment.warmup_steps() + assignment.steps());
  for (const v1::BatchRun& run : assignment.runs()) {
    if (Stopped(stop, &outcome)) return outcome;
    const double truth = TruePeakGb(assignment, run.batch(), run.mode());
    double measured;
    {
      absl::MutexLock lock(&mu_);
      std::normal_distribution<double> noise(1.0, config_.noise);
      measured = truth * std::max(0.5, noise(rng_));
    }
    const std::vector<v1::PhaseMeasurement> phases =
        SimulatedPhases(assignment, run.batch(), measured, truth);
    measured = LargestPhaseGb(phases, measured);
    const bool oom = measured + context_gb_ > config_.memory_gb;
    // Memory ramps up over the first step to the peak (or to the card when
    // the run goes OOM, which it does at the end of that step).
    const double top_gb = oom ? config_.memory_gb : measured + context_gb_;
    const int total_ms = oom ? config_.step_ms : steps * config_.step_ms;
    const uint64_t samples =
        RampSamples(run, total_ms, {{std::nullopt, top_gb}}, sink, stop);
    if (Stopped(stop, &outcome)) return outcome;
    v1::BatchResult result = SimulatedResult(run, oom, samples);
    if (!oom) {
      const double ratio = ReservedRatio(assignment.setup());
      result.set_peak_allocated_gb(measured);
      result.set_peak_reserved_gb(measured * ratio);
      result.set_device_peak_gb(measured * ratio + context_gb_);
      result.set_device_context_gb(context_gb_);
      for (const v1::PhaseMeasurement& phase : phases) {
        *result.add_phases() = phase;
      }
      const double step_s = StepSeconds(assignment, run.batch(), run.mode());
      result.set_step_seconds(step_s);
      // The timed steps only (the warm-up is not timed).
      const uint32_t timed = assignment.steps();
      result.set_timed_steps(timed);
      if (tdp_w_ > 0) {
        double noise;
        {
          absl::MutexLock lock(&mu_);
          noise = std::max(
              0.5, std::normal_distribution<double>(1.0, config_.noise)(rng_));
        }
        result.set_energy_j(train_w_ * timed * step_s * noise);
      }
    }
    sink->BatchDone(run, std::move(result));
  }
  return outcome;
}

ExecutionOutcome SimExecutor::RunParallel(const v1::Assignment& assignment,
                                          ExecutionSink* sink,
                                          const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  const uint32_t ranks = assignment.setup().gpus();
  const int cards = std::clamp(config_.gpus, 1, kMaxSimGpus);
  if (static_cast<uint32_t>(assignment.gpu_indices_size()) != ranks) {
    outcome.error = "setup.gpus = " + std::to_string(ranks) +
                    " but the assignment names " +
                    std::to_string(assignment.gpu_indices_size()) +
                    " GPUs (gpu_indices); one per rank is needed";
    return outcome;
  }
  for (uint32_t index : assignment.gpu_indices()) {
    if (index >= static_cast<uint32_t>(cards)) {
      outcome.error = "gpu_indices names GPU " + std::to_string(index) +
                      "; this simulated node has " + std::to_string(cards) +
                      " (0.." + std::to_string(cards - 1) + ")";
      return outcome;
    }
  }
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(assignment.spec(), assignment.setup());
  if (!profile.ok()) {
    outcome.error = std::string(profile.status().message());
    return outcome;
  }
  // Offloaded states live in the node's memory: its processes' resident
  // set at the peak.
  const double host_truth_gb = profile->parallel.host_bytes_per_node / 1e9;
  const int steps =
      static_cast<int>(assignment.warmup_steps() + assignment.steps());
  for (const v1::BatchRun& run : assignment.runs()) {
    if (Stopped(stop, &outcome)) return outcome;
    std::vector<double> measured(ranks);
    double host_gb = 0;
    {
      absl::MutexLock lock(&mu_);
      std::normal_distribution<double> noise(1.0, config_.noise);
      for (uint32_t r = 0; r < ranks; ++r) {
        measured[r] = TrueRankPeakGb(assignment, run.batch(), r, run.mode()) *
                      std::max(0.5, noise(rng_));
      }
      if (host_truth_gb > 0) {
        host_gb = host_truth_gb * std::max(0.5, noise(rng_));
      }
    }
    const auto fullest = std::max_element(measured.begin(), measured.end());
    const uint32_t fullest_rank =
        static_cast<uint32_t>(fullest - measured.begin());
    // The fullest GPU's phases (the one that decides whether the job fits).
    const std::vector<v1::PhaseMeasurement> phases = SimulatedPhases(
        assignment, run.batch(), *fullest,
        TrueRankPeakGb(assignment, run.batch(), fullest_rank, run.mode()));
    const double largest = LargestPhaseGb(phases, *fullest);
    const bool oom = largest + context_gb_ > config_.memory_gb;
    const bool host_full = host_gb > config_.host_memory_gb;
    // Every rank's memory ramps up over the first step to its peak (or to
    // the card on the rank that runs out, at the end of that step).
    const int total_ms = oom ? config_.step_ms : steps * config_.step_ms;
    std::vector<std::pair<std::optional<uint32_t>, double>> tops;
    for (uint32_t r = 0; r < ranks; ++r) {
      tops.emplace_back(assignment.gpu_indices(static_cast<int>(r)),
                        std::min(config_.memory_gb, measured[r] + context_gb_));
    }
    const uint64_t samples = RampSamples(run, total_ms, tops, sink, stop);
    if (Stopped(stop, &outcome)) return outcome;
    v1::BatchResult result = SimulatedResult(run, oom, samples);
    if (host_gb > 0) result.set_host_peak_gb(host_gb);
    if (host_full && !oom) {
      result.set_error("host memory exhausted: offload holds " +
                       std::to_string(host_gb) + " GB of the node's " +
                       std::to_string(config_.host_memory_gb) + " GB");
    } else if (!oom) {
      for (double gb : measured) result.add_rank_peaks_gb(gb);
      const double ratio = ReservedRatio(assignment.setup());
      result.set_peak_allocated_gb(largest);
      result.set_peak_reserved_gb(largest * ratio);
      result.set_device_peak_gb(largest * ratio + context_gb_);
      result.set_device_context_gb(context_gb_);
      for (const v1::PhaseMeasurement& phase : phases) {
        *result.add_phases() = phase;
      }
      result.set_step_seconds(StepSeconds(assignment, run.batch(), run.mode()));
      result.set_timed_steps(assignment.steps());
    }
    sink->BatchDone(run, std::move(result));
  }
  return outcome;
}

ExecutionOutcome SimExecutor::RunEnergy(const v1::Assignment& assignment,
                                        ExecutionSink* sink,
                                        const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  const double n_b = static_cast<double>(CountParams(assignment.spec())) / 1e9;
  for (const v1::BatchRun& run : assignment.runs()) {
    if (Stopped(stop, &outcome)) return outcome;
    v1::BatchResult result;
    result.set_batch(run.batch());
    result.set_repetition(run.repetition());
    result.set_mode(run.mode());
    result.set_simulated(true);
    const double truth = TrueJPer1k(n_b, run.mode());
    if (truth <= 0) {
      result.set_error(tdp_w_ <= 0
                           ? "the simulated card '" + config_.kind +
                                 "' is not in the GPU catalog: no power model"
                           : "unknown quantization '" + run.mode() + "'");
      sink->BatchDone(run, std::move(result));
      continue;
    }
    const uint64_t tokens = assignment.energy().new_tokens();
    double energy_j, idle_w;
    {
      absl::MutexLock lock(&mu_);
      std::normal_distribution<double> noise(1.0, config_.noise);
      energy_j = truth * static_cast<double>(tokens) / 1000 *
                 std::max(0.5, noise(rng_));
      idle_w = idle_w_ * std::max(0.5, noise(rng_));
    }
    const double window_s = energy_j / gen_w_;
    // A few samples over a short wall-clock window: the counter rises by
    // the window's energy.
    const int total_ms = config_.step_ms;
    const auto start = std::chrono::steady_clock::now();
    uint64_t samples = 0;
    for (int t = 0; t <= total_ms; t += config_.sample_ms) {
      if (stop.load() != StopReason::kNone) break;
      GpuReading reading;
      reading.memory_used_bytes = static_cast<uint64_t>(
          (context_gb_ + 2 * n_b) * 1e9);  // fp16 weights, at most
      {
        absl::MutexLock lock(&mu_);
        energy_mj_ += energy_j * 1000 * config_.sample_ms /
                      std::max(1, total_ms + config_.sample_ms);
        reading.power_w = gen_w_;
        reading.total_energy_mj = energy_mj_;
      }
      sink->Sample(run, t, reading);
      ++samples;
      std::this_thread::sleep_until(
          start + std::chrono::milliseconds(t + config_.sample_ms));
    }
    if (Stopped(stop, &outcome)) return outcome;
    result.set_samples(samples);
    v1::GenerationEnergy* generation = result.mutable_generation();
    generation->set_quant(run.mode());
    generation->set_tokens_generated(tokens);
    generation->set_prompt_tokens(assignment.energy().prompt_tokens());
    generation->set_energy_j(energy_j);
    generation->set_idle_w(idle_w);
    generation->set_window_s(window_s);
    generation->set_tokens_per_s(static_cast<double>(tokens) / window_s);
    generation->set_j_per_1k_tokens(energy_j * 1000 /
                                    static_cast<double>(tokens));
    generation->set_params(CountParams(assignment.spec()));
    sink->BatchDone(run, std::move(result));
  }
  return outcome;
}

}  // namespace headroom::worker
