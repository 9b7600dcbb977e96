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

// One harness child with the GPU sampled beside it: the last JSON line
// whose "event" is `kind`, the harness's own "error" line, how the process
// ended, and the sampler's summary (nullopt without NVML).
struct HarnessRun {
  nlohmann::json line;
  std::string harness_error;
  ProcessResult process;
  std::optional<gpu::SamplerSummary> summary;
};

HarnessRun RunHarness(const GpuExecutorOptions& options,
                      const v1::Assignment& assignment, const v1::BatchRun& run,
                      const std::vector<std::string>& argv, const char* kind,
                      ExecutionSink* sink,
                      const std::atomic<StopReason>& stop) {
  HarnessRun out;
  RunSampler sampler(options, assignment.gpu_index(), run, sink);
  out.process = RunProcess(
      argv,
      std::chrono::milliseconds(
          static_cast<int64_t>(assignment.batch_timeout_s() * 1000)),
      [&](const std::string& text) {
        nlohmann::json event =
            nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (!event.is_object()) return;
        const std::string event_kind = event.value("event", "");
        if (event_kind == kind) out.line = std::move(event);
        if (event_kind == "error") out.harness_error = event.value("error", "");
      },
      [&] { return Cancelled(stop); });
  out.summary = sampler.Finish();
  return out;
}

// A number field of a harness line, nullopt when absent or not a number.
std::optional<double> JsonNumber(const nlohmann::json& line, const char* key) {
  auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

}  // namespace

ExecutionOutcome TorchExecutor::RunEnergy(const v1::Assignment& assignment,
                                          ExecutionSink* sink,
                                          const std::atomic<StopReason>& stop) {
  ExecutionOutcome outcome;
  const v1::EnergyProbePlan& plan = assignment.energy();
  const std::string config_path =
      TempPath(absl::StrCat(assignment.assignment_id(), "-hf"));
  if (!plan.hf_config().empty()) {
    std::ofstream config(config_path);
    config << plan.hf_config();
    if (!config) {
      outcome.error = absl::StrCat("cannot write ", config_path);
      return outcome;
    }
  }
  for (const v1::BatchRun& run : assignment.runs()) {
    if (stop.load() != StopReason::kNone) {
      outcome.handed_back = stop.load() == StopReason::kShutdown;
      if (Cancelled(stop)) outcome.error = "cancelled";
      break;
    }
    v1::BatchResult result;
    result.set_batch(run.batch());
    result.set_repetition(run.repetition());
    result.set_mode(run.mode());
    if (plan.hf_config().empty()) {
      result.set_error(
          "the torch harness generates from a Hugging Face config only: "
          "submit the energy probe with the model's config.json (hf_config), "
          "or run it on a sim worker");
      sink->BatchDone(run, std::move(result));
      continue;
    }
    // One process per quantization: a fresh CUDA context and allocator.
    const std::vector<std::string> argv = {
        options_.python,
        options_.harness,
        "generate",
        "--hf_config",
        config_path,
        "--quant",
        run.mode(),
        "--prompt_tokens",
        absl::StrCat(plan.prompt_tokens()),
        "--new_tokens",
        absl::StrCat(plan.new_tokens()),
        "--warmup",
        absl::StrCat(std::min(10u, std::max(1u, assignment.warmup_steps()))),
        "--device",
        absl::StrCat("cuda:", assignment.gpu_index())};
    const HarnessRun harness =
        RunHarness(options_, assignment, run, argv, "generation", sink, stop);
    const nlohmann::json& line = harness.line;
    const std::string& harness_error = harness.harness_error;
    const ProcessResult& process = harness.process;
    const std::optional<gpu::SamplerSummary>& summary = harness.summary;
    if (Cancelled(stop)) {
      outcome.error = "cancelled";
      break;
    }
    if (summary.has_value()) {
      result.set_samples(static_cast<uint64_t>(summary->samples));
    }
    const auto number = [&](const char* key) { return JsonNumber(line, key); };
    if (line.is_object() && line.value("error", "").empty()) {
      v1::GenerationEnergy* generation = result.mutable_generation();
      generation->set_quant(run.mode());
      generation->set_prompt_tokens(plan.prompt_tokens());
      generation->set_tokens_generated(
          static_cast<uint64_t>(number("tokens_generated").value_or(0)));
      generation->set_energy_j(number("energy_j").value_or(0));
      generation->set_idle_w(number("idle_w").value_or(0));
      generation->set_window_s(number("window_s").value_or(0));
      generation->set_tokens_per_s(number("tokens_per_s").value_or(0));
      generation->set_j_per_1k_tokens(number("j_per_1k_tokens").value_or(0));
      generation->set_params(
          static_cast<uint64_t>(number("params").value_or(0)));
    } else if (line.is_object()) {
      result.set_oom(line.value("oom", false));
      if (!result.oom()) result.set_error(line.value("error", ""));
    } else if (process.timed_out) {
      result.set_error(
          absl::StrCat("timed out after ", assignment.batch_timeout_s(), " s"));
    } else {
      result.set_error(absl::StrCat(
          "harness exited with ", process.exit_code, " and no generation",
          harness_error.empty() ? "" : ": " + harness_error, "; stderr: ",
          process.stderr_tail.substr(process.stderr_tail.size() > 600
                                         ? process.stderr_tail.size() - 600
                                         : 0)));
    }
    sink->BatchDone(run, std::move(result));
  }
  std::filesystem::remove(config_path);
  return outcome;
}

ExecutionOutcome TorchExecutor::Run(const v1::Assignment& assignment,
                                    ExecutionSink* sink,
                                    const std::atomic<StopReason>& stop) {
  if (assignment.has_energy()) return RunEnergy(assignment, sink, stop);
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
    const HarnessRun harness =
        RunHarness(options_, assignment, run, argv, "result", sink, stop);
    const nlohmann::json& result_line = harness.line;
    const std::string& harness_error = harness.harness_error;
    const ProcessResult& process = harness.process;
    const std::optional<gpu::SamplerSummary>& summary = harness.summary;
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
      // Energy is the harness's: the counter over the timed steps only, not
      // this sampler's difference over the whole process.
    }
    if (result_line.is_object()) {
      result.set_oom(result_line.value("oom", false));
      const auto number = [&](const char* key) {
        return JsonNumber(result_line, key);
      };
      if (!result.oom()) {
        if (auto v = number("peak_allocated_bytes")) {
          result.set_peak_allocated_gb(*v / 1e9);
        }
        if (auto v = number("peak_reserved_bytes")) {
          result.set_peak_reserved_gb(*v / 1e9);
        }
        if (auto v = number("step_seconds")) result.set_step_seconds(*v);
        if (auto v = number("energy_j")) result.set_energy_j(*v);
        if (auto v = number("steps"); v && *v >= 0 && *v <= 1e6) {
          result.set_timed_steps(static_cast<uint32_t>(*v));
        }
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
  if (assignment.has_energy()) {
    outcome.error =
        "the cuda executor does not run energy probes; use torch or sim";
    return outcome;
  }
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
