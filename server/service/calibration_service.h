#ifndef HEADROOM_SERVER_SERVICE_CALIBRATION_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_CALIBRATION_SERVICE_H_

// headroom.v1.Calibration: the factor sets answers come from: their pages,
// refits from measured runs (on the refit worker), promotion and rollback.

#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_state.h"

namespace headroom {

class CalibrationService final : public v1::Calibration::CallbackService {
 public:
  // `state` must outlive the service.
  explicit CalibrationService(PlannerState* state) : state_(*state) {}

  grpc::ServerUnaryReactor* GetCalibration(
      grpc::CallbackServerContext* context,
      const v1::GetCalibrationRequest* request,
      v1::GetCalibrationResponse* response) override;
  grpc::ServerUnaryReactor* Refit(grpc::CallbackServerContext* context,
                                  const v1::RefitRequest* request,
                                  v1::RefitResponse* response) override;
  grpc::ServerUnaryReactor* ListFactorSets(
      grpc::CallbackServerContext* context,
      const v1::ListFactorSetsRequest* request,
      v1::ListFactorSetsResponse* response) override;
  grpc::ServerUnaryReactor* PromoteFactorSet(
      grpc::CallbackServerContext* context,
      const v1::PromoteFactorSetRequest* request,
      v1::PromoteFactorSetResponse* response) override;

  // The refit itself, run on the refit worker. Stores nothing (runs or
  // factor set) unless `live()` still holds when the fit is done:
  // DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<v1::RefitResponse> RunRefit(const v1::RefitRequest& request,
                                             const std::function<bool()>& live);

  // The calibration page of the current factor set as HTML, with the global
  // factors' predictions of the stored runs plotted against the
  // measurements; simulated runs are listed apart unless
  // `include_simulated` (then they are drawn too).
  std::string CalibrationHtml(bool include_simulated) const;

 private:
  PlannerState& state_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_CALIBRATION_SERVICE_H_
