#include "server/service/fleet_autotune.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/frontends/frontend_registry.h"
#include "core/microbatch/cache_key.h"
#include "core/microbatch/plan.h"
#include "core/microbatch/select.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

bool Near(double a, double b) {
  return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b));
}

const v1::BatchResult* StoredResult(const v1::Probe& probe, uint32_t batch,
                                    const std::string& mode) {
  for (const v1::BatchResult& r : probe.results()) {
    if (r.batch() == batch && r.mode() == mode && r.repetition() == 0) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<v1::AutotunePlan> PlanAutotune(
    const v1::SubmitAutotuneRequest& request, const std::string& gpu,
    const ModelCatalog& catalog, const v1::FactorSet& factor_set) {
  v1::AutotunePlan autotune;
  std::string policy = request.policy();
  if (policy.empty()) policy = std::string(kMaxBatchPolicy);
  if (policy != kMaxBatchPolicy && policy != kMaxThroughputPolicy) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy = '", policy.substr(0, 32), "' is unknown; allowed ",
        kMaxBatchPolicy, " (also when empty), ", kMaxThroughputPolicy));
  }
  if (request.executor() == "cuda") {
    return absl::InvalidArgumentError(
        "executor = \"cuda\" measures no microbatch; allowed \"sim\", "
        "\"torch\" or empty");
  }
  const v1::PlanMicrobatchRequest& plan_request = request.plan();
  if (plan_request.context() == 0) {
    return absl::InvalidArgumentError(
        "plan.context = 0; an autotune needs the tokens per sample "
        "(throughput and the record's settings are per token)");
  }
  if (plan_request.microbatch_candidates_size() > kMaxAutotuneCandidates) {
    return absl::InvalidArgumentError(absl::StrCat(
        "plan.microbatch_candidates has ",
        plan_request.microbatch_candidates_size(),
        " entries; an autotune probe allows 1..", kMaxAutotuneCandidates));
  }
  v1::PlanMicrobatchRequest& planned = *autotune.mutable_request();
  planned = plan_request;
  planned.set_gpu(gpu);
  planned.clear_cache_key();
  ASSIGN_OR_RETURN(*autotune.mutable_plan(),
                   PlanMicrobatch(planned, catalog, factor_set));
  autotune.set_policy(policy);
  return autotune;
}

v1::SubmitProbeRequest AutotuneProbeRequest(
    const v1::SubmitAutotuneRequest& request,
    const v1::AutotunePlan& autotune) {
  v1::SubmitProbeRequest probe;
  const v1::PlanMicrobatchRequest& plan = autotune.request();
  if (plan.has_spec()) {
    *probe.mutable_model()->mutable_spec() = plan.spec();
  } else {
    probe.mutable_model()->set_template_(plan.template_());
  }
  // PlanAutotune accepted the request, so the setup is valid.
  absl::StatusOr<v1::TrainingSetup> setup = MicrobatchSetup(plan);
  *probe.mutable_setup() = setup.ok() ? *setup : plan.setup();
  for (uint32_t c : plan.microbatch_candidates()) probe.add_batches(c);
  if (request.placement_case() == v1::SubmitAutotuneRequest::kWorker) {
    probe.set_worker(request.worker());
  } else {
    probe.set_gpu(request.gpu());
  }
  probe.set_executor(request.executor());
  probe.set_warmup_steps(request.warmup_steps());
  probe.set_steps(request.steps());
  probe.set_batch_timeout_s(request.batch_timeout_s());
  *probe.mutable_autotune() = autotune;
  return probe;
}

void FillAutotuneAssignment(const v1::Probe& probe,
                            v1::Assignment* assignment) {
  const v1::AutotunePlan& autotune = probe.request().autotune();
  *assignment->mutable_autotune() = autotune;
  *assignment->mutable_setup() = probe.request().setup();
  assignment->clear_runs();
  assignment->clear_measured();
  for (const v1::PlannedMicrobatch& planned : autotune.plan().candidates()) {
    if (StoredResult(probe, planned.microbatch(), planned.mode()) != nullptr) {
      continue;
    }
    v1::BatchRun* run = assignment->add_runs();
    run->set_batch(planned.microbatch());
    run->set_repetition(0);
    run->set_mode(planned.mode());
  }
  for (const v1::BatchResult& result : probe.results()) {
    *assignment->add_measured() = result;
  }
}

