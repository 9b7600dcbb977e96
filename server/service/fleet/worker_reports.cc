#include "server/service/fleet/worker_reports.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/value_bounds.h"
#include "core/calibration/promotion.h"
#include "core/catalog/gpu_catalog.h"
#include "core/energy/energy_refit.h"
#include "core/evidence/run_checks.h"
#include "server/service/fleet/dispatch.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

absl::Status CheckLength(const std::string& text, const std::string& field,
                         size_t max) {
  if (text.size() <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is ", text.size(), " characters; allowed up to ", max));
}

absl::Status CheckCount(int count, const char* field, int max) {
  if (count <= max) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " has ", count, " entries; allowed up to ", max));
}

Rejection Implausible(std::string detail) {
  return {WorkerRejection::kImplausibleValue, std::move(detail)};
}

// A peak field: finite, >= 0, within the card.
std::optional<Rejection> CheckPeak(const char* field, double gb,
                                   std::optional<double> card_memory_gb) {
  if (!std::isfinite(gb) || gb < 0) {
    return Implausible(absl::StrCat(
        field, " = ", gb, "; a peak is a finite number of GB, at least 0"));
  }
  if (card_memory_gb.has_value() && gb > *card_memory_gb * kPeakSlack) {
    return Implausible(absl::StrCat(field, " = ", gb,
                                    " GB is more than the card's ",
                                    *card_memory_gb, " GB x ", kPeakSlack));
  }
  return std::nullopt;
}

// An energy probe's window: finite, positive where it must be, and within
// what one card can do (energy_refit.h's bounds).
std::optional<Rejection> CheckGeneration(const v1::GenerationEnergy& g,
                                         const std::string& mode) {
  if (g.quant() != mode) {
    return Implausible(absl::StrCat("generation.quant = \"", Cut(g.quant(), 32),
                                    "\" but the run is \"", Cut(mode, 32),
                                    "\""));
  }
  if (g.tokens_generated() == 0 || g.tokens_generated() > kMaxRunTokens) {
    return Implausible(
        absl::StrCat("generation.tokens_generated = ", g.tokens_generated(),
                     "; allowed 1..", kMaxRunTokens));
  }
  for (const auto& [field, value, lo, hi, open] :
       {std::tuple<const char*, double, double, double, bool>{
            "generation.energy_j", g.energy_j(), 0, kMaxRunEnergyJ, true},
        {"generation.window_s", g.window_s(), 0, kMaxWindowSeconds, true},
        {"generation.idle_w", g.idle_w(), 0, kMaxCardWatts, false},
        {"generation.tokens_per_s", g.tokens_per_s(), 0, kMaxTokensPerS, false},
        {"generation.j_per_1k_tokens", g.j_per_1k_tokens(), 0, kMaxJPer1kTokens,
         true}}) {
    const bool ok = std::isfinite(value) && value <= hi &&
                    (open ? value > lo : value >= lo);
    if (!ok) {
      return Implausible(absl::StrCat(field, " = ", value, "; allowed ",
                                      open ? "(" : "[", lo, ", ", hi, "]"));
    }
  }
  // The counter over the window cannot show more than a card can draw.
  if (g.energy_j() > kMaxCardWatts * g.window_s() * kPowerSlack) {
    return Implausible(absl::StrCat("generation.energy_j = ", g.energy_j(),
                                    " J over window_s = ", g.window_s(),
                                    " s is more than ", kMaxCardWatts, " W"));
  }
  if (g.params() > kMaxParams) {
    return Implausible(absl::StrCat("generation.params = ", g.params(),
                                    "; allowed up to ", kMaxParams));
  }
  return std::nullopt;
}

}  // namespace

absl::Status CheckFleetId(const std::string& id, const char* field) {
  if (id.empty() || id.size() > kMaxIdLength) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, " must be 1..", kMaxIdLength, " characters; got ", id.size()));
  }
  for (char c : id) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
          c == '-' || c == ':')) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, " may hold letters, digits, '.', '_', '-' and ':' only"));
    }
  }
  return absl::OkStatus();
}

