#ifndef HEADROOM_SERVER_CORE_CALIBRATION_EVALUATE_H_
#define HEADROOM_SERVER_CORE_CALIBRATION_EVALUATE_H_

// Predicting new runs with a factor set exactly as the service would, and
// scoring the predictions (headroom calib eval).

#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/calibration.pb.h"
#include "server/core/calibration/calibration_page.h"
#include "server/core/catalog/model_catalog.h"

namespace headroom {

// Predicts every row of `test` with `set` (the calibration setup, k at
// `coverage`: 0.9 or 0.95) and summarizes them as column "ours". Unusable
// rows get a prediction but stay out of the summary. NOT_FOUND names a row
// whose template the catalog lacks.
absl::StatusOr<v1::EvalReport> EvaluateOn(
    const v1::FactorSet& set, const std::vector<v1::MeasuredRun>& test,
    const ModelCatalog& catalog, double coverage, const PageRules& rules);

}  // namespace headroom

#endif  // HEADROOM_SERVER_CORE_CALIBRATION_EVALUATE_H_
