#ifndef HEADROOM_CORE_EVIDENCE_RUN_CHECKS_H_
#define HEADROOM_CORE_EVIDENCE_RUN_CHECKS_H_

// What one run must be before it is stored as evidence, whichever way it
// arrives: a worker's probe result (FleetService), a Refit import, a
// RefitEnergy import. One function per kind of run, over the value table
// (base/value_bounds.h) and the rules CheckFit reads a spec and a setup
// by, so a run one path refuses every path refuses.

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "base/value_bounds.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/model.pb.h"

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
// oom_on_gb unless excluded; the memory figures in the device's order
// (CheckMemoryOrder). INVALID_ARGUMENT (NOT_FOUND for an unknown
// template or GPU) begins with `where` and the field, and says what is
// allowed.
absl::Status CheckMeasuredRun(const v1::MeasuredRun& run,
                              const ModelCatalog& catalog,
                              absl::string_view where);

// Every name PhaseMeasurement.phase may hold (PhaseName, phases.h, of each
// JobPhase but UNSPECIFIED), in JobPhase order, joined by ", " (for errors).
std::string PhaseMeasurementNames();
// Whether `name` is one of them.
bool IsPhaseMeasurementName(absl::string_view name);

// OK when the run's memory figures are in the order the device holds them:
// peak_reserved_gb at least measured_peak_gb, device_peak_gb at least
// peak_reserved_gb (each where both are present); device_context_gb and
// every phase figure within `peak_on_card`; each phase a known name, at
// most once, with reserved_gb at least allocated_gb and device_gb at least
// reserved_gb. INVALID_ARGUMENT names `where`, the fields and both values.
absl::Status CheckMemoryOrder(const v1::MeasuredRun& run,
                              const std::string& where,
                              const ValueBound& peak_on_card);

// OK when the energy run (one generation window) `run` may be stored: its
// strings within input_limits.h, a catalog GPU, a known quantization,
// params_b in (0, kMaxParamsB], tokens_generated 1..kMaxRunTokens, window,
// idle power, tokens per second and energy within the table's bounds.
// INVALID_ARGUMENT (NOT_FOUND for an unknown GPU) begins with `where` and
// the model, and names the field and the allowed range.
absl::Status CheckEnergyRun(const v1::EnergyRun& run, absl::string_view where);

}  // namespace headroom

#endif  // HEADROOM_CORE_EVIDENCE_RUN_CHECKS_H_
