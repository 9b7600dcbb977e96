#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "worker/cuda/cuda_probes.h"
#include "worker/gpu/cuda_driver.h"
#include "worker/gpu/nvml.h"
#include "worker/gpu/sampler.h"

// The architectures this file was compiled for, set by CMake ("80,86,...").
#ifndef HEADROOM_CUDA_ARCHITECTURES
#define HEADROOM_CUDA_ARCHITECTURES "unknown"
#endif

namespace headroom {
namespace cuda {
namespace {

using Clock = std::chrono::steady_clock;

// Bounds of every timed loop, besides its wall-clock limit: at most
// kMaxBatches batches of at most kMaxBatchSize operations each.
constexpr int64_t kMaxBatches = 100000;
constexpr int64_t kMaxBatchSize = 10000;
// A batch is sized to take about this long, so that the loop checks the
// clock often without a synchronization after every operation.
constexpr double kBatchTargetSeconds = 0.05;
// Idle power is sampled for this long at most.
constexpr double kMaxIdleSeconds = 1.0;
// The GEMM runs this long at most before it is timed, so clocks settle.
constexpr double kMaxWarmupSeconds = 0.5;
// Free device memory left aside when sizing buffers (cuBLAS workspace,
// other allocations of the driver).
constexpr uint64_t kMemorySlackBytes = uint64_t{256} << 20;
constexpr std::chrono::milliseconds kSamplePeriod{20};

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string VersionText(int version) {
  return version > 0 ? gpu::CudaVersionString(version) : "none";
}

// Closes a CUDA or cuBLAS resource when it goes out of scope.
template <typename T, typename Release>
class Owned {
 public:
  explicit Owned(Release release) : release_(release) {}
  ~Owned() {
    if (value_ != nullptr) release_(value_);
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  T* out() { return &value_; }
  T get() const { return value_; }

 private:
  T value_ = nullptr;
  Release release_;
};

using DeviceBuffer = Owned<void*, cudaError_t (*)(void*)>;
using HostBuffer = Owned<void*, cudaError_t (*)(void*)>;
using Event = Owned<cudaEvent_t, cudaError_t (*)(cudaEvent_t)>;
using Stream = Owned<cudaStream_t, cudaError_t (*)(cudaStream_t)>;
using CublasHandle = Owned<cublasHandle_t, cublasStatus_t (*)(cublasHandle_t)>;

// Fills `count` bf16 values with a hash of their index, uniform in [-1, 1):
// GEMMs on zeros or constants draw less power than on real data.
__global__ void FillUniformBf16(__nv_bfloat16* data, size_t count,
                                uint32_t seed) {
  const size_t stride = static_cast<size_t>(blockDim.x) * gridDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < count; i += stride) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    data[i] = __float2bfloat16(
        static_cast<float>(h >> 8) * (2.0f / 16777216.0f) - 1.0f);
  }
}

// Energy over a window from NVML: the board's counter where it has one,
// mean sampled power times the window where it has not.
class EnergyMeter {
 public:
  // `nvml` may be null (no energy figures then); it must outlive the meter.
  EnergyMeter(const gpu::Nvml* nvml, int nvml_index)
      : nvml_(nvml), index_(static_cast<unsigned>(nvml_index)) {
    if (nvml_index < 0) nvml_ = nullptr;
  }

  void Begin() {
    if (nvml_ != nullptr) {
      start_energy_ = nvml_->TotalEnergyMj(index_);
      source_ = std::make_unique<gpu::NvmlSampleSource>(nvml_, index_);
      gpu::SamplerOptions options;
      options.period = kSamplePeriod;
      sampler_ = std::make_unique<gpu::Sampler>(source_.get(), options);
      sampler_->Start();
    }
    start_ = Clock::now();
  }

  EnergyWindow End() {
    EnergyWindow window;
    window.wall_seconds = SecondsSince(start_);
    if (nvml_ == nullptr) return window;
    const gpu::CounterRead end_energy = nvml_->TotalEnergyMj(index_);
    sampler_->Stop();
    const gpu::SamplerSummary summary = sampler_->Summary();
    window.power_samples = summary.samples;
    if (summary.peak_power_mw.has_value()) {
      window.peak_power_w = *summary.peak_power_mw / 1e3;
    }
    if (summary.mean_power_mw.has_value()) {
      window.sampled_mean_power_w = *summary.mean_power_mw / 1e3;
    }
    using Kind = gpu::CounterRead::Kind;
    if (start_energy_.kind == Kind::kValue && end_energy.kind == Kind::kValue &&
        end_energy.value >= start_energy_.value && window.wall_seconds > 0) {
      window.energy_method = "nvml_energy_counter";
      window.energy_j = (end_energy.value - start_energy_.value) / 1e3;
      window.avg_power_w = *window.energy_j / window.wall_seconds;
    } else if (window.sampled_mean_power_w.has_value()) {
      window.energy_method = "nvml_power_x_time";
      window.avg_power_w = window.sampled_mean_power_w;
      window.energy_j = *window.avg_power_w * window.wall_seconds;
    }
    return window;
  }

