#ifndef HEADROOM_WORKER_CUDA_PROBE_WATCHDOG_H_
#define HEADROOM_WORKER_CUDA_PROBE_WATCHDOG_H_

// A deadline for the whole probe. A hung kernel or driver call cannot be
// interrupted from inside the process, so past the deadline the watchdog
// prints the error document itself (naming the stage that hung) and ends
// the process with exit code 2.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <string>
#include <thread>

#include "worker/gpu/mutex.h"

namespace headroom {
namespace cuda {

class ProbeWatchdog {
 public:
  // Starts the watch; `deadline` counts from now.
  explicit ProbeWatchdog(std::chrono::milliseconds deadline);

  // Cancels the watch and joins its thread.
  ~ProbeWatchdog();

  ProbeWatchdog(const ProbeWatchdog&) = delete;
  ProbeWatchdog& operator=(const ProbeWatchdog&) = delete;

  // Names what the probe is doing now, for the timeout message.
  // Thread-safe.
  void SetStage(const std::string& stage);

  // The stage last set ("start" before any).
  std::string stage() const;

  // Claims stdout for the probe's one document. True once: false when the
  // watchdog has already printed its own (the caller then prints nothing
  // and the process is about to end).
  bool ClaimOutput();

 private:
  void Watch(std::chrono::steady_clock::time_point deadline,
             std::chrono::milliseconds limit);

  mutable gpu::Mutex mu_;
  std::condition_variable cancel_;
  bool cancelled_ HEADROOM_GUARDED_BY(mu_) = false;
  std::string stage_ HEADROOM_GUARDED_BY(mu_) = "start";
  std::atomic<bool> output_claimed_{false};
  std::thread thread_;
};

}  // namespace cuda
}  // namespace headroom

#endif  // HEADROOM_WORKER_CUDA_PROBE_WATCHDOG_H_
