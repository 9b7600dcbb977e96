#include "worker/cuda/probe_report.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "worker/cuda/json_writer.h"

namespace headroom {
namespace cuda {
namespace {

constexpr char kProbeName[] = "headroom-cuda-probe";
constexpr int kFormatVersion = 1;

bool ParseDouble(const std::string& text, double* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() &&
         std::isfinite(*value);
}

bool ParseInt(const std::string& text, long long* value) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *value = std::strtoll(text.c_str(), &end, 10);
  return errno == 0 && end == text.c_str() + text.size();
}

// A byte count: digits with an optional K, M or G (binary multiples).
bool ParseBytes(const std::string& text, uint64_t* value) {
  if (text.empty() || text[0] == '-') return false;
  std::string digits = text;
  uint64_t unit = 1;
  switch (digits.back()) {
    case 'K':
    case 'k':
      unit = uint64_t{1} << 10;
      break;
    case 'M':
    case 'm':
      unit = uint64_t{1} << 20;
      break;
    case 'G':
    case 'g':
      unit = uint64_t{1} << 30;
      break;
    default:
      break;
  }
  if (unit != 1) digits.pop_back();
  if (digits.empty()) return false;
  errno = 0;
  char* end = nullptr;
  const unsigned long long count = std::strtoull(digits.c_str(), &end, 10);
  if (errno != 0 || end != digits.c_str() + digits.size()) return false;
  if (count > UINT64_MAX / unit) return false;
  *value = count * unit;
  return true;
}

void WriteEnergy(const EnergyWindow& energy, JsonWriter* json) {
  json->Key("wall_seconds").Double(energy.wall_seconds);
  json->Key("energy_method").String(energy.energy_method);
  json->Key("energy_j").OptionalDouble(energy.energy_j);
  json->Key("avg_power_w").OptionalDouble(energy.avg_power_w);
  json->Key("peak_power_w").OptionalDouble(energy.peak_power_w);
  json->Key("sampled_mean_power_w").OptionalDouble(energy.sampled_mean_power_w);
  json->Key("power_samples").Int(energy.power_samples);
}

void WriteCopy(const CopyMeasurement& copy, JsonWriter* json) {
  json->Key("gb_per_s").Double(copy.gb_per_s);
  json->Key("copies").Int(copy.copies);
  json->Key("gpu_seconds").Double(copy.gpu_seconds);
  WriteEnergy(copy.energy, json);
}

// Energy per unit of work (`units` of it), less the idle power over the
// same time when `idle_power_w` is given.
std::optional<double> PerUnit(const EnergyWindow& energy, double units,
                              const std::optional<double>& idle_power_w) {
  if (!energy.energy_j.has_value() || units <= 0) return std::nullopt;
  double joules = *energy.energy_j;
  if (idle_power_w.has_value()) {
    joules -= *idle_power_w * energy.wall_seconds;
  }
  return joules / units;
}

}  // namespace

std::chrono::milliseconds ProbeDeadline(const ProbeOptions& options) {
  return std::chrono::milliseconds(
      120000 + static_cast<int64_t>(10000 * options.seconds));
}

std::string ProbeUsage() {
  return "usage: headroom-cuda-probe [--device I] [--seconds S] "
         "[--gemm-n N] [--bytes B]\n"
         "Measures one GPU and prints one JSON document on stdout: context\n"
         "overhead, copy bandwidth (pinned host to device, device to host,\n"
         "device to device), a bf16 GEMM loop (TFLOP/s, power, energy), J\n"
         "per TFLOP and J per GB copied. Exit 0 on success; on failure a\n"
         "JSON {\"error\": ...} on stdout and exit 2.\n"
         "  --device I    CUDA ordinal (default 0)\n"
         "  --seconds S   time per measurement, 0 < S <= 30 (default 2)\n"
         "  --gemm-n N    GEMM size N x N x N, 256..32768 (default 8192)\n"
         "  --bytes B     bytes per copy, 1M..16G; K, M, G suffixes are\n"
         "                binary (default 512M)\n";
}

FlagsOutcome ParseProbeFlags(int argc, const char* const* argv,
                             ProbeOptions* options, std::string* error) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    bool has_value = false;
    const size_t equals = flag.find('=');
    if (flag.rfind("--", 0) == 0 && equals != std::string::npos) {
      value = flag.substr(equals + 1);
      flag = flag.substr(0, equals);
      has_value = true;
    }
    if (flag == "--help" || flag == "-h") return FlagsOutcome::kHelp;
    if (flag != "--device" && flag != "--seconds" && flag != "--gemm-n" &&
        flag != "--bytes") {
      *error = "unknown flag " + flag +
               "; expected --device, --seconds, --gemm-n, --bytes or --help";
      return FlagsOutcome::kError;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        *error = flag + " needs a value";
        return FlagsOutcome::kError;
      }
      value = argv[++i];
    }
    if (flag == "--device") {
      long long device = 0;
      if (!ParseInt(value, &device) || device < 0 || device > 1023) {
        *error =
            "--device must be a CUDA ordinal 0..1023, got \"" + value + "\"";
        return FlagsOutcome::kError;
      }
      options->device = static_cast<int>(device);
    } else if (flag == "--seconds") {
      double seconds = 0;
      if (!ParseDouble(value, &seconds) || seconds <= 0 ||
          seconds > kMaxSecondsPerMeasurement) {
        *error = "--seconds must be in (0, 30], got \"" + value + "\"";
        return FlagsOutcome::kError;
      }
      options->seconds = seconds;
    } else if (flag == "--gemm-n") {
      long long n = 0;
      if (!ParseInt(value, &n) || n < kMinGemmN || n > kMaxGemmN) {
        *error = "--gemm-n must be an integer in [256, 32768], got \"" + value +
                 "\"";
        return FlagsOutcome::kError;
      }
      options->gemm_n = static_cast<int>(n);
    } else {
      uint64_t bytes = 0;
      if (!ParseBytes(value, &bytes) || bytes < kMinCopyBytes ||
          bytes > kMaxCopyBytes) {
        *error =
            "--bytes must be a byte count in [1M, 16G] (K, M, G are "
            "binary), got \"" +
            value + "\"";
        return FlagsOutcome::kError;
      }
      options->copy_bytes = bytes;
    }
  }
  return FlagsOutcome::kRun;
}

