#include "worker/gpu/cuda_driver.h"

#include <dlfcn.h>

#include <cstdio>
#include <utility>

#include "worker/gpu/dl_symbols.h"
#include "worker/gpu/nvml.h"

namespace headroom {
namespace gpu {
namespace {

// The ABI of the driver entry points used here, as cuda.h declares them:
// CUresult and CUdevice_attribute are C enums (int), CUdevice an int.
using CuResult = int;
using CuDevice = int;
constexpr CuResult kSuccess = 0;
constexpr int kAttributeComputeCapabilityMajor = 75;
constexpr int kAttributeComputeCapabilityMinor = 76;

struct CuUuid {
  unsigned char bytes[16];
};

// Names and hints for the results a discovery is likely to meet, for when
// the library cannot name them itself (the toolkit's stub cannot).
const char* ResultName(CuResult code) {
  switch (code) {
    case 1:
      return "CUDA_ERROR_INVALID_VALUE";
    case 2:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case 4:
      return "CUDA_ERROR_DEINITIALIZED";
    case 34:
      return "CUDA_ERROR_STUB_LIBRARY";
    case 46:
      return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100:
      return "CUDA_ERROR_NO_DEVICE";
    case 101:
      return "CUDA_ERROR_INVALID_DEVICE";
    case 304:
      return "CUDA_ERROR_OPERATING_SYSTEM";
    case 802:
      return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803:
      return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804:
      return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 999:
      return "CUDA_ERROR_UNKNOWN";
    default:
      return nullptr;
  }
}

const char* ResultHint(CuResult code) {
  switch (code) {
    case 34:
      return "the library found is the CUDA toolkit's stub, not a driver: "
             "no NVIDIA driver is installed";
    case 100:
      return "the driver sees no GPU (check CUDA_VISIBLE_DEVICES and "
             "nvidia-smi)";
    case 802:
      return "the driver is not ready (on NVSwitch systems, is "
             "nvidia-fabricmanager running?)";
    case 803:
      return "the kernel module and the user-space driver differ in "
             "version (reload the module or reboot)";
    default:
      return nullptr;
  }
}

void SetWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

}  // namespace

struct CudaDriver::Api {
  CuResult (*init)(unsigned);
  CuResult (*driver_get_version)(int*);
  CuResult (*device_get_count)(int*);
  CuResult (*device_get)(CuDevice*, int);
  CuResult (*device_get_name)(char*, int, CuDevice);
  CuResult (*device_total_mem)(size_t*, CuDevice);
  CuResult (*device_get_attribute)(int*, int, CuDevice);
  CuResult (*device_get_uuid)(CuUuid*, CuDevice);        // optional
  CuResult (*get_error_name)(CuResult, const char**);    // optional
  CuResult (*get_error_string)(CuResult, const char**);  // optional

  // "<call>: <name>: <description>; <hint>".
  std::string Error(const std::string& call, CuResult code) const {
    const char* name = nullptr;
    const char* text = nullptr;
    if (get_error_name == nullptr || get_error_name(code, &name) != kSuccess) {
      name = nullptr;
    }
    if (get_error_string == nullptr ||
        get_error_string(code, &text) != kSuccess) {
      text = nullptr;
    }
    if (name == nullptr) name = ResultName(code);
    std::string message = call + ": ";
    message += name != nullptr ? name : "CUresult " + std::to_string(code);
    if (text != nullptr) message += std::string(": ") + text;
    if (const char* hint = ResultHint(code))
      message += std::string("; ") + hint;
    return message;
  }
};

const char* CudaDriver::DefaultLibrary() { return "libcuda.so.1"; }

std::unique_ptr<CudaDriver> CudaDriver::Load(const std::string& lib,
                                             std::string* why_not) {
  std::string why;
  void* handle = OpenLibrary(lib, &why);
  if (handle == nullptr) {
    SetWhy(why_not, "CUDA driver unavailable: " + why);
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  SymbolResolver resolve(handle, lib);
  resolve.Required(&api->init, {"cuInit"});
  resolve.Required(&api->driver_get_version, {"cuDriverGetVersion"});
  resolve.Required(&api->device_get_count, {"cuDeviceGetCount"});
  resolve.Required(&api->device_get, {"cuDeviceGet"});
  resolve.Required(&api->device_get_name, {"cuDeviceGetName"});
  resolve.Required(&api->device_total_mem, {"cuDeviceTotalMem_v2"});
  resolve.Required(&api->device_get_attribute, {"cuDeviceGetAttribute"});
  resolve.Optional(&api->device_get_uuid,
                   {"cuDeviceGetUuid_v2", "cuDeviceGetUuid"});
  resolve.Optional(&api->get_error_name, {"cuGetErrorName"});
  resolve.Optional(&api->get_error_string, {"cuGetErrorString"});
  if (!resolve.ok()) {
    SetWhy(why_not, "CUDA driver unavailable: " + resolve.missing());
    dlclose(handle);
    return nullptr;
  }
  const CuResult init = api->init(0);
  if (init != kSuccess) {
    SetWhy(why_not, "CUDA driver unavailable: " +
                        api->Error("cuInit(0) in " + lib, init));
    dlclose(handle);
    return nullptr;
  }
  return std::unique_ptr<CudaDriver>(new CudaDriver(std::move(api)));
}

CudaDriver::CudaDriver(std::unique_ptr<Api> api) : api_(std::move(api)) {}

CudaDriver::~CudaDriver() = default;

int CudaDriver::Version() const {
  int version = 0;
  if (api_->driver_get_version(&version) != kSuccess) return 0;
  return version;
}

bool CudaDriver::DeviceCount(int* count, std::string* why_not) const {
  const CuResult rc = api_->device_get_count(count);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("cuDeviceGetCount", rc));
    return false;
  }
  return true;
}

bool CudaDriver::Describe(int ordinal, GpuInfo* info,
                          std::string* why_not) const {
  const std::string which = "(device " + std::to_string(ordinal) + ")";
  CuDevice device = 0;
  CuResult rc = api_->device_get(&device, ordinal);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("cuDeviceGet" + which, rc));
    return false;
  }
  *info = GpuInfo();
  info->index = ordinal;
  char name[256] = {};
  rc = api_->device_get_name(name, sizeof(name) - 1, device);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("cuDeviceGetName" + which, rc));
    return false;
  }
  info->name = name;
  size_t bytes = 0;
  rc = api_->device_total_mem(&bytes, device);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("cuDeviceTotalMem" + which, rc));
    return false;
  }
  info->total_memory_bytes = bytes;
  rc = api_->device_get_attribute(&info->cc_major,
                                  kAttributeComputeCapabilityMajor, device);
  if (rc == kSuccess) {
    rc = api_->device_get_attribute(&info->cc_minor,
                                    kAttributeComputeCapabilityMinor, device);
  }
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("cuDeviceGetAttribute" + which, rc));
    return false;
  }
  const int version = Version();
  if (version > 0) info->cuda_version = CudaVersionString(version);
  CuUuid uuid = {};
  if (api_->device_get_uuid != nullptr &&
      api_->device_get_uuid(&uuid, device) == kSuccess) {
    info->uuid = FormatGpuUuid(uuid.bytes);
  }
  return true;
}

