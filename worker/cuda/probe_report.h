#ifndef HEADROOM_WORKER_CUDA_PROBE_REPORT_H_
#define HEADROOM_WORKER_CUDA_PROBE_REPORT_H_

// What headroom-cuda-probe measures and how it says so: its options and
// flags, its report and the one JSON document it prints. Plain C++ (no
// CUDA), so it is tested on machines without a GPU.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace headroom {
namespace cuda {

// Bounds of the flags; a value outside is an error, never clamped.
inline constexpr double kMaxSecondsPerMeasurement = 30;
inline constexpr int kMinGemmN = 256;
inline constexpr int kMaxGemmN = 32768;
inline constexpr uint64_t kMinCopyBytes = uint64_t{1} << 20;   // 1 MiB
inline constexpr uint64_t kMaxCopyBytes = uint64_t{16} << 30;  // 16 GiB

struct ProbeOptions {
  int device = 0;        // CUDA ordinal
  double seconds = 2.0;  // per timed measurement, in (0, 30]
  int gemm_n = 8192;     // square bf16 GEMM size, [256, 32768]
  uint64_t copy_bytes = uint64_t{512} << 20;  // bytes per copy
};

// How long the whole probe may take before its watchdog gives up: two
// minutes for setup (context creation, pinned allocations) plus ten times
// the per-measurement time (five timed windows and their warm-ups).
std::chrono::milliseconds ProbeDeadline(const ProbeOptions& options);

enum class FlagsOutcome { kRun, kHelp, kError };

// Parses --device I, --seconds S, --gemm-n N, --bytes B (also --flag=value)
// and --help. kError with `error` naming the flag and its allowed range.
FlagsOutcome ParseProbeFlags(int argc, const char* const* argv,
                             ProbeOptions* options, std::string* error);

// The --help text.
std::string ProbeUsage();

// Energy over one timed window. `energy_method` says where the energy comes
// from: "nvml_energy_counter" (the board's counter, read before and after),
// "nvml_power_x_time" (mean sampled power times the window, where the counter
// is unsupported) or "unavailable" (no NVML, or no power either).
struct EnergyWindow {
  double wall_seconds = 0;
  std::string energy_method = "unavailable";
  std::optional<double> energy_j;
  std::optional<double> avg_power_w;   // energy / time, or the sampled mean
  std::optional<double> peak_power_w;  // highest sampled power
  // Mean of the power samples: a cross-check of avg_power_w (NVML's power
  // reading is itself an average over up to a second on recent boards).
  std::optional<double> sampled_mean_power_w;
  int64_t power_samples = 0;
};

// One copy direction, timed with CUDA events over repeated copies.
struct CopyMeasurement {
  uint64_t bytes_per_copy = 0;
  int64_t copies = 0;
  double gpu_seconds = 0;  // summed event time of the copies
  double gb_per_s = 0;     // bytes copied / gpu_seconds / 1e9
  EnergyWindow energy;
};

// The bf16 GEMM loop (cublasGemmEx, fp32 accumulation), timed with events.
struct GemmMeasurement {
  int n = 0;
  int64_t iterations = 0;
  double gpu_seconds = 0;
  double tflop = 0;  // 2 n^3 per iteration, in 10^12
  double tflop_per_s = 0;
  EnergyWindow energy;
};

struct ProbeReport {
  ProbeOptions options;

  // The device, as CUDA and NVML describe it.
  int device_index = 0;
  int nvml_index = -1;  // -1 without NVML or when the UUID did not match
  std::string name;
  std::string uuid;
  uint64_t total_memory_bytes = 0;
  int cc_major = 0;
  int cc_minor = 0;
  std::string driver_version;        // "580.65.06"; empty without NVML
  std::string cuda_driver_version;   // newest CUDA the driver supports
  std::string cuda_runtime_version;  // the runtime this probe was built with
  std::string cublas_version;
  std::string built_for_architectures;  // "80,86,89,90,100,120"
  bool nvml_available = false;
  std::string nvml_note;  // why NVML is missing, or empty

  // Device memory the CUDA context takes: NVML's used after creating it
  // minus before ("nvml_used_delta"), or, without NVML, cudaMemGetInfo's
  // used after it ("cuda_mem_get_info_used", an upper bound: it includes
  // other processes and what the driver reserves).
  std::optional<int64_t> context_overhead_bytes;
  std::string context_overhead_method;
  // Device memory cublasCreate took, and the first GEMM took on top of the
  // matrices (cuBLAS workspace and lazily loaded kernels), both as drops
  // in cudaMemGetInfo's free memory.
  std::optional<int64_t> cublas_create_bytes;
  std::optional<int64_t> cublas_first_gemm_bytes;

  EnergyWindow idle;    // context open, no work
  CopyMeasurement h2d;  // pinned host to device
  CopyMeasurement d2h;  // device to pinned host
  CopyMeasurement d2d;  // within the device
  GemmMeasurement gemm;

  std::vector<std::string> notes;
  double elapsed_seconds = 0;
};

// Energy per GB copied device to device; absent without an energy figure.
std::optional<double> D2dJoulesPerGb(const ProbeReport& report);
// The same less the idle power over the same time; absent without idle
// power.
std::optional<double> D2dJoulesPerGbAboveIdle(const ProbeReport& report);
// Energy per 10^12 floating-point operations of the GEMM loop.
std::optional<double> GemmJoulesPerTflop(const ProbeReport& report);
std::optional<double> GemmJoulesPerTflopAboveIdle(const ProbeReport& report);

// The report as the probe's JSON document (see worker/cuda/README.md).
std::string ProbeReportJson(const ProbeReport& report);

// {"error": error, "stage": stage, "probe": ...}: what the probe prints
// instead of a report when it fails.
std::string ProbeErrorJson(const std::string& stage, const std::string& error);

}  // namespace cuda
}  // namespace headroom

#endif  // HEADROOM_WORKER_CUDA_PROBE_REPORT_H_
