#ifndef HEADROOM_CORE_CALIBRATION_REGIMES_H_
#define HEADROOM_CORE_CALIBRATION_REGIMES_H_

// Regimes: factor sets fitted per GPU, adopted only where the held-out
// error on that GPU's runs says the GPU behaves differently.

#include <vector>

#include "absl/status/status.h"
#include "core/calibration/calibration_page.h"
#include "core/calibration/factor_fit.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// A GPU is considered when it has at least this many usable runs, of at
// least kMinRegimeTemplates templates, with kMinRegimeLarge measured runs
// of at least min_gb (the upper bound needs them).
inline constexpr int kMinRegimeRuns = 20;
inline constexpr int kMinRegimeTemplates = 5;
inline constexpr int kMinRegimeLarge = 5;

// For each GPU with enough runs, fits its own factors, predicts its runs
// held out by template within the GPU, and compares with `global_heldout`
// (the global set's held-out predictions, one per run) on the same runs. The
// regime is adopted when its held-out median absolute error is lower, its
// saidFitsButOom no higher, and, at coverage 0.95 with the k each would
// answer with (its own, or `set`'s k95), it calls no more checks of runs
// that did not fit FITS. Appends every considered regime to `set`.
// `samples` are the usable runs' samples in run order (SamplesFor).
absl::Status AddRegimes(const std::vector<v1::MeasuredRun>& runs,
                        const std::vector<FitSample>& samples,
                        const Predictions& global_heldout,
                        const FitOptions& options, const PageRules& rules,
                        v1::FactorSet* set);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_REGIMES_H_