std::optional<Rejection> CheckHello(const v1::WorkerHello& hello,
                                    const std::string& identity) {
  const std::string& id = hello.worker_id();
  absl::Status valid = CheckFleetId(id, "hello.worker_id");
  if (valid.ok() && !hello.node_name().empty()) {
    valid = CheckFleetId(hello.node_name(), "hello.node_name");
  }
  if (!valid.ok()) {
    return Rejection{WorkerRejection::kMalformed, std::string(valid.message())};
  }
  if (absl::Status bounded = CheckHelloInventory(hello); !bounded.ok()) {
    return Rejection{WorkerRejection::kInventoryTooLarge,
                     std::string(bounded.message())};
  }
  if (absl::Status cards = CheckHelloCards(hello); !cards.ok()) {
    return Rejection{WorkerRejection::kImplausibleValue,
                     std::string(cards.message())};
  }
  // A worker credential names its worker: it may say hello as that worker
  // only.
  absl::string_view bound = identity;
  if ((absl::ConsumePrefix(&bound, "cert:") ||
       absl::ConsumePrefix(&bound, "token:")) &&
      id != bound) {
    return Rejection{
        WorkerRejection::kIdentityMismatch,
        absl::StrCat("hello.worker_id '", id, "' is not the worker '",
                     Cut(identity), "' this connection's credential is for")};
  }
  return std::nullopt;
}

absl::Status CheckHelloCards(const v1::WorkerHello& hello) {
  for (int i = 0; i < hello.gpus_size(); ++i) {
    const v1::GpuDevice& gpu = hello.gpus(i);
    const std::string kind = CatalogGpuForDriverName(gpu.name());
    if (kind.empty() || gpu.memory_bytes() == 0) continue;
    absl::StatusOr<GpuInfo> card = FindGpu(kind);
    if (!card.ok()) continue;
    const double memory_gb = static_cast<double>(gpu.memory_bytes()) / 1e9;
    if (!MemoryAgrees(*card, memory_gb)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "hello.gpus[", i, "] (index ", gpu.index(),
          ").memory_bytes = ", gpu.memory_bytes(), " (", memory_gb,
          " GB) is not a ", card->name, " (\"", Cut(gpu.name(), 64),
          "\"): the catalog's has ", card->memory_gb, " GB; allowed within ",
          kCardMemoryTolerance * 100, " % of it, or 0 (not known)"));
    }
  }
  return absl::OkStatus();
}

const v1::GpuDevice* MeasuringDevice(const v1::Probe& probe,
                                     const v1::WorkerHello& hello) {
  const std::vector<v1::GpuDevice> gpus(hello.gpus().begin(),
                                        hello.gpus().end());
  const std::vector<uint32_t> indices = AssignedGpuIndices(probe, gpus);
  if (indices.empty()) return nullptr;
  for (const v1::GpuDevice& gpu : hello.gpus()) {
    if (gpu.index() == indices.front()) return &gpu;
  }
  return nullptr;
}

std::optional<Rejection> CheckResultIds(const v1::ProbeResult& result) {
  const std::string& key = result.key();
  if (key.empty() || key.size() > kMaxResultKeyLength) {
    return Rejection{WorkerRejection::kMalformed,
                     absl::StrCat("result.key must be 1..", kMaxResultKeyLength,
                                  " characters; got ", key.size())};
  }
  if (absl::Status ids = CheckFleetId(result.probe_id(), "result.probe_id");
      !ids.ok()) {
    return Rejection{WorkerRejection::kMalformed, std::string(ids.message())};
  }
  return std::nullopt;
}

