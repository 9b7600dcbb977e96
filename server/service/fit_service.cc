#include "server/service/fit_service.h"

#include "base/input_limits.h"
#include "base/status_macros.h"
#include "server/service/grpc_status.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {

grpc::ServerUnaryReactor* FitService::CheckFit(
    grpc::CallbackServerContext* context, const v1::CheckFitRequest* request,
    v1::CheckFitResponse* response) {
  if (auto* refused =
          RefuseUnary(state_.access(), context, "/headroom.v1.Fit/CheckFit")) {
    return refused;
  }
  if (auto* refused = RefuseOversized(context, *request,
                                      state_.service().max_request_bytes)) {
    return refused;
  }
  // Who asks decides whether the read may queue a probe.
  LearnGrant grant;
  if (request->learn() || state_.options().auto_probe) {
    if (state_.access() == nullptr) {
      grant = state_.GrantLearning(nullptr, *request);
    } else {
      const Caller caller = state_.access()->Identify(*context);
      grant = state_.GrantLearning(&caller, *request);
    }
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // A catalog answer runs inline (it blocks on nothing); an import runs on
  // its own pool, so a queue of large graphs never delays catalog answers.
  if (ImportsModel(request->model())) {
    return state_.DeferImport(
        reactor,
        [this, reactor, request, response, grant] {
          AnswerCheckFit(reactor, request, response, grant);
        },
        request->ByteSizeLong());
  }
  AnswerCheckFit(reactor, request, response, std::move(grant));
  return reactor;
}

void FitService::AnswerCheckFit(grpc::ServerUnaryReactor* reactor,
                                const v1::CheckFitRequest* request,
                                v1::CheckFitResponse* response,
                                LearnGrant grant) {
  // Pure computation on an immutable planner and evidence: microseconds for
  // a catalog template, up to seconds for an imported model.
  const PlannerState::Answering from = state_.answering();
  absl::StatusOr<v1::CheckFitResponse> answer =
      from.planner->CheckFit(*request, from.evidence.get());
  if (!answer.ok()) {
    spdlog::debug("event=check_fit_rejected code={} message=\"{}\"",
                  absl::StatusCodeToString(answer.status().code()),
                  std::string(answer.status().message()));
    reactor->Finish(ToGrpcStatus(answer.status()));
    return;
  }
  state_.metrics()->CountVerdicts(*answer);
  std::string why;
  if (!grant.wanted || !NeedsLearning(*answer, &why)) {
    if (request->learn()) answer->set_learning(why);
  } else if (!grant.allowed) {
    // A reader's learn: the answer says who may queue a probe.
    if (request->learn()) answer->set_learning(grant.refused);
  } else {
    // Deciding reads and writes the probe queue: off this thread. With
    // learn the answer waits for it and says what happened; with
    // --auto_probe alone it does not wait.
    if (request->learn()) {
      *response = std::move(*answer);
      const bool posted =
          state_.PostLearning([this, reactor, request, response, grant] {
            response->set_learning(state_.Learn(*request, *response, grant));
            reactor->Finish(grpc::Status::OK);
          });
      if (!posted) {
        response->set_learning("no probe queued: the planner is busy");
        reactor->Finish(grpc::Status::OK);
      }
      return;
    }
    auto copy = std::make_shared<v1::CheckFitRequest>(*request);
    auto seen = std::make_shared<v1::CheckFitResponse>(*answer);
    state_.PostLearning(
        [this, copy, seen, grant] { state_.Learn(*copy, *seen, grant); });
  }
  *response = std::move(*answer);
  reactor->Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* FitService::Ping(grpc::CallbackServerContext* context,
                                           const v1::PingRequest* /*request*/,
                                           v1::PingResponse* /*response*/) {
  if (auto* refused =
          RefuseUnary(state_.access(), context, "/headroom.v1.Fit/Ping")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace headroom
