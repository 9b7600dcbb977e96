#include "worker/gpu/sampler.h"

#include <algorithm>
#include <utility>

#include "worker/gpu/nvml.h"

namespace headroom {
namespace gpu {
namespace {

using Clock = std::chrono::steady_clock;

SamplerOptions Clamped(SamplerOptions options) {
  options.period = std::clamp(options.period, std::chrono::milliseconds(1),
                              std::chrono::milliseconds(60000));
  options.ring_capacity =
      std::clamp<size_t>(options.ring_capacity, 1, size_t{1} << 20);
  options.max_reads = std::max<int64_t>(options.max_reads, 1);
  return options;
}

}  // namespace

NvmlSampleSource::NvmlSampleSource(const Nvml* nvml, unsigned nvml_index)
    : nvml_(nvml), index_(nvml_index) {}

bool NvmlSampleSource::Read(Sample* sample) {
  if (!nvml_->MemoryUsedBytes(index_, &sample->memory_used_bytes,
                              &last_error_)) {
    return false;
  }
  const CounterRead power = nvml_->PowerMw(index_);
  if (power.kind == CounterRead::Kind::kValue) sample->power_mw = power.value;
  const CounterRead energy = nvml_->TotalEnergyMj(index_);
  if (energy.kind == CounterRead::Kind::kValue) {
    sample->energy_mj = energy.value;
  }
  return true;
}

Sampler::Sampler(SampleSource* source, SamplerOptions options)
    : source_(source), options_(Clamped(std::move(options))) {
  ring_.reserve(std::min<size_t>(options_.ring_capacity, 4096));
}

Sampler::~Sampler() { Stop(); }

bool Sampler::Start() {
  MutexLock lifecycle(lifecycle_mu_);
  if (started_) return false;
  {
    MutexLock lock(mu_);
    if (stop_requested_) return false;  // stopped before it started
  }
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  return true;
}

void Sampler::Stop() {
  {
    MutexLock lock(mu_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  // The callback runs on the sampler's thread: joining it from there would
  // deadlock, and the request above is enough.
  if (std::this_thread::get_id() == thread_id_.load()) return;
  MutexLock lifecycle(lifecycle_mu_);
  if (thread_.joinable()) thread_.join();
}

SamplerSummary Sampler::Summary() const {
  MutexLock lock(mu_);
  return summary_;
}

std::vector<Sample> Sampler::Recent() const {
  MutexLock lock(mu_);
  if (ring_.size() < options_.ring_capacity) return ring_;
  // Full ring: ring_next_ is the oldest.
  std::vector<Sample> recent;
  recent.reserve(ring_.size());
  recent.insert(recent.end(), ring_.begin() + ring_next_, ring_.end());
  recent.insert(recent.end(), ring_.begin(), ring_.begin() + ring_next_);
  return recent;
}

std::optional<Sample> Sampler::ReadOnce(Clock::time_point start) {
  Sample sample;
  const Clock::time_point now = Clock::now();
  sample.t_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now - start)
          .count();
  const bool ok = source_->Read(&sample);
  MutexLock lock(mu_);
  if (!ok) {
    ++summary_.failed_reads;
    summary_.last_error = source_->LastError();
    return std::nullopt;
  }
  if (summary_.samples == 0) {
    summary_.first_t_ms = sample.t_ms;
    summary_.baseline_memory_used_bytes = sample.memory_used_bytes;
  }
  ++summary_.samples;
  summary_.last_t_ms = sample.t_ms;
  if (summary_.samples == 1 ||
      sample.memory_used_bytes > summary_.peak_memory_used_bytes) {
    summary_.peak_memory_used_bytes = sample.memory_used_bytes;
    summary_.peak_t_ms = sample.t_ms;
  }
  if (sample.power_mw.has_value()) {
    power_sum_mw_ += static_cast<double>(*sample.power_mw);
    ++power_count_;
    summary_.mean_power_mw = power_sum_mw_ / static_cast<double>(power_count_);
    summary_.peak_power_mw =
        std::max(summary_.peak_power_mw.value_or(0), *sample.power_mw);
  }
  if (sample.energy_mj.has_value()) {
    if (!first_energy_mj_.has_value()) first_energy_mj_ = sample.energy_mj;
    last_energy_mj_ = sample.energy_mj;
    if (*last_energy_mj_ >= *first_energy_mj_) {
      summary_.energy_delta_mj = *last_energy_mj_ - *first_energy_mj_;
    } else {
      summary_.energy_delta_mj.reset();
    }
  }
  if (ring_.size() < options_.ring_capacity) {
    ring_.push_back(sample);
  } else {
    ring_[ring_next_] = sample;
    ring_next_ = (ring_next_ + 1) % ring_.size();
  }
  return sample;
}

void Sampler::Run() {
  thread_id_.store(std::this_thread::get_id());
  const Clock::time_point start = Clock::now();
  Clock::time_point next = start;
  for (int64_t reads = 0; reads < options_.max_reads; ++reads) {
    std::optional<Sample> sample = ReadOnce(start);
    if (sample.has_value() && options_.on_sample) options_.on_sample(*sample);

    // The next tick after now: ticks a slow read overran are skipped.
    next += options_.period;
    const Clock::time_point now = Clock::now();
    if (next <= now) {
      next += ((now - next) / options_.period + 1) * options_.period;
    }
    bool stop = false;
    {
      MutexLock lock(mu_);
      while (!stop_requested_ && !mu_.WaitUntil(wake_, next)) {
      }
      stop = stop_requested_;
    }
    if (stop) {
      // The final read, so that the run's figures reach the moment of Stop.
      if (reads + 1 < options_.max_reads) {
        sample = ReadOnce(start);
        if (sample.has_value() && options_.on_sample) {
          options_.on_sample(*sample);
        }
      }
      return;
    }
  }
  MutexLock lock(mu_);
  summary_.hit_read_limit = true;
}

}  // namespace gpu
}  // namespace headroom