absl::Status ValidateAutotuneRecord(
    const v1::AutotuneRecord& record, const v1::Probe& probe,
    const v1::GpuDevice& gpu,
    const google::protobuf::Map<std::string, std::string>& framework_versions) {
  const v1::AutotunePlan& autotune = probe.request().autotune();
  const v1::AutotuneCacheKey expected =
      AutotuneKeyFor(autotune, probe.spec(), gpu, framework_versions);
  if (CacheKeyBytes(record.cache_key()) != CacheKeyBytes(expected)) {
    return absl::InvalidArgumentError(
        absl::StrCat("record.cache_key (id ", CacheKeyId(record.cache_key()),
                     ") is not the key of this probe on this worker (id ",
                     CacheKeyId(expected), ")"));
  }
  if (record.selection_policy() != autotune.policy()) {
    return absl::InvalidArgumentError(
        absl::StrCat("record.selection_policy = '", record.selection_policy(),
                     "'; the probe asked for '", autotune.policy(), "'"));
  }
  if (!Near(record.budget_gb(),
            autotune.plan().budget_gb() * kRecordGibPerGb) ||
      !Near(record.reserve_gb(),
            autotune.request().reserve_gb() * kRecordGibPerGb)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record.budget_gb = ", record.budget_gb(),
        " and reserve_gb = ", record.reserve_gb(), " GiB are not the plan's ",
        autotune.plan().budget_gb() * kRecordGibPerGb, " and ",
        autotune.request().reserve_gb() * kRecordGibPerGb, " GiB"));
  }
  for (int i = 0; i < record.measurements_size(); ++i) {
    const v1::MicrobatchMeasurement& m = record.measurements(i);
    const v1::BatchResult* stored =
        StoredResult(probe, m.microbatch(), m.mode());
    if (stored == nullptr || stored->oom() || !stored->error().empty() ||
        !Near(m.peak_gb(), stored->peak_allocated_gb() * kRecordGibPerGb) ||
        !Near(m.microbatch_seconds(), stored->step_seconds())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "record.measurements[", i, "] (", m.mode(), " microbatch ",
          m.microbatch(), ") is not a result this probe stored"));
    }
  }
  for (int i = 0; i < record.failures_size(); ++i) {
    const v1::MicrobatchFailure& f = record.failures(i);
    if (f.reason() != "oom") continue;
    const v1::BatchResult* stored =
        StoredResult(probe, f.microbatch(), f.mode());
    if (stored == nullptr || !stored->oom()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "record.failures[", i, "] says ", f.mode(), " microbatch ",
          f.microbatch(), " ran out of memory; no stored result says so"));
    }
  }
  ASSIGN_OR_RETURN(v1::MicrobatchSelection selection,
                   SelectMicrobatch(record, autotune.policy()));
  const bool same =
      selection.has_selected() == record.has_selected() &&
      (!selection.has_selected() ||
       (selection.selected().microbatch() == record.selected().microbatch() &&
        selection.selected().mode() == record.selected().mode()));
  if (!same) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record.selected (", record.selected().mode(), " ",
        record.selected().microbatch(), ") is not what ", autotune.policy(),
        " selects from its measurements (",
        selection.has_selected() ? selection.selected().mode() : "none", " ",
        selection.selected().microbatch(), ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> AutotuneGpu(
    const v1::SubmitAutotuneRequest& request,
    const std::vector<v1::WorkerStatus>& workers) {
  switch (request.placement_case()) {
    case v1::SubmitAutotuneRequest::kGpu: {
      absl::StatusOr<GpuInfo> info = FindGpu(request.gpu());
      if (!info.ok()) {
        return absl::Status(info.status().code(),
                            absl::StrCat("gpu: ", info.status().message()));
      }
      return info->name;
    }
    case v1::SubmitAutotuneRequest::kWorker: {
      RETURN_IF_ERROR(CheckFleetId(request.worker(), "worker"));
      std::string gpu;
      for (const v1::WorkerStatus& w : workers) {
        if (w.hello().worker_id() != request.worker()) continue;
        for (const v1::GpuDevice& device : w.hello().gpus()) {
          if (gpu.empty()) gpu = CatalogGpuForDriverName(device.name());
        }
      }
      if (gpu.empty()) {
        return absl::NotFoundError(
            absl::StrCat("worker '", request.worker(),
                         "' is not known with a catalog GPU; see ListWorkers"));
      }
      return gpu;
    }
    case v1::SubmitAutotuneRequest::PLACEMENT_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "placement is empty; set gpu (a catalog GPU kind such as \"L4\") "
      "or worker (a worker id from ListWorkers)");
}

absl::StatusOr<std::optional<CachedAutotune>> FindCachedAutotune(
    Store* store, const v1::SubmitAutotuneRequest& request,
    const v1::AutotunePlan& autotune, const v1::ModelSpec& spec,
    const std::string& gpu, const std::vector<v1::WorkerStatus>& workers) {
  for (const v1::WorkerStatus& w : workers) {
    const v1::WorkerHello& hello = w.hello();
    if (request.placement_case() == v1::SubmitAutotuneRequest::kWorker &&
        hello.worker_id() != request.worker()) {
      continue;
    }
    if (!request.executor().empty() &&
        std::find(hello.executors().begin(), hello.executors().end(),
                  request.executor()) == hello.executors().end()) {
      continue;
    }
    for (const v1::GpuDevice& device : hello.gpus()) {
      if (CatalogGpuForDriverName(device.name()) != gpu) continue;
      const v1::AutotuneCacheKey key =
          AutotuneKeyFor(autotune, spec, device, hello.framework_versions());
      ASSIGN_OR_RETURN(
          std::optional<v1::AutotuneRecord> cached,
          store->FindAutotuneRecord(CacheKeyId(key), CacheKeyBytes(key)));
      if (!cached.has_value()) continue;
      spdlog::info("event=autotune_cache_reused id={} worker={}",
                   CacheKeyId(key), hello.worker_id());
      return CachedAutotune{CacheKeyId(key), *std::move(cached)};
    }
  }
  return std::nullopt;
}

absl::StatusOr<v1::SubmitAutotuneResponse> AnswerAutotune(
    const v1::SubmitAutotuneRequest& request, Store* store,
    const ModelCatalog& catalog, size_t max_request_bytes,
    const std::function<
        absl::StatusOr<v1::Probe>(const v1::SubmitProbeRequest&)>& submit) {
  RETURN_IF_ERROR(CheckSize(request, max_request_bytes));
  ASSIGN_OR_RETURN(std::vector<v1::WorkerStatus> workers, store->ListWorkers());
  ASSIGN_OR_RETURN(const std::string gpu, AutotuneGpu(request, workers));
  ASSIGN_OR_RETURN(std::optional<v1::FactorSet> factor_set,
                   store->CurrentFactorSet());
  if (!factor_set.has_value()) {
    return absl::FailedPreconditionError("no factor set is current yet");
  }
  ASSIGN_OR_RETURN(v1::AutotunePlan autotune,
                   PlanAutotune(request, gpu, catalog, *factor_set));
  const v1::SubmitProbeRequest probe_request =
      AutotuneProbeRequest(request, autotune);
  ASSIGN_OR_RETURN(
      ResolvedModel model,
      ResolveModelRef(probe_request.model(), probe_request.setup(), catalog));
  v1::SubmitAutotuneResponse out;
  *out.mutable_plan() = autotune.plan();
  // The key each known worker that could run it would write: a record
  // under any of them stands.
  ASSIGN_OR_RETURN(
      std::optional<CachedAutotune> cached,
      FindCachedAutotune(store, request, autotune, model.spec(), gpu, workers));
  if (cached.has_value()) {
    out.set_cache_reused(true);
    out.set_cache_id(cached->id);
    *out.mutable_cached() = std::move(cached->record);
    out.mutable_cached()->set_cache_reused(true);
    return out;
  }
  ASSIGN_OR_RETURN(*out.mutable_probe(), submit(probe_request));
  return out;
}

absl::StatusOr<std::string> AcceptAutotuneRecord(Store* store,
                                                 const v1::Probe& probe,
                                                 const v1::ProbeResult& result,
                                                 const v1::WorkerHello& hello) {
  if (!result.has_autotune_record()) {
    return absl::InvalidArgumentError("the final result has no record");
  }
  const v1::GpuDevice* gpu = nullptr;
  for (const v1::GpuDevice& device : hello.gpus()) {
    if (device.index() == result.gpu().index()) gpu = &device;
  }
  if (gpu == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu index ", result.gpu().index(), " is not in the worker's hello"));
  }
  const v1::AutotuneRecord& record = result.autotune_record();
  RETURN_IF_ERROR(
      ValidateAutotuneRecord(record, probe, *gpu, hello.framework_versions()));
  // Only a record with a selection is reusable; one without stays on the
  // probe.
  if (record.has_selected()) {
    const std::string id = CacheKeyId(record.cache_key());
    // Marked as the worker's, so a client's put does not replace it
    // without force.
    v1::AutotuneRecord measured = record;
    measured.set_measured_by_probe(probe.id());
    ASSIGN_OR_RETURN(bool replaced,
                     store->PutAutotuneRecord(
                         id, CacheKeyBytes(record.cache_key()), measured));
    spdlog::info(
        "event=autotune_record_stored id={} probe={} replaced={} "
        "microbatch={} mode={}",
        id, probe.id(), replaced, record.selected().microbatch(),
        record.selected().mode());
  }
  return ToJson(record, /*pretty=*/false);
}

}  // namespace headroom
