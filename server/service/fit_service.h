#ifndef HEADROOM_SERVER_SERVICE_FIT_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_FIT_SERVICE_H_

// headroom.v1.Fit: CheckFit answered from the installed planner and
// evidence (catalog answers inline, imports on the import pool, learning
// decisions on the evidence thread), and Ping.

#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_state.h"

namespace headroom {

class FitService final : public v1::Fit::CallbackService {
 public:
  // `state` must outlive the service.
  explicit FitService(PlannerState* state) : state_(*state) {}

  grpc::ServerUnaryReactor* CheckFit(grpc::CallbackServerContext* context,
                                     const v1::CheckFitRequest* request,
                                     v1::CheckFitResponse* response) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse* response) override;

 private:
  // CheckFit's answer and its learning decision (as `grant` allows);
  // finishes the call.
  void AnswerCheckFit(grpc::ServerUnaryReactor* reactor,
                      const v1::CheckFitRequest* request,
                      v1::CheckFitResponse* response, LearnGrant grant);

  PlannerState& state_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FIT_SERVICE_H_
