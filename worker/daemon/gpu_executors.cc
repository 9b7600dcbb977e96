#include "worker/daemon/gpu_executors.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/json_io.h"
#include "core/evidence/run_checks.h"
#include "nlohmann/json.hpp"
#include "worker/daemon/subprocess.h"
#include "worker/gpu/sampler.h"

namespace headroom::worker {
namespace {

// Samples one GPU while a child runs and forwards each reading to the sink
// (unless `forward` is false: the sink's stream is one GPU's readings).
class RunSampler {
 public:
  RunSampler(const GpuExecutorOptions& options, uint32_t cuda_index,
             const v1::BatchRun& run, ExecutionSink* sink,
             bool forward = true) {
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
    if (forward) {
      sampler.on_sample = [sink, run](const gpu::Sample& sample) {
        GpuReading reading;
        reading.memory_used_bytes = sample.memory_used_bytes;
        if (sample.power_mw) reading.power_w = *sample.power_mw / 1000.0;
        if (sample.energy_mj) {
          reading.total_energy_mj = static_cast<double>(*sample.energy_mj);
        }
        sink->Sample(run, sample.t_ms, reading);
      };
    }
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

// One harness child with its GPUs sampled beside it: the last JSON line
// whose "event" is `kind`, the harness's own "error" line, how the process
// ended, and the samplers' summary (nullopt without NVML): the first GPU's
// readings go to the sink; the summary's samples are summed over the GPUs
// and its peak over baseline is the largest GPU's (device_peak_bytes).
// Its implicit moves may throw (nlohmann::json's): it is built and returned
// once per batch, never moved in a noexcept context.
struct HarnessRun {  // NOLINT(bugprone-exception-escape)
  nlohmann::json line;
  std::string harness_error;
  ProcessResult process;
  std::optional<gpu::SamplerSummary> summary;
  std::optional<double> device_peak_bytes;
};

HarnessRun RunHarness(const GpuExecutorOptions& options,
                      const v1::Assignment& assignment, const v1::BatchRun& run,
                      const std::vector<std::string>& argv, const char* kind,
                      ExecutionSink* sink,
                      const std::atomic<StopReason>& stop) {
  HarnessRun out;
  std::vector<std::unique_ptr<RunSampler>> samplers;
  const std::vector<uint32_t> gpus = AssignmentGpus(assignment);
  for (size_t i = 0; i < gpus.size(); ++i) {
    samplers.push_back(std::make_unique<RunSampler>(options, gpus[i], run, sink,
                                                    /*forward=*/i == 0));
  }
  out.process = RunProcess(
      argv,
      std::chrono::milliseconds(
          static_cast<int64_t>(assignment.batch_timeout_s() * 1000)),
      [&](const std::string& text) {
        nlohmann::json event =
            nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
        if (!event.is_object()) return;
        const std::string event_kind = event.value("event", "");
        if (event_kind == "error") {
          out.harness_error = event.value("error", "");
        } else if (event_kind == kind) {
          out.line = std::move(event);
        }
      },
      [&] { return Cancelled(stop); });
  for (const std::unique_ptr<RunSampler>& sampler : samplers) {
    std::optional<gpu::SamplerSummary> summary = sampler->Finish();
    if (!summary.has_value()) continue;
    const double peak = summary->PeakOverBaselineBytes();
    out.device_peak_bytes = std::max(out.device_peak_bytes.value_or(0), peak);
    if (!out.summary.has_value()) {
      out.summary = std::move(summary);
    } else {
      out.summary->samples += summary->samples;
    }
  }
  return out;
}

// A number field of a harness line, nullopt when absent or not a number.
std::optional<double> JsonNumber(const nlohmann::json& line, const char* key) {
  auto it = line.find(key);
  if (it == line.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// A list of numbers of a harness line: nullopt when absent, not a list, not
// exactly `size` entries, or any entry not a number in [0, max].
std::optional<std::vector<double>> JsonNumberList(const nlohmann::json& line,
                                                  const char* key, size_t size,
                                                  double max) {
  auto it = line.find(key);
  if (it == line.end() || !it->is_array() || it->size() != size) {
    return std::nullopt;
  }
  std::vector<double> out;
  out.reserve(size);
  for (const nlohmann::json& value : *it) {
    if (!value.is_number()) return std::nullopt;
    const double v = value.get<double>();
    if (!(v >= 0 && v <= max)) return std::nullopt;
    out.push_back(v);
  }
  return out;
}

// The most a harness figure in GB may be (far above any node's memory).
constexpr double kMaxReportedGb = 1e6;
// setup.gpus at most (kMaxGpus in core/memory/parallel.h).
constexpr uint32_t kMaxRunGpus = 512;

// At most this many phase rows in a result line (each phase once).
constexpr size_t kMaxPhases = v1::JobPhase_MAX;

// A byte figure of a harness object, as GB: nullopt when absent or null
// (not measured); an error naming `where` and the value when it is not a
// number in [0, kMaxReportedGb GB] (negative, or beyond any card: an
// overflowed or non-finite figure).
absl::StatusOr<std::optional<double>> JsonBytesAsGb(const nlohmann::json& obj,
                                                    const char* key,
                                                    const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<double>();
  const double bytes = it->is_number() ? it->get<double>() : -1;
  if (!it->is_number() || !(bytes >= 0 && bytes <= kMaxReportedGb * 1e9)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the harness's result ", where, ".", key, " = ", it->dump(),
        " is not a byte count; allowed null or 0 .. ", kMaxReportedGb * 1e9));
  }
  return std::optional<double>(bytes / 1e9);
}

// The harness's device_context_bytes and phases (worker/harness/README.md,
// "Output of run") into `result`; nothing is kept when any figure or phase
// name is bad, and the error names it.
absl::Status ReadDeviceMemory(const nlohmann::json& line,
                              v1::BatchResult* result) {
  absl::StatusOr<std::optional<double>> context =
      JsonBytesAsGb(line, "device_context_bytes", "line");
  if (!context.ok()) return context.status();
  std::vector<v1::PhaseMeasurement> phases;
  auto list = line.find("phases");
  if (list != line.end() && !list->is_null()) {
    if (!list->is_array() || list->size() > kMaxPhases) {
      return absl::InvalidArgumentError(
          absl::StrCat("the harness's result phases is not a list of at most ",
                       kMaxPhases, " phases"));
    }
    for (size_t i = 0; i < list->size(); ++i) {
      const nlohmann::json& row = (*list)[i];
      const std::string where = absl::StrCat("phases[", i, "]");
      auto name = row.is_object() ? row.find("phase") : row.end();
      if (name == row.end() || !name->is_string() ||
          !IsPhaseMeasurementName(name->get<std::string>())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the harness's result ", where, ".phase = ",
            name == row.end() ? "(none)" : name->dump().substr(0, 80),
            " is unknown; allowed ", PhaseMeasurementNames()));
      }
      v1::PhaseMeasurement phase;
      phase.set_phase(name->get<std::string>());
      for (const auto& [key, set] : std::initializer_list<
               std::pair<const char*, void (v1::PhaseMeasurement::*)(double)>>{
               {"peak_allocated_bytes",
                &v1::PhaseMeasurement::set_allocated_gb},
               {"peak_reserved_bytes", &v1::PhaseMeasurement::set_reserved_gb},
               {"device_bytes", &v1::PhaseMeasurement::set_device_gb}}) {
        absl::StatusOr<std::optional<double>> gb =
            JsonBytesAsGb(row, key, where);
        if (!gb.ok()) return gb.status();
        if (gb->has_value()) (phase.*set)(**gb);
      }
      phases.push_back(std::move(phase));
    }
  }
  if (context->has_value()) result->set_device_context_gb(**context);
  for (v1::PhaseMeasurement& phase : phases) {
    *result->add_phases() = std::move(phase);
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<uint32_t> AssignmentGpus(const v1::Assignment& assignment) {
  if (assignment.setup().gpus() > 1 && !assignment.gpu_indices().empty()) {
    const size_t n =
        std::min<size_t>(assignment.gpu_indices_size(), kMaxRunGpus);
    return {assignment.gpu_indices().begin(),
            assignment.gpu_indices().begin() + n};
  }
  return {assignment.gpu_index()};
}

uint16_t FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  uint16_t port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  return port;
}

HarnessCommand TorchRunCommand(const GpuExecutorOptions& options,
                               const v1::Assignment& assignment,
                               const v1::BatchRun& run,
                               const std::string& spec_path,
                               const std::string& setup_json,
                               uint16_t master_port,
                               const std::string& parent_visible) {
  HarnessCommand out;
  const uint32_t gpus = assignment.setup().gpus();
  std::vector<std::string> harness_args = {
      options.harness, "run",
      "--spec",        spec_path,
      "--batches",     absl::StrCat(run.batch()),
      "--setup",       setup_json,
      "--warmup",      absl::StrCat(assignment.warmup_steps()),
      "--steps",       absl::StrCat(assignment.steps())};
  if (gpus <= 1) {
    out.argv = {options.python};
    out.argv.insert(out.argv.end(), harness_args.begin(), harness_args.end());
    out.argv.push_back("--device");
    out.argv.push_back(absl::StrCat("cuda:", assignment.gpu_index()));
    if (run.mode() == "compiled") out.argv.push_back("--compile");
    return out;
  }
  if (gpus > kMaxRunGpus) {
    out.error =
        absl::StrCat("setup.gpus = ", gpus, " is out of range; allowed ",
                     "0 or 1 (one GPU) .. ", kMaxRunGpus);
    return out;
  }
  const auto& indices = assignment.gpu_indices();
  if (static_cast<uint32_t>(indices.size()) != gpus) {
    out.error =
        absl::StrCat("assignment.gpu_indices has ", indices.size(),
                     " entries for setup.gpus = ", gpus,
                     "; a multi-GPU probe needs one local GPU per rank");
    return out;
  }
  if (indices[0] != assignment.gpu_index()) {
    out.error = absl::StrCat("assignment.gpu_indices[0] = ", indices[0],
                             " is not gpu_index ", assignment.gpu_index());
    return out;
  }
  std::set<uint32_t> seen;
  for (int r = 0; r < indices.size(); ++r) {
    const uint32_t index = indices[r];
    if (!seen.insert(index).second) {
      out.error = absl::StrCat("assignment.gpu_indices[", r, "] = ", index,
                               " repeats a GPU; each rank needs its own");
      return out;
    }
    if (!options.gpus.empty() &&
        std::none_of(options.gpus.begin(), options.gpus.end(),
                     [&](const gpu::GpuInfo& info) {
                       return info.index == static_cast<int>(index);
                     })) {
      out.error = absl::StrCat("assignment.gpu_indices[", r, "] = ", index,
                               " is not a GPU of this worker (it has ",
                               options.gpus.size(), ")");
      return out;
    }
  }
  // The child's CUDA_VISIBLE_DEVICES: the worker's ordinals, or what they
  // stand for when the worker itself sees a subset.
  std::vector<std::string> visible;
  std::vector<std::string> parent;
  if (!parent_visible.empty()) {
    parent = absl::StrSplit(parent_visible, ',', absl::SkipWhitespace());
  }
  for (int r = 0; r < indices.size(); ++r) {
    if (parent.empty()) {
      visible.push_back(absl::StrCat(indices[r]));
    } else if (indices[r] < parent.size()) {
      visible.push_back(std::string(parent[indices[r]]));
    } else {
      out.error =
          absl::StrCat("assignment.gpu_indices[", r, "] = ", indices[r],
                       " is beyond this worker's CUDA_VISIBLE_DEVICES (",
                       parent.size(), " GPUs)");
      return out;
    }
  }
  if (master_port == 0) {
    out.error = "no free loopback port for torch.distributed.run's rendezvous";
    return out;
  }
  out.argv = {
      "env", absl::StrCat("CUDA_VISIBLE_DEVICES=", absl::StrJoin(visible, ",")),
      // The rendezvous and NCCL's bootstrap stay on loopback.
      "NCCL_SOCKET_IFNAME=lo", "GLOO_SOCKET_IFNAME=lo", options.python, "-m",
      "torch.distributed.run", "--nnodes", "1", "--node_rank", "0",
      "--nproc_per_node", absl::StrCat(gpus), "--max_restarts", "0",
      "--master_addr", "127.0.0.1", "--master_port", absl::StrCat(master_port)};
  out.argv.insert(out.argv.end(), harness_args.begin(), harness_args.end());
  out.argv.push_back("--device");
  out.argv.push_back("cuda");
  if (run.mode() == "compiled") out.argv.push_back("--compile");
  return out;
}

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
    // batch's peak (or OOM) cannot leak into the next. A multi-GPU setup
    // runs one process per rank under torch.distributed.run, all in the
    // child's process group, which a timeout or cancel stops as one.
    const char* parent_visible = std::getenv("CUDA_VISIBLE_DEVICES");
    const HarnessCommand command =
        TorchRunCommand(options_, assignment, run, spec_path, setup,
                        assignment.setup().gpus() > 1 ? FreeLoopbackPort() : 0,
                        parent_visible == nullptr ? "" : parent_visible);
    if (!command.error.empty()) {
      v1::BatchResult result;
      result.set_batch(run.batch());
      result.set_repetition(run.repetition());
      result.set_mode(run.mode());
      result.set_error(command.error);
      sink->BatchDone(run, std::move(result));
      continue;
    }
    const HarnessRun harness = RunHarness(options_, assignment, run,
                                          command.argv, "result", sink, stop);
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
      result.set_device_peak_gb(harness.device_peak_bytes.value_or(0) / 1e9);
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
        // A multi-GPU run: every rank's peak in rank order. A parallel
        // setup (one GPU too, run as a group of one): the host memory of
        // all ranks, which offload needs.
        const uint32_t gpus = assignment.setup().gpus();
        if (gpus > 1) {
          if (auto peaks = JsonNumberList(result_line, "rank_peaks_gb", gpus,
                                          kMaxReportedGb)) {
            for (double peak : *peaks) result.add_rank_peaks_gb(peak);
          }
        }
        if (auto v = number("host_peak_gb");
            v && *v >= 0 && *v <= kMaxReportedGb) {
          result.set_host_peak_gb(*v);
        }
      }
      result.set_error(result_line.value("error", ""));
      // The phases finished before an OOM are kept too (where it struck);
      // a bad figure is the batch's error unless it already has one.
      if (absl::Status memory = ReadDeviceMemory(result_line, &result);
          !memory.ok() && !result.oom() && result.error().empty()) {
        result.set_error(std::string(memory.message()));
      }
      // The sampler reads NVML every sample_ms and can miss the top; each
      // phase's reading at its end (the allocator keeps its segments) is a
      // measurement of the device too: the peak is the largest of them.
      if (result.has_device_peak_gb()) {
        for (const v1::PhaseMeasurement& phase : result.phases()) {
          if (phase.has_device_gb() &&
              phase.device_gb() > result.device_peak_gb()) {
            result.set_device_peak_gb(phase.device_gb());
          }
        }
      }
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
