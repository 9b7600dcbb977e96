#ifndef HEADROOM_SERVER_SERVICE_FLEET_AUTOTUNE_H_
#define HEADROOM_SERVER_SERVICE_FLEET_AUTOTUNE_H_

// The planner's side of an autotune run on the fleet (Fleet.SubmitAutotune;
// README.md, "Energy, microbatches and density"): the plan an autotune probe
// carries, the assignment a worker searches with, and the check of the record
// the worker sends back. Plain functions over the API messages; FleetService
// does the I/O.

#include <string>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/fleet.pb.h"

namespace headroom {

// Most candidates one autotune probe may search (a probe's batch limit).
inline constexpr int kMaxAutotuneCandidates = 64;

// Plans `request.plan` on the catalog GPU `gpu` with `factor_set`, exactly
// as Microbatch/PlanMicrobatch does (its target replaced by `gpu`, its cache
// key dropped); the policy "" becomes max_batch. INVALID_ARGUMENT names the
// field for an unknown policy, a context of 0 (throughput and the record
// need tokens per sample), more than kMaxAutotuneCandidates candidates, the
// cuda executor (it measures no microbatch), or whatever PlanMicrobatch
// refuses.
absl::StatusOr<v1::AutotunePlan> PlanAutotune(
    const v1::SubmitAutotuneRequest& request, const std::string& gpu,
    const ModelCatalog& catalog, const v1::FactorSet& factor_set);

// The probe request an autotune is queued as: the model, the setup the
// plan predicted with (MicrobatchSetup), the candidates as batches, the
// placement, executor, steps and timeout of `request`, and `autotune`.
v1::SubmitProbeRequest AutotuneProbeRequest(
    const v1::SubmitAutotuneRequest& request, const v1::AutotunePlan& autotune);

// Fills the autotune part of `assignment` for `probe` (an autotune probe):
// the plan, runs = every candidate and mode not measured yet (eager first),
// measured = the probe's stored results, so a re-queued search resumes.
void FillAutotuneAssignment(const v1::Probe& probe, v1::Assignment* assignment);

// OK when the `record` a worker sent for `probe` is one the planner can
// stand behind: its key is AutotuneKeyFor(the probe's plan, its spec, `gpu`,
// `framework_versions`) (the worker's hello); its budget and reserve are the
// plan's; every measurement is a stored result of the probe with the same
// peak and seconds, every "oom" failure a stored OOM; its selection is what
// SelectMicrobatch recomputes. INVALID_ARGUMENT says what differs.
absl::Status ValidateAutotuneRecord(
    const v1::AutotuneRecord& record, const v1::Probe& probe,
    const v1::GpuDevice& gpu,
    const google::protobuf::Map<std::string, std::string>& framework_versions);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_AUTOTUNE_H_
