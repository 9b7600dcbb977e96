#ifndef HEADROOM_SERVER_SERVICE_FLEET_AUTOTUNE_H_
#define HEADROOM_SERVER_SERVICE_FLEET_AUTOTUNE_H_

// The planner's side of an autotune run on the fleet (Fleet.SubmitAutotune;
// README.md, "Energy, microbatches and density"): the plan an autotune probe
// carries, the assignment a worker searches with, and the check of the record
// the worker sends back, and the autotune cache read and written for them
// (FindCachedAutotune, AcceptAutotuneRecord). No gRPC; FleetService
// answers the calls.

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/fleet.pb.h"
#include "server/store/store.h"

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

// The catalog GPU an autotune request's plan is for: the placement's GPU
// kind, or the pinned worker's first catalog card among the known
// `workers` (Store::ListWorkers). NOT_FOUND for an unknown kind (naming
// gpu) or a worker not known with a catalog GPU; INVALID_ARGUMENT for a
// bad worker id or an empty placement.
absl::StatusOr<std::string> AutotuneGpu(
    const v1::SubmitAutotuneRequest& request,
    const std::vector<v1::WorkerStatus>& workers);

// A record in the autotune cache that stands for `request`'s search,
// planned as `autotune` for `spec` on the catalog GPU `gpu`.
struct CachedAutotune {
  std::string id;  // CacheKeyId of its key
  v1::AutotuneRecord record;
};

// The record stored under the key some known worker of `workers` that
// could run the request (its placement's worker, its executor) would
// write for a card of kind `gpu` (AutotuneKeyFor with the worker's
// framework versions), the first found; nullopt when none is stored.
absl::StatusOr<std::optional<CachedAutotune>> FindCachedAutotune(
    Store* store, const v1::SubmitAutotuneRequest& request,
    const v1::AutotunePlan& autotune, const v1::ModelSpec& spec,
    const std::string& gpu, const std::vector<v1::WorkerStatus>& workers);

// Answers Fleet.SubmitAutotune: the request within `max_request_bytes`,
// the catalog GPU its plan is for (AutotuneGpu, among the stored
// workers), the plan under the store's current factor set (PlanAutotune;
// FAILED_PRECONDITION when none is current), then the record cached for
// it (FindCachedAutotune) or, when none is, the probe that searches,
// queued by `submit`.
absl::StatusOr<v1::SubmitAutotuneResponse> AnswerAutotune(
    const v1::SubmitAutotuneRequest& request, Store* store,
    const ModelCatalog& catalog, size_t max_request_bytes,
    const std::function<
        absl::StatusOr<v1::Probe>(const v1::SubmitProbeRequest&)>& submit);

// Checks the record of an autotune probe's final `result` against `probe`
// and the worker's `hello` (the card the result names by index, its
// framework versions: ValidateAutotuneRecord), stores one with a selection
// in the autotune cache, marked as measured by the probe (a client's put
// does not replace it without force), and returns it as JSON for the
// probe's details_json. INVALID_ARGUMENT says what is wrong: no record, a
// GPU index not in the hello, a record that differs.
absl::StatusOr<std::string> AcceptAutotuneRecord(Store* store,
                                                 const v1::Probe& probe,
                                                 const v1::ProbeResult& result,
                                                 const v1::WorkerHello& hello);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_AUTOTUNE_H_
