#include "worker/gpu/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <utility>

#include "worker/gpu/dl_symbols.h"

namespace headroom {
namespace gpu {
namespace {

// The ABI of the NVML entry points used here, as nvml.h declares them:
// nvmlReturn_t is a C enum (int), nvmlDevice_t an opaque pointer.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kSuccess = 0;
constexpr NvmlReturn kNotSupported = 3;
constexpr NvmlReturn kNotFound = 6;

// nvmlMemory_t (version 1): total, free and used bytes.
struct NvmlMemoryV1 {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// Buffer sizes from nvml.h (the _V2 sizes; large enough for every version).
constexpr unsigned kNameBufferSize = 96;
constexpr unsigned kUuidBufferSize = 96;
constexpr unsigned kDriverVersionBufferSize = 80;

// The names nvml.h gives the return codes, for messages that can be
// searched for. Codes past this table print as numbers.
const char* ReturnName(NvmlReturn code) {
  static const char* const kNames[] = {
      "NVML_SUCCESS",
      "NVML_ERROR_UNINITIALIZED",
      "NVML_ERROR_INVALID_ARGUMENT",
      "NVML_ERROR_NOT_SUPPORTED",
      "NVML_ERROR_NO_PERMISSION",
      "NVML_ERROR_ALREADY_INITIALIZED",
      "NVML_ERROR_NOT_FOUND",
      "NVML_ERROR_INSUFFICIENT_SIZE",
      "NVML_ERROR_INSUFFICIENT_POWER",
      "NVML_ERROR_DRIVER_NOT_LOADED",
      "NVML_ERROR_TIMEOUT",
      "NVML_ERROR_IRQ_ISSUE",
      "NVML_ERROR_LIBRARY_NOT_FOUND",
      "NVML_ERROR_FUNCTION_NOT_FOUND",
      "NVML_ERROR_CORRUPTED_INFOROM",
      "NVML_ERROR_GPU_IS_LOST",
      "NVML_ERROR_RESET_REQUIRED",
      "NVML_ERROR_OPERATING_SYSTEM",
      "NVML_ERROR_LIB_RM_VERSION_MISMATCH",
      "NVML_ERROR_IN_USE",
      "NVML_ERROR_MEMORY",
      "NVML_ERROR_NO_DATA",
  };
  if (code >= 0 && code < static_cast<int>(sizeof(kNames) / sizeof(*kNames))) {
    return kNames[code];
  }
  if (code == 999) return "NVML_ERROR_UNKNOWN";
  return nullptr;
}

void SetWhy(std::string* why, std::string text) {
  if (why != nullptr) *why = std::move(text);
}

}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  const char* (*error_string)(NvmlReturn);  // optional
  NvmlReturn (*device_get_count)(unsigned*);
  NvmlReturn (*device_get_handle_by_index)(unsigned, NvmlDevice*);
  NvmlReturn (*device_get_handle_by_uuid)(const char*, NvmlDevice*);  // opt.
  NvmlReturn (*device_get_name)(NvmlDevice, char*, unsigned);         // opt.
  NvmlReturn (*device_get_uuid)(NvmlDevice, char*, unsigned);         // opt.
  NvmlReturn (*device_get_memory_info)(NvmlDevice, NvmlMemoryV1*);
  NvmlReturn (*device_get_power_usage)(NvmlDevice, unsigned*);  // optional
  NvmlReturn (*device_get_total_energy_consumption)(
      NvmlDevice, unsigned long long*);  // optional
  NvmlReturn (*device_get_cuda_compute_capability)(NvmlDevice, int*,
                                                   int*);    // optional
  NvmlReturn (*system_get_driver_version)(char*, unsigned);  // optional
  NvmlReturn (*system_get_cuda_driver_version)(int*);        // optional

