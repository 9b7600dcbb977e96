#include "worker/cuda/probe_report.h"

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/cuda/json_writer.h"

namespace headroom {
namespace cuda {
namespace {

using ::testing::HasSubstr;

FlagsOutcome Parse(std::vector<const char*> args, ProbeOptions* options,
                   std::string* error) {
  args.insert(args.begin(), "headroom-cuda-probe");
  return ParseProbeFlags(static_cast<int>(args.size()), args.data(), options,
                         error);
}

TEST(ProbeFlagsTest, DefaultsWithoutFlags) {
  ProbeOptions options;
  std::string error;
  ASSERT_EQ(Parse({}, &options, &error), FlagsOutcome::kRun);
  EXPECT_EQ(options.device, 0);
  EXPECT_EQ(options.seconds, 2.0);
  EXPECT_EQ(options.gemm_n, 8192);
  EXPECT_EQ(options.copy_bytes, uint64_t{512} << 20);
}

TEST(ProbeFlagsTest, EveryFlagInBothForms) {
  ProbeOptions options;
  std::string error;
  ASSERT_EQ(Parse({"--device", "3", "--seconds=0.5", "--gemm-n", "4096",
                   "--bytes=1G"},
                  &options, &error),
            FlagsOutcome::kRun)
      << error;
  EXPECT_EQ(options.device, 3);
  EXPECT_EQ(options.seconds, 0.5);
  EXPECT_EQ(options.gemm_n, 4096);
  EXPECT_EQ(options.copy_bytes, uint64_t{1} << 30);
  ASSERT_EQ(Parse({"--bytes", "1048576"}, &options, &error),
            FlagsOutcome::kRun);
  EXPECT_EQ(options.copy_bytes, uint64_t{1} << 20);
}

TEST(ProbeFlagsTest, OutOfRangeValuesNameTheFlagAndTheRange) {
  ProbeOptions options;
  std::string error;
  EXPECT_EQ(Parse({"--seconds", "31"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(error, "--seconds must be in (0, 30], got \"31\"");
  EXPECT_EQ(Parse({"--seconds", "0"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(Parse({"--seconds", "nan"}, &options, &error),
            FlagsOutcome::kError);
  EXPECT_EQ(Parse({"--gemm-n", "100"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(error, "--gemm-n must be an integer in [256, 32768], got \"100\"");
  EXPECT_EQ(Parse({"--bytes", "512K"}, &options, &error), FlagsOutcome::kError);
  EXPECT_THAT(error, HasSubstr("--bytes must be a byte count in [1M, 16G]"));
  EXPECT_EQ(Parse({"--bytes", "17G"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(Parse({"--device", "-1"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(Parse({"--device", "1.5"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(Parse({"--device"}, &options, &error), FlagsOutcome::kError);
  EXPECT_EQ(error, "--device needs a value");
  EXPECT_EQ(Parse({"--iterations", "5"}, &options, &error),
            FlagsOutcome::kError);
  EXPECT_THAT(error, HasSubstr("unknown flag --iterations"));
  EXPECT_EQ(Parse({"--help"}, &options, &error), FlagsOutcome::kHelp);
}

TEST(ProbeFlagsTest, DeadlineCoversSetupAndEveryWindow) {
  ProbeOptions options;
  EXPECT_EQ(ProbeDeadline(options), std::chrono::milliseconds(140000));
  options.seconds = 30;
  EXPECT_EQ(ProbeDeadline(options), std::chrono::milliseconds(420000));
}

TEST(JsonWriterTest, EscapesAndNonFiniteNumbers) {
  EXPECT_EQ(JsonQuote("a\"b\\c\nd\x01"), "\"a\\\"b\\\\c\\nd\\u0001\"");
  JsonWriter json;
  json.BeginObject();
  json.Key("nan").Double(std::nan(""));
  json.Key("empty").BeginArray().EndArray();
  json.Key("x").Double(0.125);
  json.EndObject();
  const nlohmann::json parsed = nlohmann::json::parse(json.Finish());
  EXPECT_TRUE(parsed["nan"].is_null());
  EXPECT_TRUE(parsed["empty"].empty());
  EXPECT_EQ(parsed["x"].get<double>(), 0.125);
}

ProbeReport H200Like() {
  ProbeReport report;
  report.name = "NVIDIA H200";
  report.uuid = "GPU-01234567-89ab-cdef-0011-2233445566ff";
  report.total_memory_bytes = 150754820096;
  report.cc_major = 9;
  report.cc_minor = 0;
  report.nvml_available = true;
  report.nvml_index = 0;
  report.context_overhead_bytes = 536870912;
  report.context_overhead_method = "nvml_used_delta";
  report.idle.energy_method = "nvml_energy_counter";
  report.idle.wall_seconds = 1;
  report.idle.energy_j = 100;
  report.idle.avg_power_w = 100;
  report.d2d.bytes_per_copy = uint64_t{1} << 30;
  report.d2d.copies = 1000;  // 1073.741824 GB
  report.d2d.gpu_seconds = 0.5;
  report.d2d.gb_per_s = 2147.483648;
  report.d2d.energy.energy_method = "nvml_energy_counter";
  report.d2d.energy.wall_seconds = 2;
  report.d2d.energy.energy_j = 1073.741824;  // 1 J per GB
  report.gemm.n = 8192;
  report.gemm.iterations = 1000;
  report.gemm.tflop = 1099.511627776;
  report.gemm.gpu_seconds = 2;
  report.gemm.tflop_per_s = 549.755813888;
  report.gemm.energy.energy_method = "nvml_energy_counter";
  report.gemm.energy.wall_seconds = 2;
  report.gemm.energy.energy_j = 1099.511627776;  // 1 J per TFLOP
  report.gemm.energy.avg_power_w = 549.755813888;
  report.notes.push_back("a \"quoted\" note");
  return report;
}

TEST(ProbeReportTest, EnergyPerUnitWithAndWithoutIdle) {
  const ProbeReport report = H200Like();
  EXPECT_DOUBLE_EQ(*D2dJoulesPerGb(report), 1.0);
  // Less 100 W of idle over the 2 s window: 200 J.
  EXPECT_DOUBLE_EQ(*D2dJoulesPerGbAboveIdle(report),
                   (1073.741824 - 200) / 1073.741824);
  EXPECT_DOUBLE_EQ(*GemmJoulesPerTflop(report), 1.0);
  EXPECT_DOUBLE_EQ(*GemmJoulesPerTflopAboveIdle(report),
                   (1099.511627776 - 200) / 1099.511627776);

  ProbeReport no_nvml = H200Like();
  no_nvml.gemm.energy = EnergyWindow();
  no_nvml.idle = EnergyWindow();
  EXPECT_FALSE(GemmJoulesPerTflop(no_nvml).has_value());
  EXPECT_FALSE(GemmJoulesPerTflopAboveIdle(no_nvml).has_value());
}

TEST(ProbeReportTest, JsonCarriesTheFiguresAndParses) {
  const nlohmann::json json =
      nlohmann::json::parse(ProbeReportJson(H200Like()));
  EXPECT_EQ(json["probe"], "headroom-cuda-probe");
  EXPECT_EQ(json["device"]["name"], "NVIDIA H200");
  EXPECT_EQ(json["device"]["compute_capability"], "9.0");
  EXPECT_EQ(json["device"]["total_memory_bytes"], 150754820096);
  EXPECT_EQ(json["context_overhead_bytes"], 536870912);
  EXPECT_EQ(json["energy_method"], "nvml_energy_counter");
  EXPECT_EQ(json["copy"]["d2d"]["j_per_gb"], 1.0);
  EXPECT_NEAR(json["copy"]["d2d"]["gb_per_s"].get<double>(), 2147.48, 0.01);
  EXPECT_NEAR(json["copy"]["d2d"]["memory_traffic_gb_per_s"].get<double>(),
              4294.97, 0.01);
  EXPECT_EQ(json["gemm"]["j_per_tflop"], 1.0);
  EXPECT_NEAR(json["gemm"]["tflop_per_s"].get<double>(), 549.756, 0.001);
  EXPECT_EQ(json["gemm"]["dtype"], "bf16");
  EXPECT_TRUE(json["copy"]["h2d_pinned"]["energy_j"].is_null());
  EXPECT_EQ(json["notes"][0], "a \"quoted\" note");
}

TEST(ProbeReportTest, ErrorDocumentParses) {
  const nlohmann::json json = nlohmann::json::parse(
      ProbeErrorJson("context", "cudaSetDevice: \"bad\"\nthing"));
  EXPECT_EQ(json["error"], "cudaSetDevice: \"bad\"\nthing");
  EXPECT_EQ(json["stage"], "context");
  EXPECT_EQ(json["probe"], "headroom-cuda-probe");
}

}  // namespace
}  // namespace cuda
}  // namespace headroom
