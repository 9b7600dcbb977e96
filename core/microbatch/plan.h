#ifndef HEADROOM_CORE_MICROBATCH_PLAN_H_
#define HEADROOM_CORE_MICROBATCH_PLAN_H_

// Microbatch/PlanMicrobatch (README.md, "Energy, microbatches and density"):
// the predicted peak of every microbatch candidate before anything runs, and
// which candidates a worker must measure because the prediction cannot decide
// them. Plain C++ over the API messages, no gRPC, no I/O.

#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "core/memory/fit_verdict.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/microbatch.pb.h"

namespace headroom {

// Most candidates one request may plan.
inline constexpr int kMaxMicrobatchCandidates = 256;

// Predicted peak in GB (10^9 bytes) of one microbatch.
using PeakFunction = std::function<double(uint64_t microbatch)>;

// The setup the memory model predicts with: request.setup with positions =
// context (when set) and fused_attention from attention_backend (when set).
// INVALID_ARGUMENT for an unknown backend.
absl::StatusOr<v1::TrainingSetup> MicrobatchSetup(
    const v1::PlanMicrobatchRequest& request);

// Plans every candidate of `request` with the predictor `peak_gb`, ignoring
// request.model. Budget = vram_fraction * card memory - reserve_gb (GB; the
// card from the GPU catalog or memory_gb). Each candidate's verdict is
// Verdict(peak, budget, rule): FITS is skipped (predicted fit), DOES_NOT_FIT
// is skipped in eager mode (predicted OOM), BORDERLINE is measured. Compiled
// mode takes the eager prediction as an upper bound of its own peak (the
// reference record's compiled peaks are 38-62 % below eager), so a compiled
// candidate is skipped only as a predicted fit and otherwise measured.
// INVALID_ARGUMENT names the field (no or repeated candidates, a candidate
// outside 1..global_batch, vram_fraction outside (0, 1], negative reserve,
// no budget left, bad rule); NOT_FOUND for an unknown GPU.
absl::StatusOr<v1::PlanMicrobatchResponse> PlanMicrobatch(
    const v1::PlanMicrobatchRequest& request, const PeakFunction& peak_gb,
    const VerdictRule& rule);

// Plans `request` with the memory model: the template from `catalog` or the
// request's own spec (validated), BuildProfile with MicrobatchSetup, PeakAt
// with the factor set's factors, k = k95 and its headroom. Fills model,
// params and factor_set_version.
absl::StatusOr<v1::PlanMicrobatchResponse> PlanMicrobatch(
    const v1::PlanMicrobatchRequest& request, const ModelCatalog& catalog,
    const v1::FactorSet& factor_set);

}  // namespace headroom

#endif  // HEADROOM_CORE_MICROBATCH_PLAN_H_
