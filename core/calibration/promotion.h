#ifndef HEADROOM_CORE_CALIBRATION_PROMOTION_H_
#define HEADROOM_CORE_CALIBRATION_PROMOTION_H_

// When a refitted factor set may replace the current one, and which runs a
// refit may use.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

struct PromotionDecision {
  bool promote = false;
  std::string reason;
};

// A candidate becomes current when its held-out page (column ours_heldout)
// is no worse than the current one's on both the median absolute error and
// saidFitsButOom, when there is no current set, or when forced.
PromotionDecision DecidePromotion(const v1::FactorSet& candidate,
                                  const v1::FactorSet* current, bool force);

// The factor set a rollback from `current` goes to, given every version
// that was current, oldest first. The history reads as a stack: a version
// current before (rolled back to, or promoted again) pops back to it, so
// rolling back twice walks back twice and never forward.
// FAILED_PRECONDITION when nothing was current before `current`, naming
// `what` was versioned ("factor set", "energy curve set").
absl::StatusOr<std::string> RollbackTarget(
    const std::vector<std::string>& history, const std::string& current,
    absl::string_view what = "factor set");

// Checks runs before anything is stored: each as CheckMeasuredRun
// (evidence/run_checks.h) checks a worker's result, named "runs[i]".
// INVALID_ARGUMENT / NOT_FOUND name the run index and field and the range.
absl::Status ValidateRuns(const std::vector<v1::MeasuredRun>& runs,
                          const ModelCatalog& catalog);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_PROMOTION_H_
