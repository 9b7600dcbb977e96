// headroom-cuda-probe: measures one GPU and prints one JSON document on
// stdout (worker/cuda/README.md). Exit 0 with the report; exit 2 with
// {"error": ...} when the probe cannot run or fails; --help prints usage.

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "worker/cuda/cuda_probes.h"
#include "worker/cuda/probe_report.h"
#include "worker/cuda/probe_watchdog.h"

namespace {

constexpr int kFailed = 2;

int Print(const std::string& document, int code) {
  std::fwrite(document.data(), 1, document.size(), stdout);
  std::fflush(stdout);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  using headroom::cuda::FlagsOutcome;
  headroom::cuda::ProbeOptions options;
  std::string error;
  switch (headroom::cuda::ParseProbeFlags(argc, argv, &options, &error)) {
    case FlagsOutcome::kHelp:
      return Print(headroom::cuda::ProbeUsage(), 0);
    case FlagsOutcome::kError:
      return Print(headroom::cuda::ProbeErrorJson("flags", error), kFailed);
    case FlagsOutcome::kRun:
      break;
  }

  headroom::cuda::ProbeWatchdog watchdog(
      headroom::cuda::ProbeDeadline(options));
  headroom::cuda::ProbeReport report;
  headroom::cuda::ProbeFailure failure;
  const bool ok = headroom::cuda::RunCudaProbes(
      options,
      [&watchdog](const std::string& stage) { watchdog.SetStage(stage); },
      &report, &failure);
  if (!watchdog.ClaimOutput()) {
    // The watchdog printed the timeout and is ending the process.
    std::this_thread::sleep_for(std::chrono::seconds(10));
    return kFailed;
  }
  if (!ok) {
    return Print(headroom::cuda::ProbeErrorJson(failure.stage, failure.error),
                 kFailed);
  }
  return Print(headroom::cuda::ProbeReportJson(report), 0);
}
