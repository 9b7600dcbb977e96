#include "worker/cuda/probe_watchdog.h"

#include <cstdio>
#include <cstdlib>

#include "worker/cuda/probe_report.h"

namespace headroom {
namespace cuda {

ProbeWatchdog::ProbeWatchdog(std::chrono::milliseconds deadline) {
  const auto at = std::chrono::steady_clock::now() + deadline;
  thread_ = std::thread([this, at, deadline] { Watch(at, deadline); });
}

ProbeWatchdog::~ProbeWatchdog() {
  {
    gpu::MutexLock lock(mu_);
    cancelled_ = true;
  }
  cancel_.notify_all();
  thread_.join();
}

void ProbeWatchdog::SetStage(const std::string& stage) {
  gpu::MutexLock lock(mu_);
  stage_ = stage;
}

std::string ProbeWatchdog::stage() const {
  gpu::MutexLock lock(mu_);
  return stage_;
}

bool ProbeWatchdog::ClaimOutput() { return !output_claimed_.exchange(true); }

void ProbeWatchdog::Watch(std::chrono::steady_clock::time_point deadline,
                          std::chrono::milliseconds limit) {
  std::string stage;
  {
    gpu::MutexLock lock(mu_);
    while (!cancelled_ && !mu_.WaitUntil(cancel_, deadline)) {
    }
    if (cancelled_) return;
    stage = stage_;
  }
  if (!ClaimOutput()) return;  // the probe is printing its own document
  const std::string error =
      "timed out after " + std::to_string(limit.count() / 1000) +
      " s while in stage \"" + stage +
      "\": the GPU or the driver stopped answering (check nvidia-smi and "
      "dmesg for Xid errors)";
  const std::string document = ProbeErrorJson(stage, error);
  std::fwrite(document.data(), 1, document.size(), stdout);
  std::fflush(stdout);
  // No destructors: other threads may be stuck inside the driver.
  std::_Exit(2);
}

}  // namespace cuda
}  // namespace headroom
