#include "server/service/fleet/measured_runs.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "base/input_limits.h"
#include "core/catalog/gpu_catalog.h"
#include "core/evidence/model_key.h"
#include "core/frontends/frontend_registry.h"
#include "core/memory/model_spec.h"
#include "server/service/fleet/probe_watches.h"
#include "server/service/fleet_autotune.h"
#include "server/store/probe_transitions.h"
#include "spdlog/spdlog.h"

namespace headroom {

std::string RankPeaksProblem(const v1::BatchResult& batch, uint32_t gpus,
                             double card_memory_gb) {
  const auto& peaks = batch.rank_peaks_gb();
  if (gpus <= 1) {
    // One GPU: no per-rank list (a single entry must be the peak itself).
    if (peaks.empty()) return "";
    if (peaks.size() == 1 && batch.has_peak_allocated_gb() &&
        std::fabs(peaks[0] - batch.peak_allocated_gb()) <= 1e-6) {
      return "";
    }
    return absl::StrCat("rank_peaks_gb has ", peaks.size(),
                        " entries for a one-GPU run; allowed none");
  }
  if (static_cast<uint32_t>(peaks.size()) != gpus) {
    return absl::StrCat("rank_peaks_gb has ", peaks.size(),
                        " entries; setup.gpus = ", gpus, " needs one per rank");
  }
  const double bound = card_memory_gb * kRankPeakSlack;
  double largest = 0;
  for (int r = 0; r < peaks.size(); ++r) {
    const double gb = peaks[r];
    if (!std::isfinite(gb) || gb < 0 || gb > bound) {
      return absl::StrCat(
          "rank_peaks_gb[", r, "] = ", gb, " is not a peak; allowed 0..", bound,
          " GB (the card's ", card_memory_gb, " GB x ", kRankPeakSlack, ")");
    }
    largest = std::max(largest, gb);
  }
  if (!batch.has_peak_allocated_gb() ||
      std::fabs(largest - batch.peak_allocated_gb()) > 1e-6) {
    return absl::StrCat(
        "rank_peaks_gb's largest, ", largest, " GB, is not peak_allocated_gb (",
        batch.has_peak_allocated_gb() ? absl::StrCat(batch.peak_allocated_gb())
                                      : std::string("unset"),
        "); the run's peak is its largest rank's");
  }
  return "";
}

v1::ProbeResult AsMeasuredOn(const v1::ProbeResult& result,
                             const v1::GpuDevice& device) {
  v1::ProbeResult measured = result;
  *measured.mutable_gpu() = device;
  return measured;
}

std::optional<v1::MeasuredRun> MeasuredRunFor(const v1::Probe& probe,
                                              const v1::ProbeResult& result,
                                              const std::string& worker) {
  // The memory model predicts eager execution: compiled runs stay out;
  // an energy probe's windows are energy runs, not training runs.
  if (result.batch().mode() == "compiled") return std::nullopt;
  if (probe.request().has_energy()) return std::nullopt;
  std::string gpu = result.gpu().catalog_gpu();
  if (gpu.empty()) gpu = CatalogGpuForDriverName(result.gpu().name());
  if (gpu.empty()) gpu = probe.gpu();
  absl::StatusOr<GpuInfo> card = FindGpu(gpu);
  if (gpu.empty() || !card.ok()) return std::nullopt;
  const v1::BatchResult& batch = result.batch();
  v1::MeasuredRun run;
  run.set_template_(probe.template_());
  run.set_family(probe.spec().family());
  // The key and shape of what was measured: a template's spec is the
  // catalog's; any other model's spec travels with the run.
  const v1::TrainingSetup setup =
      ProfileSetup(probe.request().model(), probe.request().setup());
  *run.mutable_setup() = setup;
  if (probe.template_().empty()) *run.mutable_spec() = probe.spec();
  run.set_model_key(ModelKeyOf(probe.spec(), setup).id);
  const bool simulated = batch.simulated() || result.gpu().simulated();
  const std::string& executor = probe.request().executor();
  run.set_measured_by(simulated            ? v1::SIM
                      : executor == "cuda" ? v1::CUDA_PROBE
                                           : v1::TORCH_HARNESS);
  if (!simulated) run.set_attention_backend("spec");
  run.set_gpu(card->name);
  run.set_batch(batch.batch());
  run.set_params(CountParams(probe.spec()));
  // A multi-GPU run: every rank's peak, or the reason they cannot stand.
  const double card_gb =
      result.gpu().memory_bytes() > 0
          ? static_cast<double>(result.gpu().memory_bytes()) / 1e9
          : card->memory_gb;
  const std::string rank_problem =
      RankPeaksProblem(batch, std::max(1u, setup.gpus()), card_gb);
  if (!batch.error().empty()) {
    // Within the stored text bound (CheckMeasuredRun), whatever the error.
    run.set_excluded(absl::StrCat(
        "probe error: ",
        absl::string_view(batch.error()).substr(0, kMaxTextChars - 64)));
  } else if (batch.oom()) {
    run.set_oom_on_gb(card->memory_gb);
  } else if (!rank_problem.empty()) {
    run.set_excluded(rank_problem);
  } else if (batch.has_peak_allocated_gb()) {
    run.set_measured_peak_gb(batch.peak_allocated_gb());
    if (setup.gpus() > 1) *run.mutable_rank_peaks_gb() = batch.rank_peaks_gb();
  } else {
    run.set_excluded("no allocator peak measured (device peak only)");
  }
  run.set_source(
      absl::StrCat("probe ", probe.id(), " repetition ", batch.repetition()));
  run.set_simulated(simulated);
  run.set_worker(worker);
  run.set_driver_version(result.gpu().driver_version());
  run.set_cuda_version(result.gpu().cuda_version());
  std::vector<std::string> versions;
  for (const auto& [name, version] : result.framework_versions()) {
    versions.push_back(absl::StrCat(name, " ", version));
  }
  std::sort(versions.begin(), versions.end());
  run.set_framework(absl::StrJoin(versions, ", "));
  // Memory as the device holds it (issue 30): the allocator's reserved
  // peak, the device's, the CUDA context and each phase, as measured.
  if (batch.has_peak_reserved_gb()) {
    run.set_peak_reserved_gb(batch.peak_reserved_gb());
  }
  if (batch.has_device_peak_gb()) {
    run.set_device_peak_gb(batch.device_peak_gb());
  }
  if (batch.has_device_context_gb()) {
    run.set_device_context_gb(batch.device_context_gb());
  }
  *run.mutable_phases() = batch.phases();
  if (batch.has_step_seconds()) run.set_step_seconds(batch.step_seconds());
  if (batch.has_energy_j()) run.set_energy_j(batch.energy_j());
  run.set_timed_steps(batch.timed_steps());
  return run;
}

namespace {

std::string FrameworkOf(const v1::ProbeResult& result) {
  std::vector<std::string> versions;
  for (const auto& [name, version] : result.framework_versions()) {
    versions.push_back(absl::StrCat(name, " ", version));
  }
  std::sort(versions.begin(), versions.end());
  return absl::StrJoin(versions, ", ");
}

}  // namespace

std::optional<v1::EnergyRun> EnergyRunFor(const v1::Probe& probe,
                                          const v1::ProbeResult& result,
                                          const std::string& worker,
                                          int64_t now_unix) {
  if (!probe.request().has_energy()) return std::nullopt;
  const v1::BatchResult& batch = result.batch();
  if (!batch.has_generation() || !batch.error().empty() || batch.oom()) {
    return std::nullopt;
  }
  std::string gpu = result.gpu().catalog_gpu();
  if (gpu.empty()) gpu = CatalogGpuForDriverName(result.gpu().name());
  if (gpu.empty()) gpu = probe.gpu();
  absl::StatusOr<GpuInfo> card = FindGpu(gpu);
  if (gpu.empty() || !card.ok()) return std::nullopt;
  const v1::GenerationEnergy& g = batch.generation();
  v1::EnergyRun run;
  run.set_model(probe.template_().empty() ? probe.spec().name()
                                          : probe.template_());
  // N as the planner counts the model (the curves' N), not as the worker
  // says: the two describe the same graph.
  run.set_params_b(static_cast<double>(CountParams(probe.spec())) / 1e9);
  run.set_gpu(card->name);
  run.set_arch(card->arch);
  run.set_quant(g.quant());
  run.set_tokens_generated(g.tokens_generated());
  run.set_energy_j(g.energy_j());
  run.set_idle_w(g.idle_w());
  run.set_window_s(g.window_s());
  run.set_tokens_per_s(g.tokens_per_s());
  run.set_prompt_tokens(g.prompt_tokens());
  run.set_framework(FrameworkOf(result));
  run.set_simulated(batch.simulated() || result.gpu().simulated());
  run.set_worker(worker);
  run.set_measured_unix(now_unix);
  run.set_source(
      absl::StrCat("probe ", probe.id(), " repetition ", batch.repetition()));
  return run;
}

ResultOutcome RecordBatchResult(Store* store, const ModelCatalog& catalog,
                                const v1::Probe& probe,
                                const v1::ProbeResult& result,
                                const v1::WorkerHello& hello,
                                int64_t now_unix) {
  ResultOutcome outcome;
  const std::string& worker = hello.worker_id();
  const std::string& key = result.key();
  const v1::BatchResult& batch = result.batch();
  // What the run measured is the card this connection registered at
  // hello (its kind, memory, simulated flag), never the result's own
  // gpu field.
  const v1::GpuDevice* device = MeasuringDevice(probe, hello);
  if (std::optional<Rejection> bad =
          CheckBatchResult(probe, batch, CardMemoryGb(probe, device))) {
    outcome.rejected = std::move(bad);
    return outcome;
  }
  // No such card (a hello without GPUs): the batch is the probe's, but no
  // measured run of a catalog GPU.
  const v1::ProbeResult measured =
      device == nullptr ? result : AsMeasuredOn(result, *device);
  const std::optional<v1::MeasuredRun> run =
      device == nullptr ? std::nullopt
                        : MeasuredRunFor(probe, measured, worker);
  const std::optional<v1::EnergyRun> energy =
      device == nullptr ? std::nullopt
                        : EnergyRunFor(probe, measured, worker, now_unix);
  // Held to the bounds a Refit holds an import to; nothing stored if not.
  if (std::optional<Rejection> bad = CheckStoredRuns(run, energy, catalog)) {
    outcome.rejected = std::move(bad);
    return outcome;
  }
  // The planner's key, not the worker's: one per run of this assignment.
  const std::string stored_key =
      StoredResultKey(probe.id(), result.assignment_id(), batch);
  v1::Probe updated;
  absl::StatusOr<bool> stored =
      store->RecordProbeResult(probe.id(), result.assignment_id(), worker,
                               stored_key, batch, run, &updated);
  if (stored.status().code() == absl::StatusCode::kFailedPrecondition) {
    outcome.rejected = Rejection{WorkerRejection::kNotLeased,
                                 std::string(stored.status().message())};
    return outcome;
  }
  if (!stored.ok()) {
    spdlog::error("event=result_not_stored key={} error=\"{}\"", Cut(key),
                  std::string(stored.status().message()));
    outcome.retry = true;
    return outcome;
  }
  // An energy window, accepted for the assignment the worker holds, is
  // also an energy run, stored under the same key: also for a duplicate
  // (the first attempt may have failed here), and not acknowledged until
  // it is stored, so a result re-sent after a failure stores it once.
  if (energy.has_value()) {
    absl::StatusOr<bool> added = store->AddEnergyRun(stored_key, *energy);
    if (!added.ok()) {
      spdlog::error("event=energy_run_not_stored key={} error=\"{}\"", Cut(key),
                    std::string(added.status().message()));
      outcome.retry = true;
      return outcome;
    }
  }
  outcome.run_stored = *stored && run.has_value();
  outcome.counted = !*stored                 ? "duplicate"
                    : batch.oom()            ? "oom"
                    : !batch.error().empty() ? "error"
                                             : "measured";
  // The probe as the store left it, read in the same transaction.
  if (*stored) outcome.changed = std::move(updated);
  return outcome;
}

ResultOutcome EndAssignment(Store* store, const v1::Probe& probe,
                            const v1::ProbeResult& result,
                            const v1::WorkerHello& hello,
                            uint32_t max_handbacks) {
  ResultOutcome outcome;
  const std::string& worker = hello.worker_id();
  if (IsFinal(probe.state()) && probe.worker() == worker &&
      probe.assignment_id() == result.assignment_id()) {
    // This worker's assignment ended already: a re-sent last message
    // whose acknowledgement was lost.
    return outcome;
  }
  if (absl::Status leased = CheckLeased(probe, result.assignment_id(), worker);
      !leased.ok()) {
    outcome.rejected =
        Rejection{WorkerRejection::kNotLeased, std::string(leased.message())};
    return outcome;
  }
  absl::StatusOr<v1::Probe> finished;
  if (result.handed_back()) {
    finished = store->HandBack(probe.id(), result.assignment_id(), worker,
                               max_handbacks);
  } else {
    std::string error = result.error();
    std::string details = result.details_json();
    if (error.empty() && probe.request().has_autotune()) {
      absl::StatusOr<std::string> record =
          AcceptAutotuneRecord(store, probe, result, hello);
      if (record.ok()) {
        details = *std::move(record);
      } else {
        error = absl::StrCat("autotune record rejected: ",
                             record.status().message());
      }
    }
    finished = store->FinishAssignment(
        probe.id(), result.assignment_id(),
        error.empty() ? v1::Probe::SUCCEEDED : v1::Probe::FAILED, error,
        details, /*requeue=*/false);
  }
  if (finished.status().code() == absl::StatusCode::kFailedPrecondition) {
    outcome.rejected = Rejection{WorkerRejection::kNotLeased,
                                 std::string(finished.status().message())};
    return outcome;
  }
  if (!finished.ok()) {
    spdlog::error("event=finish_not_stored key={} error=\"{}\"",
                  Cut(result.key()), std::string(finished.status().message()));
    outcome.retry = true;
    return outcome;
  }
  spdlog::info("event=assignment_done probe={} assignment={} state={}",
               finished->id(), result.assignment_id(),
               v1::Probe::State_Name(finished->state()));
  if (result.handed_back() && finished->state() == v1::Probe::FAILED) {
    // The hand-back ended the probe instead of re-queueing it.
    outcome.rejected =
        Rejection{WorkerRejection::kHandbackLimit, finished->error()};
  }
  outcome.changed = *std::move(finished);
  return outcome;
}

}  // namespace headroom
