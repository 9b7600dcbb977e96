#ifndef HEADROOM_WORKER_GPU_NVML_H_
#define HEADROOM_WORKER_GPU_NVML_H_

// NVML (the NVIDIA management library) loaded at run time with dlopen, so
// the worker builds and runs on machines without an NVIDIA driver: no NVML
// means no power or energy figures, said plainly, never a crash.
//
// Only plain C++17 and libdl: nvml.h is not needed to build (the few types
// and entry points used are declared in nvml.cc).

#include <cstdint>
#include <memory>
#include <string>

namespace headroom {
namespace gpu {

// What one device says about itself. Fields NVML could not give are empty
// (strings) or -1 (compute capability); `notes` says which and why.
struct NvmlDeviceFacts {
  unsigned index = 0;
  std::string name;
  std::string uuid;  // "GPU-xxxxxxxx-...", as nvidia-smi prints it
  uint64_t memory_total_bytes = 0;
  uint64_t memory_used_bytes = 0;
  int cc_major = -1;
  int cc_minor = -1;
  std::string notes;
};

// One read of a counter that a device may not support: power and energy are
// missing on some boards (and in most VMs), which is not an error.
struct CounterRead {
  enum class Kind { kValue, kUnsupported, kError };
  Kind kind = Kind::kError;
  uint64_t value = 0;  // valid when kind == kValue
  std::string why;     // "energy unsupported", or NVML's error text
};

// A loaded and initialized NVML. All queries are const and NVML is
// thread-safe, so one instance may be shared by threads (the sampler reads
// it while the caller describes devices).
class Nvml {
 public:
  // Opens `lib` (normally "libnvidia-ml.so.1"), resolves the entry points
  // and calls nvmlInit_v2. Null, with `why_not` saying what was missing or
  // what NVML answered, when the library, a required symbol or the
  // initialization fails. `why_not` may be null.
  static std::unique_ptr<Nvml> Load(const std::string& lib,
                                    std::string* why_not);

  // The library the system loader finds: "libnvidia-ml.so.1".
  static const char* DefaultLibrary();

  // nvmlShutdown, then dlclose.
  ~Nvml();

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // Number of devices NVML sees (all of the node's GPUs, whatever
  // CUDA_VISIBLE_DEVICES says). False with a reason on failure.
  bool DeviceCount(unsigned* count, std::string* why_not) const;

  // The NVML index of the device with this UUID ("GPU-..."); false when
  // no device has it. CUDA orders devices differently from NVML unless
  // CUDA_DEVICE_ORDER=PCI_BUS_ID, so match devices by UUID, not by index.
  bool IndexOfUuid(const std::string& uuid, unsigned* index,
                   std::string* why_not) const;

  // Name, UUID, memory and compute capability of device `index`. False only
  // when the device cannot be opened or its memory cannot be read; the
  // other fields are best effort (see NvmlDeviceFacts::notes).
  bool Describe(unsigned index, NvmlDeviceFacts* facts,
                std::string* why_not) const;

  // Memory used on the whole device (all processes plus what the driver
  // reserves), in bytes, from nvmlDeviceGetMemoryInfo.
  bool MemoryUsedBytes(unsigned index, uint64_t* used_bytes,
                       std::string* why_not) const;

  // Board power now, in milliwatts (nvmlDeviceGetPowerUsage; on recent
  // boards an average over the last second or less, not an instant value).
  CounterRead PowerMw(unsigned index) const;

  // Energy used since the driver was last loaded, in millijoules
  // (nvmlDeviceGetTotalEnergyConsumption, Volta and later). kUnsupported
  // with why == "energy unsupported" where the board has no counter.
  CounterRead TotalEnergyMj(unsigned index) const;

  // The driver's version, e.g. "580.65.06"; empty with a reason on failure.
  std::string DriverVersion(std::string* why_not) const;

  // The newest CUDA version the driver supports, e.g. "13.0"; empty with a
  // reason on failure.
  std::string CudaDriverVersion(std::string* why_not) const;

  struct Api;  // the resolved entry points; defined in nvml.cc

 private:
  Nvml(void* handle, std::unique_ptr<Api> api);

  // Opens device `index`; false with a reason naming the index on failure.
  bool Handle(unsigned index, void** device, std::string* why_not) const;

  void* handle_;  // from dlopen
  std::unique_ptr<Api> api_;
};

// "13.0" for CUDA's integer versions (1000 * major + 10 * minor, 13000).
std::string CudaVersionString(int version);

}  // namespace gpu
}  // namespace headroom

#endif  // HEADROOM_WORKER_GPU_NVML_H_
