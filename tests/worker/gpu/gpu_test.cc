#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/gpu/cuda_driver.h"
#include "worker/gpu/nvml.h"
#include "worker/gpu/sampler.h"

namespace headroom {
namespace gpu {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// ---- NVML ----

TEST(NvmlTest, MissingLibraryIsNullWithTheReason) {
  std::string why;
  std::unique_ptr<Nvml> nvml =
      Nvml::Load("/nonexistent/libnvidia-ml.so.1", &why);
  EXPECT_EQ(nvml, nullptr);
  EXPECT_THAT(why, HasSubstr("NVML unavailable"));
  EXPECT_THAT(why, HasSubstr("/nonexistent/libnvidia-ml.so.1"));
}

TEST(NvmlTest, LibraryWithoutNvmlNamesTheMissingSymbols) {
  std::string why;
  EXPECT_EQ(Nvml::Load("libm.so.6", &why), nullptr);
  EXPECT_THAT(why, HasSubstr("libm.so.6 does not export nvmlInit_v2, "
                             "nvmlShutdown, nvmlDeviceGetCount_v2"));
}

TEST(NvmlTest, NullReasonIsAllowed) {
  EXPECT_EQ(Nvml::Load("/nonexistent/libnvidia-ml.so.1", nullptr), nullptr);
}

TEST(NvmlTest, SystemLibraryLoadsOrSaysWhyNot) {
  std::string why;
  std::unique_ptr<Nvml> nvml = Nvml::Load(Nvml::DefaultLibrary(), &why);
  if (nvml == nullptr) {
    // This machine: no driver. The reason names the library.
    EXPECT_THAT(why, HasSubstr("NVML unavailable"));
    EXPECT_THAT(why, HasSubstr("libnvidia-ml.so.1"));
    return;
  }
  // A GPU node: the counts and facts answer.
  unsigned count = 0;
  ASSERT_TRUE(nvml->DeviceCount(&count, &why)) << why;
  if (count == 0) return;
  NvmlDeviceFacts facts;
  ASSERT_TRUE(nvml->Describe(0, &facts, &why)) << why;
  EXPECT_GT(facts.memory_total_bytes, 0u);
  const CounterRead energy = nvml->TotalEnergyMj(0);
  if (energy.kind == CounterRead::Kind::kUnsupported) {
    EXPECT_EQ(energy.why, "energy unsupported");
  }
}

TEST(NvmlTest, CudaVersionString) {
  EXPECT_EQ(CudaVersionString(13000), "13.0");
  EXPECT_EQ(CudaVersionString(12040), "12.4");
  EXPECT_EQ(CudaVersionString(11080), "11.8");
}

// ---- CUDA driver and discovery ----

TEST(CudaDriverTest, MissingLibraryIsNullWithTheReason) {
  std::string why;
  EXPECT_EQ(CudaDriver::Load("/nonexistent/libcuda.so.1", &why), nullptr);
  EXPECT_THAT(why, HasSubstr("CUDA driver unavailable"));
  EXPECT_THAT(why, HasSubstr("/nonexistent/libcuda.so.1"));
}

TEST(CudaDriverTest, LibraryWithoutTheDriverApiNamesTheMissingSymbols) {
  std::string why;
  EXPECT_EQ(CudaDriver::Load("libm.so.6", &why), nullptr);
  EXPECT_THAT(why, HasSubstr("libm.so.6 does not export cuInit, "
                             "cuDriverGetVersion, cuDeviceGetCount"));
}

TEST(CudaDriverTest, ToolkitStubSaysNoDriverIsInstalled) {
  // The toolkit's link stub exports every symbol; cuInit answers
  // CUDA_ERROR_STUB_LIBRARY. Only where a toolkit is installed.
  const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (FILE* file = std::fopen(stub.c_str(), "r")) {
    std::fclose(file);
  } else {
    GTEST_SKIP() << "no CUDA toolkit stub at " << stub;
  }
  std::string why;
  EXPECT_EQ(CudaDriver::Load(stub, &why), nullptr);
  EXPECT_THAT(why, HasSubstr("cuInit(0) in " + stub));
  EXPECT_THAT(why, HasSubstr("CUDA_ERROR_STUB_LIBRARY"));
  EXPECT_THAT(why, HasSubstr("no NVIDIA driver is installed"));
}

TEST(DiscoverGpusTest, NoDriverGivesNoGpusAndTheReason) {
  std::string why;
  const std::vector<GpuInfo> gpus = DiscoverGpus(
      "/nonexistent/libcuda.so.1", "/nonexistent/libnvidia-ml.so.1", &why);
  EXPECT_TRUE(gpus.empty());
  EXPECT_THAT(why, HasSubstr("CUDA driver unavailable"));
}

TEST(DiscoverGpusTest, SystemDiscoveryFindsGpusOrSaysWhyNot) {
  std::string why;
  const std::vector<GpuInfo> gpus = DiscoverGpus(&why);
  if (gpus.empty()) {
    EXPECT_FALSE(why.empty());
    return;
  }
  for (const GpuInfo& gpu : gpus) {
    EXPECT_FALSE(gpu.name.empty());
    EXPECT_GT(gpu.total_memory_bytes, 0u);
    EXPECT_GE(gpu.cc_major, 3);
    EXPECT_FALSE(gpu.cuda_version.empty());
  }
}

TEST(DiscoverGpusTest, UuidIsFormattedAsNvidiaSmiPrintsIt) {
  const unsigned char bytes[16] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xab,
                                   0xcd, 0xef, 0x00, 0x11, 0x22, 0x33,
                                   0x44, 0x55, 0x66, 0xff};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-01234567-89ab-cdef-0011-2233445566ff");
}

// ---- Sampler ----

// Memory follows a fixed zig-zag, power and energy rise with each read; every
// `fail_every`-th read fails. Remembers what it returned.
class FakeSource : public SampleSource {
 public:
  explicit FakeSource(int fail_every = 0) : fail_every_(fail_every) {}

