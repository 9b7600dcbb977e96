#ifndef HEADROOM_SERVER_SERVICE_DENSITY_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_DENSITY_SERVICE_H_

// headroom.v1.Density: rankings of train-while-serve configurations, from
// the request's runs or the stored ones, and storing such runs.

#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_state.h"

namespace headroom {

class DensityService final : public v1::Density::CallbackService {
 public:
  // `state` must outlive the service.
  explicit DensityService(PlannerState* state) : state_(*state) {}

  grpc::ServerUnaryReactor* RankDensity(
      grpc::CallbackServerContext* context,
      const v1::RankDensityRequest* request,
      v1::RankDensityResponse* response) override;
  grpc::ServerUnaryReactor* SubmitDensityRuns(
      grpc::CallbackServerContext* context,
      const v1::SubmitDensityRunsRequest* request,
      v1::SubmitDensityRunsResponse* response) override;

 private:
  PlannerState& state_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_DENSITY_SERVICE_H_
