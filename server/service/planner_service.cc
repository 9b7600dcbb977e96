#include "server/service/planner_service.h"

#include "absl/strings/str_cat.h"
#include "server/service/grpc_status.h"
#include "spdlog/spdlog.h"

namespace headroom {

PlannerService::PlannerService(std::shared_ptr<const FitPlanner> planner,
                               Store* store, PlannerMetrics* metrics,
                               size_t max_request_bytes)
    : planner_(std::move(planner)),
      store_(store),
      metrics_(metrics),
      max_request_bytes_(max_request_bytes) {}

void PlannerService::SetPlanner(std::shared_ptr<const FitPlanner> planner) {
  absl::MutexLock lock(&mu_);
  planner_ = std::move(planner);
}

std::shared_ptr<const FitPlanner> PlannerService::planner() const {
  absl::MutexLock lock(&mu_);
  return planner_;
}

grpc::ServerUnaryReactor* PlannerService::CheckFit(
    grpc::CallbackServerContext* context, const v1::CheckFitRequest* request,
    v1::CheckFitResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->ByteSizeLong() > max_request_bytes_) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("request is ", request->ByteSizeLong(),
                                  " bytes; allowed up to ", max_request_bytes_,
                                  " (model.spec too large?)")));
    return reactor;
  }
  // The answer is pure computation on an immutable planner (microseconds),
  // so it runs inline without blocking on anything.
  absl::StatusOr<v1::CheckFitResponse> answer = planner()->CheckFit(*request);
  if (!answer.ok()) {
    spdlog::debug("event=check_fit_rejected code={} message=\"{}\"",
                  absl::StatusCodeToString(answer.status().code()),
                  std::string(answer.status().message()));
    reactor->Finish(ToGrpcStatus(answer.status()));
    return reactor;
  }
  for (const v1::TargetResult& target : answer->targets()) {
    for (int verdict : target.verdicts()) {
      metrics_->Verdict(v1::Verdict_Name(verdict));
    }
  }
  *response = std::move(*answer);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::GetCalibration(
    grpc::CallbackServerContext* context,
    const v1::GetCalibrationRequest* request,
    v1::GetCalibrationResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->version().empty()) {
    *response->mutable_factor_set() = planner()->factor_set();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  if (request->version().size() > 64) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "version is longer than 64 characters; "
                                 "factor-set versions look like fs-1"));
    return reactor;
  }
  absl::StatusOr<v1::FactorSet> set = store_->GetFactorSet(request->version());
  if (!set.ok()) {
    reactor->Finish(ToGrpcStatus(set.status()));
    return reactor;
  }
  *response->mutable_factor_set() = std::move(*set);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::Ping(
    grpc::CallbackServerContext* context, const v1::PingRequest* /*request*/,
    v1::PingResponse* /*response*/) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace headroom