  // Why the counter could not be used, for the report's notes; empty when
  // it could.
  std::string CounterNote() const {
    if (nvml_ == nullptr ||
        start_energy_.kind == gpu::CounterRead::Kind::kValue) {
      return "";
    }
    return start_energy_.why;
  }

 private:
  const gpu::Nvml* nvml_;
  unsigned index_;
  gpu::CounterRead start_energy_;
  std::unique_ptr<gpu::NvmlSampleSource> source_;
  std::unique_ptr<gpu::Sampler> sampler_;
  Clock::time_point start_;
};

// One run of the probes: the report being filled and the first failure.
class ProbeRun {
 public:
  ProbeRun(const ProbeOptions& options,
           const std::function<void(const std::string&)>& on_stage,
           ProbeReport* report, ProbeFailure* failure)
      : options_(options),
        on_stage_(on_stage),
        report_(report),
        failure_(failure) {}

  bool Run();

 private:
  void Stage(const char* stage) {
    stage_ = stage;
    if (on_stage_) on_stage_(stage);
  }
  bool Fail(const std::string& error) {
    failure_->stage = stage_;
    failure_->error = error;
    return false;
  }
  bool Ok(cudaError_t rc, const std::string& call) {
    if (rc == cudaSuccess) return true;
    std::string error =
        call + ": " + cudaGetErrorName(rc) + ": " + cudaGetErrorString(rc);
    const std::string hint = Hint(rc);
    if (!hint.empty()) error += "; " + hint;
    return Fail(error);
  }
  bool Ok(cublasStatus_t status, const std::string& call) {
    if (status == CUBLAS_STATUS_SUCCESS) return true;
    std::string error = call + ": " + cublasGetStatusName(status) + ": " +
                        cublasGetStatusString(status);
    if (status == CUBLAS_STATUS_ARCH_MISMATCH) {
      error += "; bf16 GEMMs need compute capability 8.0 or newer";
    } else if (status == CUBLAS_STATUS_NOT_INITIALIZED) {
      error += "; cuBLAS could not start: often a driver older than the " +
               std::string("runtime (") + Versions() + ") or no free memory";
    }
    return Fail(error);
  }
  // "driver supports CUDA 12.4, probe built with CUDA runtime 13.0".
  std::string Versions() const {
    return "driver supports CUDA " + VersionText(driver_version_) +
           ", probe built with CUDA runtime " + VersionText(runtime_version_);
  }
  std::string Hint(cudaError_t rc) const;
  bool FreeBytes(uint64_t* free_bytes);

  bool Discover();
  bool CreateContext();
  bool MeasureIdle();
  bool CreateCublas();
  bool MeasureCopies();
  bool MeasureGemm();
  // Issues `op` in batches on stream_ until `seconds` of wall time passed or
  // the batch bound is reached; with `meter`, measures the window's energy.
  bool TimedLoop(double seconds, const std::function<bool()>& op,
                 EnergyMeter* meter, int64_t* count, double* gpu_seconds,
                 EnergyWindow* energy);

