#include "worker/daemon/gpu_executors.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/core/common/json_io.h"
#include "worker/daemon/subprocess.h"
#include "worker/gpu/sampler.h"

namespace headroom::worker {
namespace {

// Samples one GPU while a child runs and forwards each reading to the sink.
class RunSampler {
 public:
  RunSampler(const GpuExecutorOptions& options, uint32_t cuda_index,
             const v1::BatchRun& run, ExecutionSink* sink) {
    if (options.nvml == nullptr) return;
    int nvml_index = -1;
    for (const gpu::GpuInfo& info : options.gpus) {
      if (info.index == static_cast<int>(cuda_index)) {
        nvml_index = info.nvml_index;
      }
    }
    if (nvml_index < 0) return;
    source_ = std::make_unique<gpu::NvmlSampleSource>(
        options.nvml.get(), static_cast<unsigned>(nvml_index));
    gpu::SamplerOptions sampler;
    sampler.period = std::chrono::milliseconds(options.sample_ms);
    sampler.on_sample = [sink, run](const gpu::Sample& sample) {
      GpuReading reading;
      reading.memory_used_bytes = sample.memory_used_bytes;
      if (sample.power_mw) reading.power_w = *sample.power_mw / 1000.0;
      if (sample.energy_mj) {
        reading.total_energy_mj = static_cast<double>(*sample.energy_mj);
      }
      sink->Sample(run, sample.t_ms, reading);
    };
    sampler_ = std::make_unique<gpu::Sampler>(source_.get(), sampler);
    sampler_->Start();
  }

  // Stops sampling; nullopt without NVML.
  std::optional<gpu::SamplerSummary> Finish() {
    if (sampler_ == nullptr) return std::nullopt;
    sampler_->Stop();
    return sampler_->Summary();
  }

 private:
  std::unique_ptr<gpu::NvmlSampleSource> source_;
  std::unique_ptr<gpu::Sampler> sampler_;
};

std::string TempPath(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("headroom-", stem, "-", getpid(), ".json"))
      .string();
}

bool Cancelled(const std::atomic<StopReason>& stop) {
  return stop.load() == StopReason::kCancelled;
}

}  // namespace

ExecutionOutcome TorchExecutor::Run(const v1::Assignment& assignment,
                                    ExecutionSink* sink,
                                    const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  const std::string spec_path = TempPath(assignment.assignment_id());
  {
    std::ofstream spec(spec_path);
    spec << ToJson(assignment.spec(), /*pretty=*/false);
    if (!spec) {
      outcome.error = absl::StrCat("cannot write ", spec_path);
      return outcome;
    }
  }
  const std::string setup = ToJson(assignment.setup(), /*pretty=*/false);
  for (const v1::BatchRun& run : assignment.runs()) {
    if (stop.load() != StopReason::kNone) {
      outcome.handed_back = stop.load() == StopReason::kShutdown;
      if (Cancelled(stop)) outcome.error = "cancelled";
      break;
    }
    // One process per run: a fresh CUDA context and allocator, so one
    // batch's peak (or OOM) cannot leak into the next.
    std::vector<std::string> argv = {
        options_.python,
        options_.harness,
        "run",
        "--spec",
        spec_path,
        "--batches",
        absl::StrCat(run.batch()),
        "--setup",
        setup,
        "--warmup",
        absl::StrCat(assignment.warmup_steps()),
        "--steps",
        absl::StrCat(assignment.steps()),
        "--device",
        absl::StrCat("cuda:", assignment.gpu_index())};
    if (run.mode() == "compiled") argv.push_back("--compile");
    RunSampler sampler(options_, assignment.gpu_index(), run, sink);
    nlohmann::json result_line;
    std::string harness_error;
    const ProcessResult process = RunProcess(
        argv,
        std::chrono::milliseconds(
            static_cast<int64_t>(assignment.batch_timeout_s() * 1000)),
        [&](const std::string& line) {
          nlohmann::json event =
              nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
          if (!event.is_object()) return;
          const std::string kind = event.value("event", "");
          if (kind == "result") result_line = std::move(event);
          if (kind == "error") harness_error = event.value("error", "");
        },
        [&] { return Cancelled(stop); });
    const std::optional<gpu::SamplerSummary> summary = sampler.Finish();
    if (Cancelled(stop)) {
      outcome.error = "cancelled";
      break;
    }
    v1::BatchResult result;
    result.set_batch(run.batch());
    result.set_repetition(run.repetition());
    result.set_mode(run.mode());
    if (summary.has_value()) {
      result.set_samples(static_cast<uint64_t>(summary->samples));
      result.set_device_peak_gb(summary->PeakOverBaselineBytes() / 1e9);
      if (summary->energy_delta_mj) {
        result.set_energy_j(*summary->energy_delta_mj / 1000.0);
      }
    }
    if (result_line.is_object()) {
      result.set_oom(result_line.value("oom", false));
      const auto number = [&](const char* key) -> std::optional<double> {
        auto it = result_line.find(key);
        if (it == result_line.end() || !it->is_number()) return std::nullopt;
        return it->get<double>();
      };
      if (!result.oom()) {
        if (auto v = number("peak_allocated_bytes")) {
          result.set_peak_allocated_gb(*v / 1e9);
        }
        if (auto v = number("peak_reserved_bytes")) {
          result.set_peak_reserved_gb(*v / 1e9);
        }
        if (auto v = number("step_seconds")) result.set_step_seconds(*v);
      }
      result.set_error(result_line.value("error", ""));
    } else if (process.timed_out) {
      result.set_error(
          absl::StrCat("timed out after ", assignment.batch_timeout_s(), " s"));
    } else {
      result.set_error(absl::StrCat(
          "harness exited with ", process.exit_code, " and no result",
          harness_error.empty() ? "" : ": " + harness_error,
          process.error.empty() ? "" : ": " + process.error, "; stderr: ",
          process.stderr_tail.substr(process.stderr_tail.size() > 600
                                         ? process.stderr_tail.size() - 600
                                         : 0)));
    }
    sink->BatchDone(run, std::move(result));
  }
  std::filesystem::remove(spec_path);
  return outcome;
}

ExecutionOutcome CudaExecutor::Run(const v1::Assignment& assignment,
                                   ExecutionSink* sink,
                                   const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  v1::BatchRun run;
  if (!assignment.runs().empty()) run = assignment.runs(0);
  RunSampler sampler(options_, assignment.gpu_index(), run, sink);
  std::string out;
  const ProcessResult process = RunProcess(
      {options_.cuda_probe, "--device", absl::StrCat(assignment.gpu_index())},
      std::chrono::milliseconds(
          static_cast<int64_t>(assignment.batch_timeout_s() * 1000)),
      [&](const std::string& line) {
        if (out.size() < (1 << 20)) out += line + "\n";
      },
      [&] { return Cancelled(stop); });
  sampler.Finish();
  outcome.details_json = out;
  if (Cancelled(stop)) {
    outcome.error = "cancelled";
  } else if (process.exit_code != 0) {
    const nlohmann::json doc =
        nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    outcome.error =
        doc.is_object() && doc.contains("error") && doc["error"].is_string()
            ? doc["error"].get<std::string>()
            : absl::StrCat("headroom-cuda-probe exited with ",
                           process.exit_code, ": ", process.error,
                           process.stderr_tail);
  }
  return outcome;
}

}  // namespace headroom::worker