absl::Status CheckHelloInventory(const v1::WorkerHello& hello) {
  RETURN_IF_ERROR(
      CheckLength(hello.hostname(), "hello.hostname", kMaxHelloStringLength));
  RETURN_IF_ERROR(
      CheckLength(hello.version(), "hello.version", kMaxHelloStringLength));
  RETURN_IF_ERROR(CheckLength(hello.running_assignment_id(),
                              "hello.running_assignment_id",
                              kMaxHelloStringLength));
  RETURN_IF_ERROR(
      CheckCount(hello.gpus_size(), "hello.gpus", kMaxGpusPerWorker));
  RETURN_IF_ERROR(CheckCount(hello.executors_size(), "hello.executors",
                             kMaxExecutorsPerWorker));
  RETURN_IF_ERROR(
      CheckCount(hello.notes_size(), "hello.notes", kMaxNotesPerWorker));
  RETURN_IF_ERROR(CheckCount(hello.framework_versions_size(),
                             "hello.framework_versions",
                             kMaxFrameworkVersions));
  for (int i = 0; i < hello.executors_size(); ++i) {
    RETURN_IF_ERROR(CheckLength(hello.executors(i),
                                absl::StrCat("hello.executors[", i, "]"),
                                kMaxHelloStringLength));
  }
  for (int i = 0; i < hello.notes_size(); ++i) {
    RETURN_IF_ERROR(CheckLength(
        hello.notes(i), absl::StrCat("hello.notes[", i, "]"), kMaxNoteLength));
  }
  for (const auto& [name, version] : hello.framework_versions()) {
    RETURN_IF_ERROR(CheckLength(name, "hello.framework_versions key",
                                kMaxHelloStringLength));
    RETURN_IF_ERROR(CheckLength(
        version, absl::StrCat("hello.framework_versions[", Cut(name, 64), "]"),
        kMaxHelloStringLength));
  }
  const double host_gb = static_cast<double>(hello.host_memory_bytes()) / 1e9;
  if (host_gb > kMaxHostMemoryGb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "hello.host_memory_bytes = ", hello.host_memory_bytes(), " (", host_gb,
        " GB); allowed up to ", kMaxHostMemoryGb, " GB (0 = not known)"));
  }
  std::set<std::string> uuids;  // each card once
  for (int i = 0; i < hello.gpus_size(); ++i) {
    const v1::GpuDevice& gpu = hello.gpus(i);
    const std::string field = absl::StrCat("hello.gpus[", i, "]");
    if (gpu.index() >= kMaxGpuIndex) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".index = ", gpu.index(), "; allowed 0..", kMaxGpuIndex - 1));
    }
    if (!gpu.uuid().empty() && !uuids.insert(gpu.uuid()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".uuid = \"", Cut(gpu.uuid(), 64),
                       "\" is another GPU's too; each card is listed once"));
    }
    for (const auto& [name, text] :
         {std::pair<const char*, const std::string*>{".name", &gpu.name()},
          {".uuid", &gpu.uuid()},
          {".compute_capability", &gpu.compute_capability()},
          {".driver_version", &gpu.driver_version()},
          {".cuda_version", &gpu.cuda_version()},
          {".catalog_gpu", &gpu.catalog_gpu()}}) {
      RETURN_IF_ERROR(CheckLength(*text, field + name, kMaxHelloStringLength));
    }
    const double memory_gb = static_cast<double>(gpu.memory_bytes()) / 1e9;
    if (memory_gb > kMaxGpuMemoryGb) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".memory_bytes = ", gpu.memory_bytes(), " (", memory_gb,
          " GB); allowed up to ", kMaxGpuMemoryGb, " GB (0 = not known)"));
    }
  }
  return absl::OkStatus();
}

std::optional<double> CardMemoryGb(const v1::Probe& probe,
                                   const v1::GpuDevice* device) {
  if (device != nullptr && device->memory_bytes() > 0) {
    return static_cast<double>(device->memory_bytes()) / 1e9;
  }
  // The device did not say: the catalog's card.
  std::string kind =
      device == nullptr ? "" : CatalogGpuForDriverName(device->name());
  if (kind.empty()) kind = probe.gpu();
  if (kind.empty()) return std::nullopt;
  absl::StatusOr<GpuInfo> card = FindGpu(kind);
  if (!card.ok()) return std::nullopt;
  return card->memory_gb;
}

