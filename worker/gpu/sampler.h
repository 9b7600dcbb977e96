#ifndef HEADROOM_WORKER_GPU_SAMPLER_H_
#define HEADROOM_WORKER_GPU_SAMPLER_H_

// Memory, power and energy sampling of one GPU while a probe runs: the
// device-level peak (NVML used minus the baseline) and the energy of the run
// come from here, and each sample can be streamed live.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "worker/gpu/mutex.h"

namespace headroom {
namespace gpu {

class Nvml;

// One reading of a device.
struct Sample {
  int64_t t_ms = 0;  // since Sampler::Start, when the read began
  uint64_t memory_used_bytes = 0;
  std::optional<uint64_t> power_mw;   // absent where power is unsupported
  std::optional<uint64_t> energy_mj;  // NVML's running total; may be absent
};

// Where samples come from: a device, or a fake in tests. Read is called
// from the sampler's thread only.
class SampleSource {
 public:
  virtual ~SampleSource() = default;

  // Fills everything but t_ms (the sampler sets it). False when the memory
  // could not be read; the sampler counts the failure and goes on.
  virtual bool Read(Sample* sample) = 0;

  // Why the last failed Read failed; called right after it, on the same
  // thread.
  virtual std::string LastError() const { return ""; }
};

// Reads one device through NVML: memory used (required), power and energy
// (each absent where unsupported or failing).
class NvmlSampleSource : public SampleSource {
 public:
  // `nvml` must outlive this source. `nvml_index` is NVML's index of the
  // device (see Nvml::IndexOfUuid), not the CUDA ordinal.
  NvmlSampleSource(const Nvml* nvml, unsigned nvml_index);

  bool Read(Sample* sample) override;
  std::string LastError() const override { return last_error_; }

 private:
  const Nvml* nvml_;
  unsigned index_;
  std::string last_error_;
};

struct SamplerOptions {
  // Time between reads; clamped to [1 ms, 60 s]. Reads that overrun skip
  // the ticks they missed rather than bursting to catch up.
  std::chrono::milliseconds period{20};
  // How many recent samples Recent() keeps; clamped to [1, 1 << 20].
  size_t ring_capacity = 4096;
  // Reads (failed or not) after which the sampler stops by itself: a bound
  // for a caller that never calls Stop. 10^7 is 55 hours at 20 ms.
  int64_t max_reads = 10000000;
  // Called on the sampler's thread after each successful read, outside the
  // sampler's lock (it may call Summary or Recent). It delays the next read
  // while it runs, so it should hand the sample off rather than block.
  std::function<void(const Sample&)> on_sample;
};

// What the samples of one run add up to. Memory figures are those of the
// whole device (other processes included).
struct SamplerSummary {
  int64_t samples = 0;       // successful reads
  int64_t failed_reads = 0;  // reads that returned false
  std::string last_error;    // the source's reason for the last failure
  bool hit_read_limit = false;
  int64_t first_t_ms = 0;
  int64_t last_t_ms = 0;
  uint64_t baseline_memory_used_bytes = 0;  // the first sample's
  uint64_t peak_memory_used_bytes = 0;
  int64_t peak_t_ms = 0;  // when the peak was first seen
  std::optional<uint64_t> peak_power_mw;
  std::optional<double> mean_power_mw;  // over the samples that had power
  // Last minus first energy reading; absent with fewer than two readings or
  // when the counter went backwards (a driver reload).
  std::optional<uint64_t> energy_delta_mj;

  // Peak minus baseline: what the run added to the device.
  uint64_t PeakOverBaselineBytes() const {
    return peak_memory_used_bytes > baseline_memory_used_bytes
               ? peak_memory_used_bytes - baseline_memory_used_bytes
               : 0;
  }
};

// Reads a SampleSource on a thread of its own every `period` from Start
// until Stop, and keeps the summary and a ring of recent samples. The first
// read happens at Start and a last one when Stop is called, so the energy
// delta covers the whole run. All methods are thread-safe.
class Sampler {
 public:
  // `source` must outlive the sampler.
  Sampler(SampleSource* source, SamplerOptions options);

  // Stops and joins the thread.
  ~Sampler();

  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Starts the thread; false if the sampler was already started or stopped
  // (a sampler runs once).
  bool Start();

  // Wakes the thread, lets it take its final read and joins it. Returns
  // within one read of the source. Idempotent; a no-op before Start. From
  // the callback it only asks the thread to stop.
  void Stop();

  // The figures so far (final once Stop returned).
  SamplerSummary Summary() const;

  // Up to ring_capacity most recent samples, oldest first.
  std::vector<Sample> Recent() const;

 private:
  void Run();
  // Takes one read at `start` + now and records it; returns the sample when
  // the read succeeded.
  std::optional<Sample> ReadOnce(std::chrono::steady_clock::time_point start);

  SampleSource* const source_;
  const SamplerOptions options_;

  Mutex lifecycle_mu_;  // serializes Start and Stop
  std::thread thread_ HEADROOM_GUARDED_BY(lifecycle_mu_);
  bool started_ HEADROOM_GUARDED_BY(lifecycle_mu_) = false;
  // The sampler thread's id once it runs, so that Stop from the callback
  // does not join its own thread.
  std::atomic<std::thread::id> thread_id_{};

  mutable Mutex mu_;
  std::condition_variable wake_;
  bool stop_requested_ HEADROOM_GUARDED_BY(mu_) = false;
  SamplerSummary summary_ HEADROOM_GUARDED_BY(mu_);
  double power_sum_mw_ HEADROOM_GUARDED_BY(mu_) = 0;
  int64_t power_count_ HEADROOM_GUARDED_BY(mu_) = 0;
  std::optional<uint64_t> first_energy_mj_ HEADROOM_GUARDED_BY(mu_);
  std::optional<uint64_t> last_energy_mj_ HEADROOM_GUARDED_BY(mu_);
  std::vector<Sample> ring_ HEADROOM_GUARDED_BY(mu_);
  size_t ring_next_ HEADROOM_GUARDED_BY(mu_) = 0;
};

}  // namespace gpu
}  // namespace headroom

#endif  // HEADROOM_WORKER_GPU_SAMPLER_H_
