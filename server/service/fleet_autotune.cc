#include "server/service/fleet_autotune.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/microbatch/cache_key.h"
#include "core/microbatch/plan.h"
#include "core/microbatch/select.h"

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

}  // namespace headroom
