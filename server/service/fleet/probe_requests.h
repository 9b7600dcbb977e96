#ifndef HEADROOM_SERVER_SERVICE_FLEET_PROBE_REQUESTS_H_
#define HEADROOM_SERVER_SERVICE_FLEET_PROBE_REQUESTS_H_

// What an operator (or the planner's learner) may ask a probe to be, and
// the queued probe a request becomes. Plain functions over the API
// messages (OutstandingLearning reads the store); FleetService stores the
// probe and wakes the dispatcher.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/fleet.pb.h"
#include "headroom/v1/planner.pb.h"
#include "server/store/store.h"

namespace headroom {

// Bounds of a SubmitProbeRequest.
inline constexpr int kMaxProbeBatches = 64;
inline constexpr uint32_t kMaxRepetitions = 10;
inline constexpr uint32_t kMaxSteps = 1000;
// expires_s at most 30 days.
inline constexpr uint32_t kMaxExpiresS = 30 * 24 * 3600;

// The GPUs of one node a probe may ask for at once (setup.gpus).
inline constexpr uint32_t kMaxProbeGpus = 16;

// OK when the request's parallel setup can run as one probe on one node:
// setup.gpus 0..kMaxProbeGpus (0 and 1: one GPU), setup.nodes 0 or 1,
// setup.gpus_per_node 0 or at least setup.gpus; with more than one GPU the
// "sim" executor runs every strategy, "torch" (and an empty executor, which
// may reach a torch worker) DDP and FSDP only (ZeRO needs DeepSpeed), "cuda"
// none, and autotune probes none. INVALID_ARGUMENT names the field and the
// allowed values.
absl::Status CheckProbeParallel(const v1::SubmitProbeRequest& request);

// INVALID_ARGUMENT when `request` (a probe, energy probe or autotune
// request) is over kMaxStoredProbeRequestBytes, the most a stored probe
// request may hold. The handlers check it before a request waits for the
// store, so a queue of oversized requests holds no memory.
absl::Status CheckProbeRequestBytes(const google::protobuf::Message& request);

// The probe `request` asks for, not yet stored: its request, the model
// resolved against `catalog` (template name and spec), a catalog GPU for a
// gpu placement, created at `now_ms`. INVALID_ARGUMENT (NOT_FOUND for an
// unknown template or GPU) names the field and the allowed range: a
// request over `max_request_bytes` or the stored-request bound, an empty
// placement, a bad worker id, executor, batch list, repetitions, steps,
// batch timeout or expiry, a parallel setup one node cannot run
// (CheckProbeParallel), a setup CheckFit refuses (ValidateSetup), a spec
// whose parameter count overflows or passes kMaxParams (ValidateSpec).
absl::StatusOr<v1::Probe> NewProbe(const v1::SubmitProbeRequest& request,
                                   const ModelCatalog& catalog,
                                   size_t max_request_bytes, int64_t now_ms);

// Bounds of a SubmitEnergyProbeRequest (fleet.proto).
inline constexpr uint32_t kDefaultPromptTokens = 64;
inline constexpr uint32_t kDefaultNewTokens = 128;
inline constexpr uint32_t kMaxGenerationTokens = 8192;

// The probe request an energy probe becomes: batch [1], the quantizations
// canonical and in fp16, nf4, int8 order (all three when none is named),
// token counts defaulted, one warm-up generation. INVALID_ARGUMENT names
// the field and the allowed values: an unknown or repeated quantization,
// token counts out of range, an executor other than torch, sim or empty.
// The rest (model, placement, repetitions, timeout, expiry) NewProbe
// checks.
absl::StatusOr<v1::SubmitProbeRequest> EnergyProbeRequest(
    const v1::SubmitEnergyProbeRequest& request);

// OK when an operator's SubmitProbe may carry `request`: the fields only
// other calls set (autotune: SubmitAutotune; learn_key: the planner's
// learner; energy: SubmitEnergyProbe) are empty. INVALID_ARGUMENT names
// the field and where it belongs.
absl::Status CheckOperatorProbeRequest(const v1::SubmitProbeRequest& request);

// The learning probe the planner queues for a CheckFit `request`: its model
// and setup at `batches`, on `worker` with `executor`, one repetition of
// few steps (the peak of a training step is reached in the first), marked
// with `learn_key`.
v1::SubmitProbeRequest LearningProbeRequest(
    const v1::CheckFitRequest& request, const std::vector<uint32_t>& batches,
    const std::string& worker, const std::string& executor,
    const std::string& learn_key);

// The id of the queued or running learning probe for `learn_key` among the
// first 1000 of each state, if any.
absl::StatusOr<std::optional<std::string>> OutstandingLearning(
    Store* store, const std::string& learn_key);

// The page size a ListProbes request asks for: page_size, or for a client
// from before paging that sends limit alone, limit (at most kMaxPageSize).
// INVALID_ARGUMENT for a limit over 10000.
absl::StatusOr<int32_t> ProbesPageSize(const v1::ListProbesRequest& request);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_PROBE_REQUESTS_H_
