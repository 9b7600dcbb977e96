#ifndef HEADROOM_WORKER_DAEMON_GPU_SETUP_H_
#define HEADROOM_WORKER_DAEMON_GPU_SETUP_H_

// Which executors this worker runs and which GPUs it reports: real GPUs
// (CUDA driver + NVML, both loaded at run time) for torch and cuda, a
// simulated card for sim. What is missing is said in notes, not fatal.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/fleet.pb.h"
#include "worker/daemon/executor.h"
#include "worker/daemon/sim_executor.h"

namespace headroom::worker {

struct GpuSetupOptions {
  // "auto", or any of "torch", "cuda", "sim".
  std::vector<std::string> executors = {"auto"};
  SimGpuConfig sim;
  int sample_ms = 20;
  std::string python = "python3";
  std::string harness;
  std::string cuda_probe;
  std::string argv0;
};

struct GpuSetup {
  std::vector<v1::GpuDevice> gpus;
  // The node's host memory, bytes: MemTotal of /proc/meminfo for real GPUs,
  // the simulated node's declared size for sim (0: not known).
  uint64_t host_memory_bytes = 0;
  std::vector<std::unique_ptr<Executor>> executors;
  std::vector<std::string> notes;
  std::map<std::string, std::string> framework_versions;
};

// MemTotal of a /proc/meminfo-format file, bytes ("MemTotal: N kB", kB
// being KiB); 0 when the file or the line is missing or malformed.
uint64_t HostMemoryBytes(const std::string& meminfo_path = "/proc/meminfo");

// INVALID_ARGUMENT for an unknown executor or simulated GPU, a simulated
// node of other than 1..kMaxSimGpus cards or host memory out of range; a real
// executor asked for explicitly on a machine without a GPU is
// FAILED_PRECONDITION with the reason.
absl::StatusOr<GpuSetup> SetUpExecutors(const GpuSetupOptions& options);

// The worker id when --worker_id is not given: the host name, a dash, and
// the first GPU's catalog kind in lower case ("node7-h100"), "sim-" before it
// for a simulated card ("node7-sim-l4"); a card the catalog does not know
// gives its driver name, lower case with runs of other characters than
// letters, digits, '.' and '_' as one '-'. The host name alone without GPUs.
std::string DefaultWorkerId(const std::string& hostname,
                            const std::vector<v1::GpuDevice>& gpus);

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_GPU_SETUP_H_
