#ifndef HEADROOM_SERVER_STORE_STORE_H_
#define HEADROOM_SERVER_STORE_STORE_H_

// The seam between the stateless planner and its state. Everything stateful
// goes through this interface; SQLite is the embedded default.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/density.pb.h"
#include "headroom/v1/energy.pb.h"

namespace headroom {

class Store {
 public:
  virtual ~Store() = default;

  // The factor set answers are given with; nullopt before the first fit.
  virtual absl::StatusOr<std::optional<v1::FactorSet>> CurrentFactorSet() = 0;

  // Stores `set` under the next version ("fs-N"), returning it with the
  // version filled in; makes it current when `make_current`.
  virtual absl::StatusOr<v1::FactorSet> AddFactorSet(v1::FactorSet set,
                                                     bool make_current) = 0;

  // Makes a stored factor set current and records the change in the
  // history rollback walks; NOT_FOUND names an unknown version.
  virtual absl::Status SetCurrentFactorSet(const std::string& version) = 0;

  // Versions that were current, oldest first (repeats allowed).
  virtual absl::StatusOr<std::vector<std::string>> CurrentHistory() = 0;

  // One stored factor set; NOT_FOUND names the version.
  virtual absl::StatusOr<v1::FactorSet> GetFactorSet(
      const std::string& version) = 0;

  // Every stored factor set, oldest first.
  virtual absl::StatusOr<std::vector<v1::FactorSet>> ListFactorSets() = 0;

  // Appends measured runs (one transaction: all or none), skipping any run
  // identical to one already stored; returns how many runs the store holds
  // afterwards.
  virtual absl::StatusOr<int64_t> AddRuns(
      const std::vector<v1::MeasuredRun>& runs) = 0;

  // Stores an energy curve set under the next version ("ec-N") and makes it
  // current when `make_current`; returns it with the version filled in.
  virtual absl::StatusOr<v1::EnergyCurveSet> AddEnergyCurveSet(
      v1::EnergyCurveSet set, bool make_current) = 0;

  // The energy curves answers use; nullopt before the first is stored.
  virtual absl::StatusOr<std::optional<v1::EnergyCurveSet>>
  CurrentEnergyCurveSet() = 0;

  // Stores density runs in one transaction; a run whose id is stored
  // already replaces it. Returns how many are stored afterwards.
  virtual absl::StatusOr<int64_t> AddDensityRuns(
      const std::vector<v1::DensityRawRun>& runs) = 0;

  // Stored density runs in id order, only those matching every non-empty
  // filter.
  virtual absl::StatusOr<std::vector<v1::DensityRawRun>> ListDensityRuns(
      const std::string& arch, const std::string& dtype,
      const std::string& mode) = 0;

  // Every stored measured run in insertion order.
  virtual absl::StatusOr<std::vector<v1::MeasuredRun>> ListRuns() = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_STORE_H_