  bool Read(Sample* sample) override {
    std::lock_guard<std::mutex> lock(mu_);
    ++reads_;
    if (fail_every_ > 0 && reads_ % fail_every_ == 0) return false;
    sample->memory_used_bytes = 1000 + 100 * ((reads_ * 37) % 11);
    sample->power_mw = 50000 + 10 * reads_;
    sample->energy_mj = 1000000 + 7 * reads_;
    returned_.push_back(*sample);
    return true;
  }
  std::string LastError() const override { return "fake failure"; }

  int64_t reads() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reads_;
  }
  std::vector<Sample> returned() const {
    std::lock_guard<std::mutex> lock(mu_);
    return returned_;
  }

 private:
  const int fail_every_;
  mutable std::mutex mu_;
  int64_t reads_ = 0;
  std::vector<Sample> returned_;
};

// Waits up to 5 s for `done`; false if it never came.
template <typename Predicate>
bool WaitFor(Predicate done) {
  for (int i = 0; i < 5000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return done();
}

TEST(SamplerTest, SummarizesWhatTheSourceReturned) {
  FakeSource source;
  std::mutex mu;
  std::vector<Sample> seen;
  SamplerOptions options;
  options.period = std::chrono::milliseconds(5);
  options.on_sample = [&](const Sample& sample) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(sample);
  };
  Sampler sampler(&source, options);
  const Clock::time_point start = Clock::now();
  ASSERT_TRUE(sampler.Start());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  sampler.Stop();
  const double elapsed_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - start).count();

  const std::vector<Sample> returned = source.returned();
  const SamplerSummary summary = sampler.Summary();
  ASSERT_GE(summary.samples, 1);
  EXPECT_EQ(summary.samples, static_cast<int64_t>(returned.size()));
  // One read per period at most, plus the first and the final one.
  EXPECT_LE(summary.samples, static_cast<int64_t>(elapsed_ms / 5) + 2);
  EXPECT_EQ(summary.failed_reads, 0);
  EXPECT_FALSE(summary.hit_read_limit);

  uint64_t peak = 0;
  uint64_t peak_power = 0;
  double power_sum = 0;
  for (const Sample& sample : returned) {
    peak = std::max(peak, sample.memory_used_bytes);
    peak_power = std::max(peak_power, *sample.power_mw);
    power_sum += static_cast<double>(*sample.power_mw);
  }
  EXPECT_EQ(summary.baseline_memory_used_bytes,
            returned.front().memory_used_bytes);
  EXPECT_EQ(summary.peak_memory_used_bytes, peak);
  EXPECT_EQ(summary.PeakOverBaselineBytes(),
            peak - returned.front().memory_used_bytes);
  ASSERT_TRUE(summary.energy_delta_mj.has_value());
  EXPECT_EQ(*summary.energy_delta_mj,
            *returned.back().energy_mj - *returned.front().energy_mj);
  ASSERT_TRUE(summary.peak_power_mw.has_value());
  EXPECT_EQ(*summary.peak_power_mw, peak_power);
  ASSERT_TRUE(summary.mean_power_mw.has_value());
  EXPECT_DOUBLE_EQ(*summary.mean_power_mw,
                   power_sum / static_cast<double>(returned.size()));

  // Every sample reached the callback, in order, with its time set.
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(seen.size(), returned.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].memory_used_bytes, returned[i].memory_used_bytes);
    if (i > 0) {
      EXPECT_GE(seen[i].t_ms, seen[i - 1].t_ms);
    }
  }
  EXPECT_EQ(summary.last_t_ms, seen.back().t_ms);
  EXPECT_LE(summary.last_t_ms, static_cast<int64_t>(elapsed_ms) + 1);
}

