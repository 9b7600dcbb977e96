#include "server/service/fit_service.h"

#include <optional>
#include <utility>

#include "base/input_limits.h"
#include "base/status_macros.h"
#include "server/service/check_fit_messages.h"
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
  // A kept answer, or a catalog one, is answered inline (it blocks on
  // nothing); an import runs on its own pool, so a queue of large graphs
  // never delays catalog answers.
  std::string key = answers_.KeyOf(*request);
  if (ImportsModel(request->model()) &&
      answers_.Find(state_.answering(), key) == nullptr) {
    return state_.DeferImport(
        reactor,
        [this, context, reactor, request, response, grant,
         key = std::move(key)] {
          AnswerCheckFit(context, reactor, request, response, grant, key);
        },
        request->ByteSizeLong());
  }
  AnswerCheckFit(context, reactor, request, response, std::move(grant), key);
  return reactor;
}

absl::StatusOr<std::shared_ptr<const v1::CheckFitResponse>> FitService::Answer(
    const v1::CheckFitRequest& request, const std::string& key) {
  // Pure computation on an immutable planner and evidence: microseconds for
  // a catalog template, up to seconds for an imported model; none for an
  // answer kept from an earlier call on the same planner and evidence.
  const PlannerState::Answering from = state_.answering();
  std::shared_ptr<const v1::CheckFitResponse> kept = answers_.Find(from, key);
  if (kept != nullptr) return kept;
  absl::StatusOr<v1::CheckFitResponse> answer =
      from.planner->CheckFit(request, from.evidence.get());
  if (!answer.ok()) return answer.status();
  auto computed =
      std::make_shared<const v1::CheckFitResponse>(*std::move(answer));
  answers_.Insert(from, key, computed);
  return computed;
}

void FitService::AnswerCheckFit(grpc::CallbackServerContext* context,
                                grpc::ServerUnaryReactor* reactor,
                                const v1::CheckFitRequest* request,
                                v1::CheckFitResponse* response,
                                LearnGrant grant, const std::string& key) {
  absl::StatusOr<std::shared_ptr<const v1::CheckFitResponse>> answer =
      Answer(*request, key);
  if (!answer.ok()) {
    spdlog::debug("event=check_fit_rejected code={} message=\"{}\"",
                  absl::StatusCodeToString(answer.status().code()),
                  std::string(answer.status().message()));
    reactor->Finish(ToGrpcStatus(answer.status()));
    return;
  }
  const std::shared_ptr<const v1::CheckFitResponse> answered =
      *std::move(answer);
  state_.metrics()->CountVerdicts(*answered);
  // With learn, the answer carries a learning line: this call's own copy.
  std::optional<std::string> learning;
  std::string why;
  if (!grant.wanted || !NeedsLearning(*answered, &why)) {
    if (request->learn()) learning = std::move(why);
  } else if (!grant.allowed) {
    // A reader's learn: the answer says who may queue a probe.
    if (request->learn()) learning = grant.refused;
  } else if (request->learn()) {
    // Deciding reads and writes the probe queue: off this thread. With
    // learn the answer waits for it and says what happened.
    *response = *answered;
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
  } else {
    // With --auto_probe alone the answer does not wait for the decision.
    auto copy = std::make_shared<v1::CheckFitRequest>(*request);
    state_.PostLearning([this, copy, answered, grant] {
      state_.Learn(*copy, *answered, grant);
    });
  }
  if (learning.has_value()) {
    *response = *answered;
    response->set_learning(*learning);
  } else if (!CheckFitMessages::SendKept(context, answered)) {
    *response = *answered;
  }
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
