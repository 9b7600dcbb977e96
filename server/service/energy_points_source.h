#ifndef HEADROOM_SERVER_SERVICE_ENERGY_POINTS_SOURCE_H_
#define HEADROOM_SERVER_SERVICE_ENERGY_POINTS_SOURCE_H_

// Where the energy picture's measured points come from (issue 21, item 6):
// a seam, so the store's energy runs plug in (PointsFromEnergyRuns over
// them) beside what the store holds today.

#include <vector>

#include "absl/status/statusor.h"
#include "core/energy/energy_points.h"
#include "server/store/store.h"

namespace headroom {

class EnergyPointSource {
 public:
  virtual ~EnergyPointSource() = default;
  // Every measured point; simulated ones only with `include_simulated`.
  // Store I/O: call off the gRPC threads.
  virtual absl::StatusOr<std::vector<MeasuredEnergyPoint>> Points(
      bool include_simulated) = 0;
};

// What the store holds of measured inference energy today: the anchors
// refits added to the stored curve sets (PointsFromCurveSets, against the
// first stored set), over the first kMaxSets sets stored.
class StoredCurveSetPoints : public EnergyPointSource {
 public:
  static constexpr int kMaxSets = 500;
  // `store` must outlive the source.
  explicit StoredCurveSetPoints(Store* store) : store_(store) {}
  absl::StatusOr<std::vector<MeasuredEnergyPoint>> Points(
      bool include_simulated) override;

 private:
  Store* store_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_ENERGY_POINTS_SOURCE_H_