  // "<call>: <NVML's text> (<code name>)".
  std::string Error(const char* call, NvmlReturn code) const {
    std::string text = call;
    text += ": ";
    const char* message =
        error_string != nullptr ? error_string(code) : nullptr;
    text += message != nullptr ? message : "NVML error";
    const char* name = ReturnName(code);
    char suffix[64];
    if (name != nullptr) {
      std::snprintf(suffix, sizeof(suffix), " (%s)", name);
    } else {
      std::snprintf(suffix, sizeof(suffix), " (NVML return code %d)", code);
    }
    return text + suffix;
  }
};

const char* Nvml::DefaultLibrary() { return "libnvidia-ml.so.1"; }

std::unique_ptr<Nvml> Nvml::Load(const std::string& lib, std::string* why_not) {
  std::string why;
  void* handle = OpenLibrary(lib, &why);
  if (handle == nullptr) {
    SetWhy(why_not, "NVML unavailable: " + why);
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  SymbolResolver resolve(handle, lib);
  resolve.Required(&api->init, {"nvmlInit_v2"});
  resolve.Required(&api->shutdown, {"nvmlShutdown"});
  resolve.Optional(&api->error_string, {"nvmlErrorString"});
  resolve.Required(&api->device_get_count,
                   {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"});
  resolve.Required(
      &api->device_get_handle_by_index,
      {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"});
  resolve.Optional(&api->device_get_handle_by_uuid,
                   {"nvmlDeviceGetHandleByUUID"});
  resolve.Optional(&api->device_get_name, {"nvmlDeviceGetName"});
  resolve.Optional(&api->device_get_uuid, {"nvmlDeviceGetUUID"});
  resolve.Required(&api->device_get_memory_info, {"nvmlDeviceGetMemoryInfo"});
  resolve.Optional(&api->device_get_power_usage, {"nvmlDeviceGetPowerUsage"});
  resolve.Optional(&api->device_get_total_energy_consumption,
                   {"nvmlDeviceGetTotalEnergyConsumption"});
  resolve.Optional(&api->device_get_cuda_compute_capability,
                   {"nvmlDeviceGetCudaComputeCapability"});
  resolve.Optional(&api->system_get_driver_version,
                   {"nvmlSystemGetDriverVersion"});
  resolve.Optional(
      &api->system_get_cuda_driver_version,
      {"nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"});
  if (!resolve.ok()) {
    SetWhy(why_not, "NVML unavailable: " + resolve.missing());
    dlclose(handle);
    return nullptr;
  }
  const NvmlReturn init = api->init();
  if (init != kSuccess) {
    SetWhy(why_not, "NVML unavailable: " + api->Error("nvmlInit_v2", init));
    dlclose(handle);
    return nullptr;
  }
  return std::unique_ptr<Nvml>(new Nvml(handle, std::move(api)));
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api)
    : handle_(handle), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(handle_);
}

bool Nvml::DeviceCount(unsigned* count, std::string* why_not) const {
  const NvmlReturn rc = api_->device_get_count(count);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("nvmlDeviceGetCount", rc));
    return false;
  }
  return true;
}

bool Nvml::Handle(unsigned index, void** device, std::string* why_not) const {
  const NvmlReturn rc = api_->device_get_handle_by_index(index, device);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error(("nvmlDeviceGetHandleByIndex(" +
                                 std::to_string(index) + ")")
                                    .c_str(),
                                rc));
    return false;
  }
  return true;
}

bool Nvml::IndexOfUuid(const std::string& uuid, unsigned* index,
                       std::string* why_not) const {
  // Walk the devices rather than nvmlDeviceGetHandleByUUID +
  // nvmlDeviceGetIndex: it needs only the entry points already required.
  if (api_->device_get_uuid == nullptr) {
    SetWhy(why_not, "nvmlDeviceGetUUID missing: cannot match " + uuid);
    return false;
  }
  unsigned count = 0;
  if (!DeviceCount(&count, why_not)) return false;
  for (unsigned i = 0; i < count && i < 1024; ++i) {
    NvmlDevice device = nullptr;
    if (api_->device_get_handle_by_index(i, &device) != kSuccess) continue;
    char buffer[kUuidBufferSize] = {};
    if (api_->device_get_uuid(device, buffer, sizeof(buffer)) != kSuccess) {
      continue;
    }
    if (uuid == buffer) {
      *index = i;
      return true;
    }
  }
  SetWhy(why_not, "no NVML device has UUID " + uuid + " (NVML sees " +
                      std::to_string(count) + " devices)");
  return false;
}

bool Nvml::Describe(unsigned index, NvmlDeviceFacts* facts,
                    std::string* why_not) const {
  NvmlDevice device = nullptr;
  if (!Handle(index, &device, why_not)) return false;
  *facts = NvmlDeviceFacts();
  facts->index = index;
  NvmlMemoryV1 memory = {};
  const NvmlReturn mem_rc = api_->device_get_memory_info(device, &memory);
  if (mem_rc != kSuccess) {
    SetWhy(why_not, api_->Error("nvmlDeviceGetMemoryInfo", mem_rc));
    return false;
  }
  facts->memory_total_bytes = memory.total;
  facts->memory_used_bytes = memory.used;

  auto note = [facts](const std::string& text) {
    if (!facts->notes.empty()) facts->notes += "; ";
    facts->notes += text;
  };
  char buffer[kNameBufferSize] = {};
  if (api_->device_get_name == nullptr) {
    note("nvmlDeviceGetName missing");
  } else if (NvmlReturn rc =
                 api_->device_get_name(device, buffer, sizeof(buffer));
             rc != kSuccess) {
    note(api_->Error("nvmlDeviceGetName", rc));
  } else {
    facts->name = buffer;
  }
  char uuid[kUuidBufferSize] = {};
  if (api_->device_get_uuid == nullptr) {
    note("nvmlDeviceGetUUID missing");
  } else if (NvmlReturn rc = api_->device_get_uuid(device, uuid, sizeof(uuid));
             rc != kSuccess) {
    note(api_->Error("nvmlDeviceGetUUID", rc));
  } else {
    facts->uuid = uuid;
  }
  if (api_->device_get_cuda_compute_capability == nullptr) {
    note("nvmlDeviceGetCudaComputeCapability missing");
  } else if (NvmlReturn rc = api_->device_get_cuda_compute_capability(
                 device, &facts->cc_major, &facts->cc_minor);
             rc != kSuccess) {
    facts->cc_major = facts->cc_minor = -1;
    note(api_->Error("nvmlDeviceGetCudaComputeCapability", rc));
  }
  return true;
}

bool Nvml::MemoryUsedBytes(unsigned index, uint64_t* used_bytes,
                           std::string* why_not) const {
  NvmlDevice device = nullptr;
  if (!Handle(index, &device, why_not)) return false;
  NvmlMemoryV1 memory = {};
  const NvmlReturn rc = api_->device_get_memory_info(device, &memory);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("nvmlDeviceGetMemoryInfo", rc));
    return false;
  }
  *used_bytes = memory.used;
  return true;
}