TEST(SamplerTest, StopWakesALongPeriodPromptly) {
  FakeSource source;
  SamplerOptions options;
  options.period = std::chrono::seconds(60);
  Sampler sampler(&source, options);
  ASSERT_TRUE(sampler.Start());
  ASSERT_TRUE(WaitFor([&] { return source.reads() >= 1; }));
  const Clock::time_point stop_start = Clock::now();
  sampler.Stop();
  EXPECT_LT(Clock::now() - stop_start, std::chrono::seconds(5));
  // The first read at Start and the final one at Stop.
  EXPECT_EQ(sampler.Summary().samples, 2);
}

TEST(SamplerTest, StopIsIdempotentAndASamplerRunsOnce) {
  FakeSource source;
  Sampler sampler(&source, SamplerOptions());
  sampler.Stop();  // before Start: a no-op that also forbids starting
  EXPECT_FALSE(sampler.Start());
  EXPECT_EQ(source.reads(), 0);

  Sampler running(&source, SamplerOptions());
  ASSERT_TRUE(running.Start());
  EXPECT_FALSE(running.Start());
  running.Stop();
  running.Stop();
  EXPECT_FALSE(running.Start());
  EXPECT_GE(running.Summary().samples, 1);
}

TEST(SamplerTest, DestructorStopsARunningSampler) {
  FakeSource source;
  {
    SamplerOptions options;
    options.period = std::chrono::seconds(60);
    Sampler sampler(&source, options);
    ASSERT_TRUE(sampler.Start());
  }
  EXPECT_GE(source.reads(), 1);
  EXPECT_LE(source.reads(), 2);
}

TEST(SamplerTest, RingKeepsTheNewestSamples) {
  FakeSource source;
  SamplerOptions options;
  options.period = std::chrono::milliseconds(1);
  options.ring_capacity = 4;
  Sampler sampler(&source, options);
  ASSERT_TRUE(sampler.Start());
  ASSERT_TRUE(WaitFor([&] { return source.reads() >= 10; }));
  sampler.Stop();
  const std::vector<Sample> returned = source.returned();
  const std::vector<Sample> recent = sampler.Recent();
  ASSERT_EQ(recent.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const Sample& expected = returned[returned.size() - 4 + i];
    EXPECT_EQ(recent[i].energy_mj, expected.energy_mj);
  }
}

TEST(SamplerTest, FailedReadsAreCountedWithTheReason) {
  FakeSource source(/*fail_every=*/2);
  SamplerOptions options;
  options.period = std::chrono::milliseconds(1);
  Sampler sampler(&source, options);
  ASSERT_TRUE(sampler.Start());
  ASSERT_TRUE(WaitFor([&] { return source.reads() >= 6; }));
  sampler.Stop();
  const SamplerSummary summary = sampler.Summary();
  EXPECT_EQ(summary.samples + summary.failed_reads, source.reads());
  EXPECT_GE(summary.failed_reads, 3);
  EXPECT_EQ(summary.last_error, "fake failure");
}

TEST(SamplerTest, ReadLimitStopsTheThread) {
  FakeSource source;
  SamplerOptions options;
  options.period = std::chrono::milliseconds(1);
  options.max_reads = 3;
  Sampler sampler(&source, options);
  ASSERT_TRUE(sampler.Start());
  ASSERT_TRUE(WaitFor([&] { return sampler.Summary().hit_read_limit; }));
  sampler.Stop();
  EXPECT_EQ(sampler.Summary().samples, 3);
  EXPECT_EQ(source.reads(), 3);
}

TEST(SamplerTest, CallbackMayStopTheSampler) {
  FakeSource source;
  SamplerOptions options;
  options.period = std::chrono::seconds(60);
  Sampler* self = nullptr;
  options.on_sample = [&self](const Sample&) { self->Stop(); };
  Sampler sampler(&source, options);
  self = &sampler;
  ASSERT_TRUE(sampler.Start());
  ASSERT_TRUE(WaitFor([&] { return source.reads() >= 2; }));
  sampler.Stop();
  EXPECT_EQ(sampler.Summary().samples, 2);
}

}  // namespace
}  // namespace gpu
}  // namespace headroom
