#ifndef HEADROOM_SERVER_SERVICE_FIT_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_FIT_SERVICE_H_

// headroom.v1.Fit: CheckFit answered from the installed planner and
// evidence (kept answers and catalog answers inline, imports on the import
// pool, learning decisions on the evidence thread), and Ping. Answers are
// kept per request for the planner and evidence they came from
// (AnswerCache).

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/answer_cache.h"
#include "server/service/check_fit_messages.h"
#include "server/service/planner_state.h"

namespace headroom {

class FitService final : public v1::Fit::CallbackService {
 public:
  // `state` must outlive the service.
  explicit FitService(PlannerState* state) : state_(*state) {
    SetMessageAllocatorFor_CheckFit(&messages_);
  }

  grpc::ServerUnaryReactor* CheckFit(grpc::CallbackServerContext* context,
                                     const v1::CheckFitRequest* request,
                                     v1::CheckFitResponse* response) override;
  // The answer CheckFit sends for `request` (no learning decision), kept
  // for the installed planner and evidence: for other callers on the same
  // questions, such as the scheduler extender. Never blocks on I/O; an
  // import not yet kept is computed on the calling thread.
  absl::StatusOr<std::shared_ptr<const v1::CheckFitResponse>> AnswerFor(
      const v1::CheckFitRequest& request) {
    return Answer(request, answers_.KeyOf(request));
  }

  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse* response) override;

 private:
  // The planner's answer to `request` (kept under `key`, AnswerCache).
  absl::StatusOr<std::shared_ptr<const v1::CheckFitResponse>> Answer(
      const v1::CheckFitRequest& request, const std::string& key);
  // CheckFit's answer and its learning decision (as `grant` allows);
  // finishes the call. An answer without a learning line is sent as kept,
  // not copied (CheckFitMessages).
  void AnswerCheckFit(grpc::CallbackServerContext* context,
                      grpc::ServerUnaryReactor* reactor,
                      const v1::CheckFitRequest* request,
                      v1::CheckFitResponse* response, LearnGrant grant,
                      const std::string& key);

  PlannerState& state_;
  AnswerCache answers_;
  CheckFitMessages messages_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FIT_SERVICE_H_