std::optional<double> D2dJoulesPerGb(const ProbeReport& report) {
  return PerUnit(report.d2d.energy,
                 static_cast<double>(report.d2d.bytes_per_copy) *
                     static_cast<double>(report.d2d.copies) / 1e9,
                 std::nullopt);
}

std::optional<double> D2dJoulesPerGbAboveIdle(const ProbeReport& report) {
  if (!report.idle.avg_power_w.has_value()) return std::nullopt;
  return PerUnit(report.d2d.energy,
                 static_cast<double>(report.d2d.bytes_per_copy) *
                     static_cast<double>(report.d2d.copies) / 1e9,
                 report.idle.avg_power_w);
}

std::optional<double> GemmJoulesPerTflop(const ProbeReport& report) {
  return PerUnit(report.gemm.energy, report.gemm.tflop, std::nullopt);
}

std::optional<double> GemmJoulesPerTflopAboveIdle(const ProbeReport& report) {
  if (!report.idle.avg_power_w.has_value()) return std::nullopt;
  return PerUnit(report.gemm.energy, report.gemm.tflop,
                 report.idle.avg_power_w);
}

std::string ProbeReportJson(const ProbeReport& report) {
  JsonWriter json;
  json.BeginObject();
  json.Key("probe").String(kProbeName);
  json.Key("format_version").Int(kFormatVersion);
  json.Key("options").BeginObject();
  json.Key("device").Int(report.options.device);
  json.Key("seconds").Double(report.options.seconds);
  json.Key("gemm_n").Int(report.options.gemm_n);
  json.Key("bytes").Uint(report.options.copy_bytes);
  json.EndObject();

  json.Key("device").BeginObject();
  json.Key("index").Int(report.device_index);
  json.Key("nvml_index").Int(report.nvml_index);
  json.Key("name").String(report.name);
  json.Key("uuid").String(report.uuid);
  json.Key("total_memory_bytes").Uint(report.total_memory_bytes);
  json.Key("compute_capability")
      .String(std::to_string(report.cc_major) + "." +
              std::to_string(report.cc_minor));
  json.Key("driver_version").String(report.driver_version);
  json.Key("cuda_driver_version").String(report.cuda_driver_version);
  json.Key("cuda_runtime_version").String(report.cuda_runtime_version);
  json.Key("cublas_version").String(report.cublas_version);
  json.Key("built_for_architectures").String(report.built_for_architectures);
  json.EndObject();

  json.Key("nvml").BeginObject();
  json.Key("available").Bool(report.nvml_available);
  json.Key("note").String(report.nvml_note);
  json.EndObject();

  // The card's energy figures come from the GEMM window's method.
  json.Key("energy_method").String(report.gemm.energy.energy_method);

  json.Key("context_overhead_bytes").OptionalInt(report.context_overhead_bytes);
  json.Key("context_overhead_method").String(report.context_overhead_method);
  json.Key("cublas_create_bytes").OptionalInt(report.cublas_create_bytes);
  json.Key("cublas_first_gemm_bytes")
      .OptionalInt(report.cublas_first_gemm_bytes);

  json.Key("idle").BeginObject();
  WriteEnergy(report.idle, &json);
  json.EndObject();

  json.Key("copy").BeginObject();
  json.Key("bytes_per_copy").Uint(report.options.copy_bytes);
  json.Key("h2d_pinned").BeginObject();
  WriteCopy(report.h2d, &json);
  json.EndObject();
  json.Key("d2h_pinned").BeginObject();
  WriteCopy(report.d2h, &json);
  json.EndObject();
  json.Key("d2d").BeginObject();
  WriteCopy(report.d2d, &json);
  // A device-to-device copy reads and writes each byte: the memory traffic
  // is twice the bytes copied (what bandwidthTest reports).
  json.Key("memory_traffic_gb_per_s").Double(2 * report.d2d.gb_per_s);
  json.Key("j_per_gb").OptionalDouble(D2dJoulesPerGb(report));
  json.Key("j_per_gb_above_idle")
      .OptionalDouble(D2dJoulesPerGbAboveIdle(report));
  json.EndObject();
  json.EndObject();

  json.Key("gemm").BeginObject();
  json.Key("dtype").String("bf16");
  json.Key("accumulate").String("fp32");
  json.Key("n").Int(report.gemm.n);
  json.Key("iterations").Int(report.gemm.iterations);
  json.Key("gpu_seconds").Double(report.gemm.gpu_seconds);
  json.Key("tflop").Double(report.gemm.tflop);
  json.Key("tflop_per_s").Double(report.gemm.tflop_per_s);
  WriteEnergy(report.gemm.energy, &json);
  json.Key("j_per_tflop").OptionalDouble(GemmJoulesPerTflop(report));
  json.Key("j_per_tflop_above_idle")
      .OptionalDouble(GemmJoulesPerTflopAboveIdle(report));
  json.EndObject();

  json.Key("notes").BeginArray();
  for (const std::string& note : report.notes) json.String(note);
  json.EndArray();
  json.Key("elapsed_seconds").Double(report.elapsed_seconds);
  json.EndObject();
  return json.Finish();
}

std::string ProbeErrorJson(const std::string& stage, const std::string& error) {
  JsonWriter json;
  json.BeginObject();
  json.Key("error").String(error);
  json.Key("stage").String(stage);
  json.Key("probe").String(kProbeName);
  json.Key("format_version").Int(kFormatVersion);
  json.EndObject();
  return json.Finish();
}

}  // namespace cuda
}  // namespace headroom