std::vector<GpuInfo> DiscoverGpus(std::string* why_not) {
  return DiscoverGpus(CudaDriver::DefaultLibrary(), Nvml::DefaultLibrary(),
                      why_not);
}

std::vector<GpuInfo> DiscoverGpus(const std::string& cuda_lib,
                                  const std::string& nvml_lib,
                                  std::string* why_not) {
  std::string nvml_why;
  std::unique_ptr<Nvml> nvml = Nvml::Load(nvml_lib, &nvml_why);
  std::string why;
  std::unique_ptr<CudaDriver> driver = CudaDriver::Load(cuda_lib, &why);
  int count = 0;
  if (driver != nullptr && driver->DeviceCount(&count, &why) && count == 0) {
    why = "the CUDA driver reports 0 devices";
  }
  if (driver == nullptr || count <= 0) {
    unsigned nvml_count = 0;
    if (nvml != nullptr && nvml->DeviceCount(&nvml_count, nullptr) &&
        nvml_count > 0) {
      why += " (NVML sees " + std::to_string(nvml_count) +
             " GPUs: is CUDA_VISIBLE_DEVICES hiding them?)";
    }
    SetWhy(why_not, why);
    return {};
  }

  std::string notes;
  auto note = [&notes](const std::string& text) {
    if (!notes.empty()) notes += "; ";
    notes += text;
  };
  std::string driver_version;
  if (nvml == nullptr) {
    note(nvml_why + " (no driver version, power or energy)");
  } else {
    std::string version_why;
    driver_version = nvml->DriverVersion(&version_why);
    if (driver_version.empty()) note(version_why);
  }
  std::vector<GpuInfo> gpus;
  for (int i = 0; i < count && i < 1024; ++i) {
    GpuInfo info;
    std::string describe_why;
    if (!driver->Describe(i, &info, &describe_why)) {
      note(describe_why);
      continue;
    }
    info.driver_version = driver_version;
    if (nvml != nullptr) {
      unsigned nvml_index = 0;
      std::string match_why;
      if (info.uuid.empty()) {
        note("device " + std::to_string(i) +
             ": no UUID from the driver, not matched to NVML");
      } else if (nvml->IndexOfUuid(info.uuid, &nvml_index, &match_why)) {
        info.nvml_index = static_cast<int>(nvml_index);
      } else {
        note("device " + std::to_string(i) + ": " + match_why);
      }
    }
    gpus.push_back(std::move(info));
  }
  if (gpus.empty()) {
    SetWhy(why_not, "no device could be described: " + notes);
    return gpus;
  }
  SetWhy(why_not, notes);
  return gpus;
}

std::string FormatGpuUuid(const unsigned char bytes[16]) {
  char text[48];
  std::snprintf(text, sizeof(text),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                "%02x%02x%02x%02x%02x%02x",
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5],
                bytes[6], bytes[7], bytes[8], bytes[9], bytes[10], bytes[11],
                bytes[12], bytes[13], bytes[14], bytes[15]);
  return text;
}

}  // namespace gpu
}  // namespace headroom
