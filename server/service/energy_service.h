#ifndef HEADROOM_SERVER_SERVICE_ENERGY_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_ENERGY_SERVICE_H_

// headroom.v1.Energy: estimates from the installed energy curves, refits
// from measured energy runs, the stored curve sets and their promotion.

#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_state.h"

namespace headroom {

class EnergyService final : public v1::Energy::CallbackService {
 public:
  // `state` must outlive the service.
  explicit EnergyService(PlannerState* state) : state_(*state) {}

  grpc::ServerUnaryReactor* EstimateEnergy(
      grpc::CallbackServerContext* context,
      const v1::EstimateEnergyRequest* request,
      v1::EstimateEnergyResponse* response) override;
  grpc::ServerUnaryReactor* RefitEnergy(
      grpc::CallbackServerContext* context,
      const v1::RefitEnergyRequest* request,
      v1::RefitEnergyResponse* response) override;
  grpc::ServerUnaryReactor* ListEnergyCurveSets(
      grpc::CallbackServerContext* context,
      const v1::ListEnergyCurveSetsRequest* request,
      v1::ListEnergyCurveSetsResponse* response) override;
  grpc::ServerUnaryReactor* PromoteEnergyCurveSet(
      grpc::CallbackServerContext* context,
      const v1::PromoteEnergyCurveSetRequest* request,
      v1::PromoteEnergyCurveSetResponse* response) override;

 private:
  PlannerState& state_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_ENERGY_SERVICE_H_
