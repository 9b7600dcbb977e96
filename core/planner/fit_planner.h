#ifndef HEADROOM_CORE_PLANNER_FIT_PLANNER_H_
#define HEADROOM_CORE_PLANNER_FIT_PLANNER_H_

// Answers CheckFit from a catalog and one factor set. Plain C++ over the API
// messages: no gRPC, no I/O; immutable once built, so safe to share across
// threads.

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "core/evidence/evidence.h"
#include "core/frontends/frontend_registry.h"
#include "core/memory/memory_profile.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// Most batches and targets one request may ask.
inline constexpr int kMaxBatchesPerRequest = 256;
inline constexpr int kMaxTargetsPerRequest = 64;

// Writes component byte counts (in Component order) as GB.
void SetComponentsGb(const ComponentArray& bytes, v1::ComponentsGb* out);

// OK when `batches` has 1..max_entries entries, each 1..kMaxBatch; else
// INVALID_ARGUMENT naming the field ("batches[2] = 0 ...").
absl::Status CheckBatches(
    const google::protobuf::RepeatedField<uint32_t>& batches, int max_entries);

class FitPlanner {
 public:
  // `catalog` must outlive the planner. `default_coverage` is 0.9 or 0.95.
  FitPlanner(std::shared_ptr<const ModelCatalog> catalog,
             v1::FactorSet factor_set, double default_coverage);

  FitPlanner(const FitPlanner&) = delete;
  FitPlanner& operator=(const FitPlanner&) = delete;

  // Validates the request (INVALID_ARGUMENT naming the field, NOT_FOUND for
  // an unknown template or GPU with the closest names) and answers it: with
  // `evidence` holding runs of the request's model key, anchored on them
  // (evidence.h), else from the prior; every estimate says which (basis).
  absl::StatusOr<v1::CheckFitResponse> CheckFit(
      const v1::CheckFitRequest& request,
      const Evidence* evidence = nullptr) const;

  // The key a request's model and setup are looked up under; errors as
  // CheckFit's.
  absl::StatusOr<ModelKey> KeyOf(const v1::CheckFitRequest& request) const;

  // The prior answers use when no run anchors them.
  const Prior& prior() const { return prior_; }
  const std::vector<Prior>& priors() const { return priors_; }

  const v1::FactorSet& factor_set() const { return factor_set_; }
  const ModelCatalog& catalog() const { return *catalog_; }

 private:
  std::shared_ptr<const ModelCatalog> catalog_;
  v1::FactorSet factor_set_;
  double default_coverage_;
  // Adopted regimes by catalog GPU name (of the global prior).
  std::map<std::string, const v1::Regime*> regimes_;
  std::vector<Prior> priors_;
  Prior prior_;
  // The compiled runs' prior when the set has one (else another source's).
  Prior compile_prior_;
  // Each catalog template's CanonicalArchitecture, keyed once.
  std::map<std::string, std::string> template_architecture_;

  // The key of a resolved model and its effective setup; strips the layer
  // names of a model the request carried (its own copy) in place.
  ModelKey KeyFor(ResolvedModel& model, const v1::TrainingSetup& setup,
                  bool with_id = true) const;
};

}  // namespace headroom

#endif  // HEADROOM_CORE_PLANNER_FIT_PLANNER_H_
