#include "server/service/energy_points_source.h"

#include <algorithm>

#include "base/status_macros.h"

namespace headroom {

absl::StatusOr<std::vector<MeasuredEnergyPoint>> StoredCurveSetPoints::Points(
    bool include_simulated) {
  ASSIGN_OR_RETURN(std::vector<v1::EnergyCurveSet> sets,
                   store_->ListEnergyCurveSets(kMaxSets));
  if (sets.empty()) return std::vector<MeasuredEnergyPoint>{};
  const v1::EnergyCurveSet baseline = sets.front();
  std::vector<MeasuredEnergyPoint> points = PointsFromCurveSets(sets, baseline);
  if (!include_simulated) {
    points.erase(std::remove_if(
                     points.begin(), points.end(),
                     [](const MeasuredEnergyPoint& p) { return p.simulated; }),
                 points.end());
  }
  return points;
}

}  // namespace headroom