std::optional<Rejection> CheckBatchResult(
    const v1::Probe& probe, const v1::BatchResult& batch,
    std::optional<double> card_memory_gb) {
  const v1::SubmitProbeRequest& request = probe.request();
  bool known = false;
  if (request.has_energy()) {
    const auto& quants = request.energy().quants();
    known =
        batch.batch() == 1 &&
        batch.repetition() < std::max(1u, request.repetitions()) &&
        std::find(quants.begin(), quants.end(), batch.mode()) != quants.end();
    if (known && batch.has_generation()) {
      if (auto bad = CheckGeneration(batch.generation(), batch.mode())) {
        return bad;
      }
    }
  } else if (request.has_autotune()) {
    for (const v1::PlannedMicrobatch& planned :
         request.autotune().plan().candidates()) {
      known =
          known || (planned.microbatch() == batch.batch() &&
                    planned.mode() == batch.mode() && batch.repetition() == 0);
    }
  } else {
    const uint32_t repetitions = std::max(1u, request.repetitions());
    known = batch.mode().empty() && batch.repetition() < repetitions &&
            std::find(request.batches().begin(), request.batches().end(),
                      batch.batch()) != request.batches().end();
  }
  if (!known) {
    return Rejection{
        WorkerRejection::kUnknownBatch,
        absl::StrCat("batch ", batch.batch(), " repetition ",
                     batch.repetition(), " mode \"", Cut(batch.mode(), 32),
                     "\" is not a run of probe ", probe.id())};
  }
  for (const auto& [field, has, value] :
       {std::tuple<const char*, bool, double>{"peak_allocated_gb",
                                              batch.has_peak_allocated_gb(),
                                              batch.peak_allocated_gb()},
        {"peak_reserved_gb", batch.has_peak_reserved_gb(),
         batch.peak_reserved_gb()},
        {"device_peak_gb", batch.has_device_peak_gb(), batch.device_peak_gb()},
        {"device_context_gb", batch.has_device_context_gb(),
         batch.device_context_gb()}}) {
    if (!has) continue;
    if (auto bad = CheckPeak(field, value, card_memory_gb)) return bad;
  }
  // Per phase: bounded here; names and the order allocated <= reserved <=
  // device are checked on the run it makes (CheckMeasuredRun).
  constexpr int kMaxPhases = static_cast<int>(v1::JobPhase_MAX);
  if (batch.phases_size() > kMaxPhases) {
    return Rejection{WorkerRejection::kMalformed,
                     absl::StrCat("phases has ", batch.phases_size(),
                                  " entries; allowed up to ", kMaxPhases,
                                  " (each phase at most once)")};
  }
  for (int i = 0; i < batch.phases_size(); ++i) {
    const v1::PhaseMeasurement& phase = batch.phases(i);
    for (const auto& [field, has, value] :
         {std::tuple<const char*, bool, double>{
              "allocated_gb", phase.has_allocated_gb(), phase.allocated_gb()},
          {"reserved_gb", phase.has_reserved_gb(), phase.reserved_gb()},
          {"device_gb", phase.has_device_gb(), phase.device_gb()}}) {
      if (!has) continue;
      const std::string at = absl::StrCat("phases[", i, "].", field);
      if (auto bad = CheckPeak(at.c_str(), value, card_memory_gb)) return bad;
    }
  }
  // A multi-GPU run's per-rank figures: bounded here; each value is
  // checked where the run is made (MeasuredRunFor excludes a bad one).
  if (batch.rank_peaks_gb_size() > kMaxGpusPerWorker) {
    return Rejection{
        WorkerRejection::kMalformed,
        absl::StrCat("rank_peaks_gb has ", batch.rank_peaks_gb_size(),
                     " entries; allowed up to ", kMaxGpusPerWorker,
                     " (one per rank of one node)")};
  }
  if (batch.has_host_peak_gb() &&
      !(std::isfinite(batch.host_peak_gb()) && batch.host_peak_gb() >= 0 &&
        batch.host_peak_gb() <= kMaxHostMemoryGb)) {
    return Implausible(absl::StrCat("host_peak_gb = ", batch.host_peak_gb(),
                                    "; allowed 0..", kMaxHostMemoryGb, " GB"));
  }
  if (batch.oom() && batch.has_peak_allocated_gb()) {
    return Implausible(
        absl::StrCat("oom with peak_allocated_gb = ", batch.peak_allocated_gb(),
                     "; a run that ran out of memory has no measured peak"));
  }
  // The bounds a Refit holds a stored run to (base/value_bounds.h).
  for (const auto& [field, has, value, bound] :
       {std::tuple<const char*, bool, double, const ValueBound&>{
            "step_seconds", batch.has_step_seconds(), batch.step_seconds(),
            kStepSecondsBound},
        {"energy_j", batch.has_energy_j(), batch.energy_j(),
         kMeasuredRunEnergyBound}}) {
    if (!has) continue;
    if (absl::Status ok = CheckBound(value, field, bound); !ok.ok()) {
      return Implausible(std::string(ok.message()));
    }
  }
  if (batch.error().size() > kMaxNoteLength) {
    return Implausible(absl::StrCat("error is ", batch.error().size(),
                                    " characters; allowed up to ",
                                    kMaxNoteLength));
  }
  return std::nullopt;
}

std::optional<Rejection> CheckStoredRuns(
    const std::optional<v1::MeasuredRun>& run,
    const std::optional<v1::EnergyRun>& energy, const ModelCatalog& catalog) {
  absl::Status valid = absl::OkStatus();
  if (run.has_value()) valid = CheckMeasuredRun(*run, catalog, "run");
  if (valid.ok() && energy.has_value()) {
    valid = CheckEnergyRun(*energy, "energy run");
  }
  if (valid.ok()) return std::nullopt;
  return Implausible(std::string(valid.message()));
}

std::string StoredResultKey(const std::string& probe_id,
                            const std::string& assignment_id,
                            const v1::BatchResult& batch) {
  return absl::StrCat(probe_id, "/", assignment_id, "/", batch.batch(), "/",
                      batch.repetition(), "/", batch.mode());
}

