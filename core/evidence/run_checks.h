#ifndef HEADROOM_CORE_EVIDENCE_RUN_CHECKS_H_
#define HEADROOM_CORE_EVIDENCE_RUN_CHECKS_H_

// What one run must be before it is stored as evidence, whichever way it
// arrives: a worker's probe result (FleetService), a Refit import, a
// RefitEnergy import. One function per kind of run, over the value table
// (base/value_bounds.h) and the rules CheckFit reads a spec and a setup
// by, so a run one path refuses every path refuses.

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/energy.pb.h"

namespace headroom {

// A run as stored (an inline spec included).
inline constexpr size_t kMaxStoredRunBytes = 256 << 10;

// A run's params may differ from the count of its spec (the catalog's for a
// template) by this fraction at most: another framework may count a buffer
// or a tied weight differently (the reference runs of data/ are within 2 %
// of the templates' counts), never a different model.
inline constexpr double kParamsTolerance = 0.02;

// OK when the training run `run` may be stored: its strings within
// input_limits.h and the run within kMaxStoredRunBytes; a known
// measured_by; a valid spec (ValidateSpec: counts overflow-checked, at most
// kMaxParams) or a catalog template; a setup CheckFit accepts
// (ValidateSetup: GPU counts, known enums); batch 1..kMaxBatch; params
// 1..kMaxParams and within kParamsTolerance of the spec's own count; a
// catalog GPU, every peak (measured, device, per rank) and the OOM card
// within CardPeakBound of it; step time within kStepSecondsBound;
// timed_steps at most kMaxTimedSteps; energy within kMeasuredRunEnergyBound
// and at most kMaxCardWatts per GPU over its timed steps; other planners'
// predictions within kPredictedGbBound; exactly one of measured_peak_gb and
// oom_on_gb unless excluded. INVALID_ARGUMENT (NOT_FOUND for an unknown
// template or GPU) begins with `where` and the field, and says what is
// allowed.
absl::Status CheckMeasuredRun(const v1::MeasuredRun& run,
                              const ModelCatalog& catalog,
                              absl::string_view where);

// OK when the energy run (one generation window) `run` may be stored: its
// strings within input_limits.h, a catalog GPU, a known quantization,
// params_b in (0, kMaxParamsB], tokens_generated 1..kMaxRunTokens, window,
// idle power, tokens per second and energy within the table's bounds.
// INVALID_ARGUMENT (NOT_FOUND for an unknown GPU) begins with `where` and
// the model, and names the field and the allowed range.
absl::Status CheckEnergyRun(const v1::EnergyRun& run, absl::string_view where);

}  // namespace headroom

#endif  // HEADROOM_CORE_EVIDENCE_RUN_CHECKS_H_
