#ifndef HEADROOM_CORE_PLANNER_FIT_REQUEST_H_
#define HEADROOM_CORE_PLANNER_FIT_REQUEST_H_

// A CheckFit request's cards and coverage, checked: what the planner
// reads before it builds a plan (fit_planner.h).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// A card to answer for: a catalog GPU or a bare size.
struct ResolvedTarget {
  std::string name;
  double memory_gb;
  bool is_gpu = false;
};

// The request's targets, in order: INVALID_ARGUMENT for none, too many or an
// empty one, NOT_FOUND for an unknown GPU.
absl::StatusOr<std::vector<ResolvedTarget>> ResolveTargets(
    const v1::CheckFitRequest& request);

// The coverage that picks k of the calibrated upper bound: the request's, or
// `default_coverage` for 0; INVALID_ARGUMENT for one not calibrated.
absl::StatusOr<double> CoverageOf(const v1::CheckFitRequest& request,
                                  double default_coverage);

}  // namespace headroom

#endif  // HEADROOM_CORE_PLANNER_FIT_REQUEST_H_