std::optional<HelloRefusal> RefuseHello(
    const std::string& id, const std::string& identity, bool stopping,
    bool registered, const std::optional<HeldConnection>& held,
    int64_t heartbeat_ms) {
  if (stopping) {
    return HelloRefusal{
        WorkerRejection::kMalformed,
        absl::UnavailableError("hello refused: the planner is shutting down")};
  }
  if (registered) {
    return HelloRefusal{WorkerRejection::kDuplicateHello,
                        absl::FailedPreconditionError(
                            "hello refused: sent twice on one stream")};
  }
  if (!held.has_value()) return std::nullopt;
  if (!held->identity.empty() && !identity.empty()) {
    // Both proved who they are: only the same identity replaces.
    if (held->identity == identity) return std::nullopt;
    return HelloRefusal{
        WorkerRejection::kIdentityMismatch,
        absl::PermissionDeniedError(absl::StrCat(
            "worker ", id, " is connected as '", Cut(held->identity), "'; '",
            Cut(identity), "' may not replace it"))};
  }
  // Open planner: anyone can claim an id, so a live connection keeps it; a
  // silent one (a half-open TCP connection) gives way.
  if (held->silent_ms > 2 * heartbeat_ms) return std::nullopt;
  return HelloRefusal{
      WorkerRejection::kAlreadyConnected,
      absl::AlreadyExistsError(absl::StrCat(
          "worker ", id, " is connected and alive from ", held->peer,
          "; a second connection may replace it only after 2 heartbeats of "
          "silence"))};
}

std::vector<std::string> StampCatalogGpus(v1::WorkerHello* hello) {
  std::vector<std::string> kinds;
  for (v1::GpuDevice& gpu : *hello->mutable_gpus()) {
    gpu.set_catalog_gpu(CatalogGpuForDriverName(gpu.name()));
    kinds.push_back(gpu.catalog_gpu());
  }
  return kinds;
}

std::map<std::string, v1::Target> NodeTargets(
    const std::vector<v1::WorkerHello>& hellos, bool include_simulated) {
  std::map<std::string, v1::Target> inventory;
  for (const v1::WorkerHello& hello : hellos) {
    if (hello.gpus().empty()) continue;
    const std::string& node =
        hello.node_name().empty() ? hello.hostname() : hello.node_name();
    if (node.empty() || inventory.count(node) != 0) continue;
    // A simulated card names no real node's GPU unless asked.
    const v1::GpuDevice* first = nullptr;
    std::string kind;
    for (const v1::GpuDevice& device : hello.gpus()) {
      if (device.simulated() && !include_simulated) continue;
      if (first == nullptr) first = &device;
      kind = CatalogGpuForDriverName(device.name());
      if (!kind.empty()) break;
    }
    if (first == nullptr) continue;
    v1::Target target;
    if (!kind.empty()) {
      target.set_gpu(kind);
    } else {
      target.set_memory_gb(static_cast<double>(first->memory_bytes()) / 1e9);
    }
    inventory[node] = target;
  }
  return inventory;
}

v1::PlannerMessage RejectedMessage(WorkerRejection reason,
                                   const std::string& key,
                                   const std::string& detail) {
  v1::PlannerMessage message;
  v1::Rejected& rejected = *message.mutable_rejected();
  rejected.set_key(key.substr(0, kMaxResultKeyLength));
  rejected.set_reason(WorkerRejectionName(reason));
  rejected.set_detail(detail);
  return message;
}

RejectionLog::RejectionLog(int lines_per_second) : limiter_(lines_per_second) {}

void RejectionLog::Note(WorkerRejection reason, const std::string& worker,
                        const std::string& identity, const std::string& peer,
                        const std::string& key, const std::string& detail) {
  const std::string kind =
      absl::StrCat(WorkerRejectionName(reason), " ", Cut(identity));
  int64_t suppressed = 0;
  if (!limiter_.Admit(kind, &suppressed)) return;
  if (suppressed > 0) {
    spdlog::warn(
        "event=log_suppressed kind=worker_message_rejected reason={} "
        "identity={} count={} message=\"suppressed {} similar\"",
        WorkerRejectionName(reason), Cut(identity), suppressed, suppressed);
  }
  spdlog::warn(
      "event=worker_message_rejected worker={} identity={} peer={} "
      "reason={} key={} detail=\"{}\"",
      Cut(worker), Cut(identity), peer, WorkerRejectionName(reason), Cut(key),
      Cut(detail, 400));
}

std::string Cut(const std::string& text, size_t max) {
  if (text.size() <= max) return text;
  return absl::StrCat(text.substr(0, max), "...");
}

}  // namespace headroom
