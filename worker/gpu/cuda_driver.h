#ifndef HEADROOM_WORKER_GPU_CUDA_DRIVER_H_
#define HEADROOM_WORKER_GPU_CUDA_DRIVER_H_

// GPU discovery through the CUDA driver API (libcuda.so.1) loaded with
// dlopen, merged with NVML's facts when NVML loads. Builds and runs without
// a driver or a toolkit: no driver means no GPUs, with the reason.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace headroom {
namespace gpu {

// One GPU as the worker reports it to the planner.
struct GpuInfo {
  int index = 0;  // CUDA ordinal (after CUDA_VISIBLE_DEVICES)
  std::string name;
  uint64_t total_memory_bytes = 0;
  int cc_major = 0;
  int cc_minor = 0;
  std::string driver_version;  // "580.65.06" from NVML; empty without it
  std::string cuda_version;    // newest CUDA the driver supports, "13.0"
  std::string uuid;            // "GPU-xxxxxxxx-...", as nvidia-smi prints it
  int nvml_index = -1;         // NVML's index of this GPU; -1 without NVML
};

// A loaded and initialized CUDA driver (cuInit(0) done). The library stays
// loaded after this object is gone once cuInit succeeded: the driver keeps
// process-wide state and threads and cannot be unloaded safely.
class CudaDriver {
 public:
  // Opens `lib` (normally "libcuda.so.1"), resolves the entry points and
  // calls cuInit(0). Null, with `why_not` naming the library, the missing
  // symbols or the CUresult of cuInit (CUDA_ERROR_NO_DEVICE,
  // CUDA_ERROR_STUB_LIBRARY, ...), on failure. `why_not` may be null.
  static std::unique_ptr<CudaDriver> Load(const std::string& lib,
                                          std::string* why_not);

  // "libcuda.so.1".
  static const char* DefaultLibrary();

  ~CudaDriver();

  CudaDriver(const CudaDriver&) = delete;
  CudaDriver& operator=(const CudaDriver&) = delete;

  // cuDriverGetVersion: 13000 for CUDA 13.0; 0 if the call fails.
  int Version() const;

  // cuDeviceGetCount; false with the CUresult on failure.
  bool DeviceCount(int* count, std::string* why_not) const;

  // Name, memory, compute capability, CUDA version and (where the driver has
  // cuDeviceGetUuid) UUID of CUDA ordinal `ordinal`. driver_version and
  // nvml_index are left for NVML to fill.
  bool Describe(int ordinal, GpuInfo* info, std::string* why_not) const;

  struct Api;  // the resolved entry points; defined in cuda_driver.cc

 private:
  explicit CudaDriver(std::unique_ptr<Api> api);

  // The dlopen handle is never closed (see the class comment), so it is not
  // kept.
  std::unique_ptr<Api> api_;
};

// Every GPU the CUDA driver sees, with NVML's driver version and index
// merged in when NVML loads (matched by UUID). Empty, with `why_not` saying
// why, when there is no driver, no device or the driver fails. When GPUs are
// found, `why_not` holds notes on what is missing (e.g. "NVML unavailable:
// ...") or is empty. `why_not` may be null.
std::vector<GpuInfo> DiscoverGpus(std::string* why_not);

// As above with explicit library names, for tests and odd installs.
std::vector<GpuInfo> DiscoverGpus(const std::string& cuda_lib,
                                  const std::string& nvml_lib,
                                  std::string* why_not);

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" for the 16 bytes of a CUDA UUID
// (CUuuid, cudaUUID_t), the form NVML and nvidia-smi use.
std::string FormatGpuUuid(const unsigned char bytes[16]);

}  // namespace gpu
}  // namespace headroom

#endif  // HEADROOM_WORKER_GPU_CUDA_DRIVER_H_