CounterRead Nvml::PowerMw(unsigned index) const {
  CounterRead read;
  NvmlDevice device = nullptr;
  if (!Handle(index, &device, &read.why)) return read;
  if (api_->device_get_power_usage == nullptr) {
    read.kind = CounterRead::Kind::kUnsupported;
    read.why = "power unsupported (nvmlDeviceGetPowerUsage missing)";
    return read;
  }
  unsigned milliwatts = 0;
  const NvmlReturn rc = api_->device_get_power_usage(device, &milliwatts);
  if (rc == kNotSupported || rc == kNotFound) {
    read.kind = CounterRead::Kind::kUnsupported;
    read.why = "power unsupported";
  } else if (rc != kSuccess) {
    read.why = api_->Error("nvmlDeviceGetPowerUsage", rc);
  } else {
    read.kind = CounterRead::Kind::kValue;
    read.value = milliwatts;
  }
  return read;
}

CounterRead Nvml::TotalEnergyMj(unsigned index) const {
  CounterRead read;
  NvmlDevice device = nullptr;
  if (!Handle(index, &device, &read.why)) return read;
  if (api_->device_get_total_energy_consumption == nullptr) {
    read.kind = CounterRead::Kind::kUnsupported;
    read.why =
        "energy unsupported (nvmlDeviceGetTotalEnergyConsumption missing)";
    return read;
  }
  unsigned long long millijoules = 0;
  const NvmlReturn rc =
      api_->device_get_total_energy_consumption(device, &millijoules);
  if (rc == kNotSupported || rc == kNotFound) {
    read.kind = CounterRead::Kind::kUnsupported;
    read.why = "energy unsupported";
  } else if (rc != kSuccess) {
    read.why = api_->Error("nvmlDeviceGetTotalEnergyConsumption", rc);
  } else {
    read.kind = CounterRead::Kind::kValue;
    read.value = millijoules;
  }
  return read;
}

std::string Nvml::DriverVersion(std::string* why_not) const {
  if (api_->system_get_driver_version == nullptr) {
    SetWhy(why_not, "nvmlSystemGetDriverVersion missing");
    return "";
  }
  char buffer[kDriverVersionBufferSize] = {};
  const NvmlReturn rc = api_->system_get_driver_version(buffer, sizeof(buffer));
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("nvmlSystemGetDriverVersion", rc));
    return "";
  }
  return buffer;
}

std::string Nvml::CudaDriverVersion(std::string* why_not) const {
  if (api_->system_get_cuda_driver_version == nullptr) {
    SetWhy(why_not, "nvmlSystemGetCudaDriverVersion missing");
    return "";
  }
  int version = 0;
  const NvmlReturn rc = api_->system_get_cuda_driver_version(&version);
  if (rc != kSuccess) {
    SetWhy(why_not, api_->Error("nvmlSystemGetCudaDriverVersion", rc));
    return "";
  }
  return CudaVersionString(version);
}

std::string CudaVersionString(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string((version % 1000) / 10);
}

}  // namespace gpu
}  // namespace headroom
