#ifndef HEADROOM_WORKER_DAEMON_EXECUTOR_H_
#define HEADROOM_WORKER_DAEMON_EXECUTOR_H_

// What runs a probe assignment on a GPU. Every executor measures the same
// things the same way seen from the daemon: live samples while a batch
// runs, one BatchResult per batch run, and an outcome at the end.

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "headroom/v1/fleet.pb.h"

namespace headroom::worker {

// Why an executor must stop early.
enum class StopReason : int {
  kNone = 0,
  kCancelled = 1,  // the planner cancelled the probe: stop now
  kShutdown = 2,   // the daemon is stopping: finish or hand back
};

// One reading of one GPU.
struct GpuReading {
  // The GPU read, for a multi-GPU assignment (one reading per rank); unset:
  // the assignment's gpu_index.
  std::optional<uint32_t> gpu_index;
  uint64_t memory_used_bytes = 0;
  std::optional<double> power_w;
  std::optional<double> total_energy_mj;
};

class ExecutionSink {
 public:
  virtual ~ExecutionSink() = default;
  virtual void Sample(const v1::BatchRun& run, int64_t t_ms,
                      const GpuReading& reading) = 0;
  virtual void BatchDone(const v1::BatchRun& run, v1::BatchResult result) = 0;
};

struct ExecutionOutcome {
  // A failure of the whole assignment (not of one batch, which is a result).
  std::string error;
  // For probes that are not per batch (the cuda executor's JSON document).
  std::string details_json;
  // Stopped by a shutdown before every run was measured: hand back.
  bool handed_back = false;
  // An autotune assignment's record (RunAutotune), sent with the final
  // result.
  std::optional<v1::AutotuneRecord> autotune_record;
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Runs `assignment.runs()` in order on `assignment.gpu_index()`. Checks
  // `stop` between runs (and within, where it can).
  virtual ExecutionOutcome Run(const v1::Assignment& assignment,
                               ExecutionSink* sink,
                               const std::atomic<StopReason>& stop) = 0;
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_EXECUTOR_H_
