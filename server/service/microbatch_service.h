#ifndef HEADROOM_SERVER_SERVICE_MICROBATCH_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_MICROBATCH_SERVICE_H_

// headroom.v1.Microbatch: microbatch plans (inline specs on the import
// pool) and the autotune cache they reuse.

#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_state.h"

namespace headroom {

class MicrobatchService final : public v1::Microbatch::CallbackService {
 public:
  // `state` must outlive the service.
  explicit MicrobatchService(PlannerState* state) : state_(*state) {}

  grpc::ServerUnaryReactor* PlanMicrobatch(
      grpc::CallbackServerContext* context,
      const v1::PlanMicrobatchRequest* request,
      v1::PlanMicrobatchResponse* response) override;
  grpc::ServerUnaryReactor* PutAutotuneRecord(
      grpc::CallbackServerContext* context,
      const v1::PutAutotuneRecordRequest* request,
      v1::PutAutotuneRecordResponse* response) override;
  grpc::ServerUnaryReactor* ListAutotuneRecords(
      grpc::CallbackServerContext* context,
      const v1::ListAutotuneRecordsRequest* request,
      v1::ListAutotuneRecordsResponse* response) override;
  grpc::ServerUnaryReactor* DropAutotuneRecord(
      grpc::CallbackServerContext* context,
      const v1::DropAutotuneRecordRequest* request,
      v1::DropAutotuneRecordResponse* response) override;

 private:
  // PlanMicrobatch's answer; finishes the call.
  void AnswerPlanMicrobatch(grpc::ServerUnaryReactor* reactor,
                            const v1::PlanMicrobatchRequest* request,
                            v1::PlanMicrobatchResponse* response);

  PlannerState& state_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_MICROBATCH_SERVICE_H_