  const ProbeOptions& options_;
  const std::function<void(const std::string&)>& on_stage_;
  ProbeReport* report_;
  ProbeFailure* failure_;
  std::string stage_ = "start";
  int driver_version_ = 0;
  int runtime_version_ = 0;
  std::unique_ptr<gpu::Nvml> nvml_;
  Stream stream_{cudaStreamDestroy};
  CublasHandle cublas_{cublasDestroy};
};

std::string ProbeRun::Hint(cudaError_t rc) const {
  switch (rc) {
    case cudaErrorInsufficientDriver:
      return Versions() +
             ": install a driver for this CUDA version or newer (CUDA 13 "
             "needs driver 580 or newer), or build the probe with an older "
             "toolkit";
    case cudaErrorNoDevice:
      return "CUDA sees no GPU (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    case cudaErrorStubLibrary:
      return "the toolkit's stub libcuda.so was loaded: no NVIDIA driver is "
             "installed, or LD_LIBRARY_PATH points at a stubs/ folder";
    case cudaErrorNoKernelImageForDevice:
      return "this probe was built for architectures " +
             report_->built_for_architectures + " and the device is " +
             std::to_string(report_->cc_major) + "." +
             std::to_string(report_->cc_minor) +
             ": rebuild with -DCMAKE_CUDA_ARCHITECTURES=" +
             std::to_string(report_->cc_major * 10 + report_->cc_minor);
    case cudaErrorUnsupportedPtxVersion:
      return "the probe's PTX is newer than the driver can compile (" +
             Versions() + ")";
    case cudaErrorSystemDriverMismatch:
      return "the kernel module and the user-space driver differ in version "
             "(reload the module or reboot)";
    case cudaErrorSystemNotReady:
      return "the driver is not ready (on NVSwitch systems, is "
             "nvidia-fabricmanager running?)";
    case cudaErrorCompatNotSupportedOnDevice:
      return "a forward-compatibility libcuda (cuda-compat) is loaded on a "
             "device that does not support it; remove it from "
             "LD_LIBRARY_PATH";
    case cudaErrorDevicesUnavailable:
      return "the device is busy or prohibited (compute mode; see "
             "nvidia-smi -q -d COMPUTE)";
    case cudaErrorMemoryAllocation:
      return "out of memory: other processes may hold it (nvidia-smi); try "
             "smaller --bytes or --gemm-n";
    default:
      return "";
  }
}

bool ProbeRun::FreeBytes(uint64_t* free_bytes) {
  size_t free = 0;
  size_t total = 0;
  if (!Ok(cudaMemGetInfo(&free, &total), "cudaMemGetInfo")) return false;
  *free_bytes = free;
  return true;
}

bool ProbeRun::Discover() {
  Stage("cuda_runtime");
  // Both work without a driver: the driver version is then 0.
  cudaDriverGetVersion(&driver_version_);
  cudaRuntimeGetVersion(&runtime_version_);
  report_->cuda_driver_version = VersionText(driver_version_);
  report_->cuda_runtime_version = VersionText(runtime_version_);
  report_->built_for_architectures = HEADROOM_CUDA_ARCHITECTURES;
  int count = 0;
  const cudaError_t rc = cudaGetDeviceCount(&count);
  if (rc == cudaErrorInsufficientDriver && driver_version_ == 0) {
    // What the runtime answers when it finds no libcuda.so.1 at all.
    return Fail(
        "cudaGetDeviceCount: no CUDA driver found (cudaDriverGetVersion "
        "reports none): install the NVIDIA driver, or put the directory of "
        "libcuda.so.1 on the loader's path");
  }
  if (!Ok(rc, "cudaGetDeviceCount")) return false;
  if (count <= 0) {
    return Fail(
        "CUDA sees no device (check CUDA_VISIBLE_DEVICES and "
        "nvidia-smi)");
  }
  if (options_.device >= count) {
    return Fail("--device " + std::to_string(options_.device) + " but CUDA " +
                "sees " + std::to_string(count) + " device(s): use 0.." +
                std::to_string(count - 1));
  }

  Stage("device_properties");
  cudaDeviceProp prop = {};
  if (!Ok(cudaGetDeviceProperties(&prop, options_.device),
          "cudaGetDeviceProperties(" + std::to_string(options_.device) + ")")) {
    return false;
  }
  report_->device_index = options_.device;
  report_->name = prop.name;
  report_->uuid = gpu::FormatGpuUuid(
      reinterpret_cast<const unsigned char*>(prop.uuid.bytes));
  report_->total_memory_bytes = prop.totalGlobalMem;
  report_->cc_major = prop.major;
  report_->cc_minor = prop.minor;
  if (prop.major < 8) {
    return Fail("device " + std::to_string(options_.device) + " (" +
                report_->name + ") has compute capability " +
                std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                "; the bf16 GEMM probe needs 8.0 or newer");
  }

  Stage("nvml");
  std::string why;
  nvml_ = gpu::Nvml::Load(gpu::Nvml::DefaultLibrary(), &why);
  if (nvml_ == nullptr) {
    report_->nvml_note = why;
    report_->notes.push_back(why +
                             ": no context overhead before/after, "
                             "power or energy figures");
    return true;
  }
  unsigned index = 0;
  if (!nvml_->IndexOfUuid(report_->uuid, &index, &why)) {
    // A MIG instance, or a UUID NVML does not know: keep NVML out rather
    // than measure another device.
    report_->nvml_note = why;
    report_->notes.push_back("NVML cannot find this device (" + why +
                             "): no power or energy figures");
    nvml_.reset();
    return true;
  }
  report_->nvml_available = true;
  report_->nvml_index = static_cast<int>(index);
  report_->driver_version = nvml_->DriverVersion(&why);
  if (report_->driver_version.empty()) report_->notes.push_back(why);
  return true;
}

bool ProbeRun::CreateContext() {
  Stage("context");
  uint64_t used_before = 0;
  const bool have_before =
      nvml_ != nullptr &&
      nvml_->MemoryUsedBytes(report_->nvml_index, &used_before, nullptr);
  if (!Ok(cudaSetDevice(options_.device), "cudaSetDevice")) return false;
  if (!Ok(cudaFree(nullptr), "cudaFree(nullptr) (creating the context)")) {
    return false;
  }
  uint64_t used_after = 0;
  if (have_before &&
      nvml_->MemoryUsedBytes(report_->nvml_index, &used_after, nullptr)) {
    report_->context_overhead_bytes =
        static_cast<int64_t>(used_after) - static_cast<int64_t>(used_before);
    report_->context_overhead_method = "nvml_used_delta";
    if (*report_->context_overhead_bytes <= 0) {
      report_->notes.push_back(
          "context overhead measured <= 0: another process freed memory "
          "meanwhile, or the context already existed");
    }
  } else {
    size_t free = 0;
    size_t total = 0;
    if (!Ok(cudaMemGetInfo(&free, &total), "cudaMemGetInfo")) return false;
    report_->context_overhead_bytes = static_cast<int64_t>(total - free);
    report_->context_overhead_method = "cuda_mem_get_info_used";
    report_->notes.push_back(
        "context overhead is cudaMemGetInfo's used memory after the context "
        "was created: an upper bound that includes other processes and the "
        "driver's reserve");
  }
  return Ok(cudaStreamCreateWithFlags(stream_.out(), cudaStreamNonBlocking),
            "cudaStreamCreateWithFlags");
}

bool ProbeRun::MeasureIdle() {
  Stage("idle");
  EnergyMeter meter(nvml_.get(), report_->nvml_index);
  meter.Begin();
  std::this_thread::sleep_for(std::chrono::duration<double>(
      std::min(kMaxIdleSeconds, options_.seconds)));
  report_->idle = meter.End();
  const std::string note = meter.CounterNote();
  if (!note.empty()) {
    report_->notes.push_back(note +
                             ": energy is mean sampled power times time");
  }
  return true;
}

bool ProbeRun::CreateCublas() {
  Stage("cublas_create");
  uint64_t free_before = 0;
  uint64_t free_after = 0;
  if (!FreeBytes(&free_before)) return false;
  if (!Ok(cublasCreate(cublas_.out()), "cublasCreate")) return false;
  if (!Ok(cublasSetStream(cublas_.get(), stream_.get()), "cublasSetStream")) {
    return false;
  }
  if (!FreeBytes(&free_after)) return false;
  report_->cublas_create_bytes =
      static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  int version = 0;
  if (cublasGetVersion(cublas_.get(), &version) == CUBLAS_STATUS_SUCCESS) {
    report_->cublas_version = std::to_string(version / 10000) + "." +
                              std::to_string((version % 10000) / 100) + "." +
                              std::to_string(version % 100);
  }
  return true;
}

bool ProbeRun::TimedLoop(double seconds, const std::function<bool()>& op,
                         EnergyMeter* meter, int64_t* count,
                         double* gpu_seconds, EnergyWindow* energy) {
  Event start(cudaEventDestroy);
  Event stop(cudaEventDestroy);
  if (!Ok(cudaEventCreate(start.out()), "cudaEventCreate") ||
      !Ok(cudaEventCreate(stop.out()), "cudaEventCreate")) {
    return false;
  }
  // One timed operation sizes the batches.
  float ms = 0;
  if (!Ok(cudaEventRecord(start.get(), stream_.get()), "cudaEventRecord") ||
      !op() ||
      !Ok(cudaEventRecord(stop.get(), stream_.get()), "cudaEventRecord") ||
      !Ok(cudaEventSynchronize(stop.get()), "cudaEventSynchronize") ||
      !Ok(cudaEventElapsedTime(&ms, start.get(), stop.get()),
          "cudaEventElapsedTime")) {
    return false;
  }
  const double target = std::min(kBatchTargetSeconds, seconds / 4);
  const int64_t batch = std::clamp<int64_t>(
      static_cast<int64_t>(target / std::max(ms / 1e3, 1e-6)), 1,
      kMaxBatchSize);

  *count = 0;
  *gpu_seconds = 0;
  if (meter != nullptr) meter->Begin();
  const Clock::time_point wall_start = Clock::now();
  for (int64_t b = 0; b < kMaxBatches; ++b) {
    if (!Ok(cudaEventRecord(start.get(), stream_.get()), "cudaEventRecord")) {
      return false;
    }
    for (int64_t i = 0; i < batch; ++i) {
      if (!op()) return false;
    }
    if (!Ok(cudaEventRecord(stop.get(), stream_.get()), "cudaEventRecord") ||
        !Ok(cudaEventSynchronize(stop.get()), "cudaEventSynchronize") ||
        !Ok(cudaEventElapsedTime(&ms, start.get(), stop.get()),
            "cudaEventElapsedTime")) {
      return false;
    }
    *count += batch;
    *gpu_seconds += ms / 1e3;
    if (SecondsSince(wall_start) >= seconds) break;
  }
  if (meter != nullptr) *energy = meter->End();
  return true;
}

bool ProbeRun::MeasureCopies() {
  Stage("copy_alloc");
  const uint64_t bytes = options_.copy_bytes;
  uint64_t free_bytes = 0;
  if (!FreeBytes(&free_bytes)) return false;
  if (free_bytes < 2 * bytes + kMemorySlackBytes) {
    return Fail("--bytes " + std::to_string(bytes) +
                " needs two device buffers of that size plus " +
                std::to_string(kMemorySlackBytes) + " spare bytes, but only " +
                std::to_string(free_bytes) + " bytes are free");
  }
  HostBuffer host(cudaFreeHost);
  DeviceBuffer a(cudaFree);
  DeviceBuffer b(cudaFree);
  if (!Ok(cudaMallocHost(host.out(), bytes),
          "cudaMallocHost(" + std::to_string(bytes) + ")") ||
      !Ok(cudaMalloc(a.out(), bytes), "cudaMalloc") ||
      !Ok(cudaMalloc(b.out(), bytes), "cudaMalloc") ||
      !Ok(cudaMemsetAsync(a.get(), 1, bytes, stream_.get()),
          "cudaMemsetAsync") ||
      !Ok(cudaMemsetAsync(b.get(), 2, bytes, stream_.get()),
          "cudaMemsetAsync") ||
      !Ok(cudaMemcpyAsync(host.get(), a.get(), bytes, cudaMemcpyDeviceToHost,
                          stream_.get()),
          "cudaMemcpyAsync (touching the pinned buffer)") ||
      !Ok(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize")) {
    return false;
  }

  struct Direction {
    const char* stage;
    void* dst;
    const void* src;
    cudaMemcpyKind kind;
    CopyMeasurement* result;
  };
  const Direction directions[] = {
      {"copy_h2d", a.get(), host.get(), cudaMemcpyHostToDevice, &report_->h2d},
      {"copy_d2h", host.get(), a.get(), cudaMemcpyDeviceToHost, &report_->d2h},
      {"copy_d2d", b.get(), a.get(), cudaMemcpyDeviceToDevice, &report_->d2d},
  };
  for (const Direction& direction : directions) {
    Stage(direction.stage);
    const std::string call =
        std::string("cudaMemcpyAsync (") + direction.stage + ")";
    auto copy = [&] {
      return Ok(cudaMemcpyAsync(direction.dst, direction.src, bytes,
                                direction.kind, stream_.get()),
                call);
    };
    EnergyMeter meter(nvml_.get(), report_->nvml_index);
    CopyMeasurement* result = direction.result;
    result->bytes_per_copy = bytes;
    if (!TimedLoop(options_.seconds, copy, &meter, &result->copies,
                   &result->gpu_seconds, &result->energy)) {
      return false;
    }
    if (result->gpu_seconds > 0) {
      result->gb_per_s = static_cast<double>(bytes) *
                         static_cast<double>(result->copies) /
                         result->gpu_seconds / 1e9;
    }
  }
  return true;
}

bool ProbeRun::MeasureGemm() {
  Stage("gemm_alloc");
  const int n = options_.gemm_n;
  const size_t elements = static_cast<size_t>(n) * n;
  const uint64_t matrix_bytes = elements * sizeof(__nv_bfloat16);
  uint64_t free_bytes = 0;
  if (!FreeBytes(&free_bytes)) return false;
  if (free_bytes < 3 * matrix_bytes + kMemorySlackBytes) {
    return Fail("--gemm-n " + std::to_string(n) + " needs 3 matrices of " +
                std::to_string(matrix_bytes) + " bytes plus " +
                std::to_string(kMemorySlackBytes) + " spare bytes, but only " +
                std::to_string(free_bytes) + " bytes are free");
  }
  DeviceBuffer a(cudaFree);
  DeviceBuffer b(cudaFree);
  DeviceBuffer c(cudaFree);
  if (!Ok(cudaMalloc(a.out(), matrix_bytes), "cudaMalloc") ||
      !Ok(cudaMalloc(b.out(), matrix_bytes), "cudaMalloc") ||
      !Ok(cudaMalloc(c.out(), matrix_bytes), "cudaMalloc") ||
      !Ok(cudaMemsetAsync(c.get(), 0, matrix_bytes, stream_.get()),
          "cudaMemsetAsync")) {
    return false;
  }
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(
      std::min<size_t>((elements + kThreads - 1) / kThreads, 4096));
  FillUniformBf16<<<blocks, kThreads, 0, stream_.get()>>>(
      static_cast<__nv_bfloat16*>(a.get()), elements, 0x1234u);
  if (!Ok(cudaGetLastError(), "FillUniformBf16 launch")) return false;
  FillUniformBf16<<<blocks, kThreads, 0, stream_.get()>>>(
      static_cast<__nv_bfloat16*>(b.get()), elements, 0x9876u);
  if (!Ok(cudaGetLastError(), "FillUniformBf16 launch") ||
      !Ok(cudaStreamSynchronize(stream_.get()),
          "cudaStreamSynchronize (filling the matrices)")) {
    return false;
  }

  const float alpha = 1.0f;
  const float beta = 0.0f;
  const std::string call = "cublasGemmEx(bf16, n=" + std::to_string(n) + ")";
  auto gemm = [&] {
    return Ok(cublasGemmEx(cublas_.get(), CUBLAS_OP_N, CUBLAS_OP_N, n, n, n,
                           &alpha, a.get(), CUDA_R_16BF, n, b.get(),
                           CUDA_R_16BF, n, &beta, c.get(), CUDA_R_16BF, n,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              call);
  };

  Stage("gemm_first");
  uint64_t free_before = 0;
  uint64_t free_after = 0;
  if (!FreeBytes(&free_before) || !gemm() ||
      !Ok(cudaStreamSynchronize(stream_.get()),
          "cudaStreamSynchronize (first GEMM)") ||
      !FreeBytes(&free_after)) {
    return false;
  }
  report_->cublas_first_gemm_bytes =
      static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);

  Stage("gemm_warmup");
  int64_t warmup_count = 0;
  double warmup_seconds = 0;
  if (!TimedLoop(std::min(kMaxWarmupSeconds, options_.seconds), gemm, nullptr,
                 &warmup_count, &warmup_seconds, nullptr)) {
    return false;
  }

  Stage("gemm");
  GemmMeasurement& result = report_->gemm;
  result.n = n;
  EnergyMeter meter(nvml_.get(), report_->nvml_index);
  if (!TimedLoop(options_.seconds, gemm, &meter, &result.iterations,
                 &result.gpu_seconds, &result.energy)) {
    return false;
  }
  const double tflop_per_gemm = 2.0 * n * static_cast<double>(n) * n / 1e12;
  result.tflop = tflop_per_gemm * static_cast<double>(result.iterations);
  if (result.gpu_seconds > 0) {
    result.tflop_per_s = result.tflop / result.gpu_seconds;
  }
  return true;
}

bool ProbeRun::Run() {
  const Clock::time_point start = Clock::now();
  report_->options = options_;
  if (!Discover() || !CreateContext() || !MeasureIdle() || !CreateCublas() ||
      !MeasureCopies() || !MeasureGemm()) {
    return false;
  }
  Stage("finish");
  if (!Ok(cudaStreamSynchronize(stream_.get()), "cudaStreamSynchronize") ||
      !Ok(cudaGetLastError(), "cudaGetLastError")) {
    return false;
  }
  report_->elapsed_seconds = SecondsSince(start);
  return true;
}

}  // namespace

bool RunCudaProbes(const ProbeOptions& options,
                   const std::function<void(const std::string&)>& on_stage,
                   ProbeReport* report, ProbeFailure* failure) {
  ProbeRun run(options, on_stage, report, failure);
  return run.Run();
}

}  // namespace cuda
}  // namespace headroom
