#ifndef HEADROOM_CORE_CALIBRATION_EVALUATE_H_
#define HEADROOM_CORE_CALIBRATION_EVALUATE_H_

// Predicting new runs with a factor set exactly as the service would, and
// scoring the predictions (headroom calib eval).

#include <vector>

#include "absl/status/statusor.h"
#include "core/calibration/calibration_page.h"
#include "core/catalog/model_catalog.h"
#include "core/evidence/evidence.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// The question a measured run answers: its model (its spec, else its
// catalog template), its setup (else the calibration setup), its batch, and
// its card (the catalog GPU, else a bare `unknown_card_gb`); simulated
// evidence asked for exactly when the run is simulated.
v1::CheckFitRequest RequestForRun(const v1::MeasuredRun& run,
                                  double unknown_card_gb);

// Predicts every row of `test` as CheckFit would with `set` (the row's
// setup or the calibration setup, on the row's GPU, k at `coverage`: 0.9 or
// 0.95) and summarizes them as column "ours". With `evidence`, a row whose
// model key it holds is anchored on those runs (the train file's). Unusable
// rows get a prediction but stay out of the summary. NOT_FOUND names a row
// whose template the catalog lacks.
absl::StatusOr<v1::EvalReport> EvaluateOn(
    const v1::FactorSet& set, const std::vector<v1::MeasuredRun>& test,
    const ModelCatalog& catalog, double coverage, const PageRules& rules,
    const Evidence* evidence = nullptr);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_EVALUATE_H_
