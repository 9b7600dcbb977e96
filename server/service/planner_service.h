#ifndef HEADROOM_SERVER_SERVICE_PLANNER_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_PLANNER_SERVICE_H_

// headroom.v1.Planner over the callback API. It only translates: requests go
// to the core FitPlanner, absl statuses become gRPC statuses.

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/core/planner/fit_planner.h"
#include "server/service/metrics.h"
#include "server/store/store.h"

namespace headroom {

class PlannerService final : public v1::Planner::CallbackService {
 public:
  // `store` and `metrics` must outlive the service. Requests larger than
  // `max_request_bytes` get INVALID_ARGUMENT (the transport allows twice
  // that, so the caller hears why rather than a bare RESOURCE_EXHAUSTED).
  PlannerService(std::shared_ptr<const FitPlanner> planner, Store* store,
                 PlannerMetrics* metrics, size_t max_request_bytes);

  // Replaces the planner answers come from (after a refit or promotion).
  void SetPlanner(std::shared_ptr<const FitPlanner> planner);
  std::shared_ptr<const FitPlanner> planner() const;

  grpc::ServerUnaryReactor* CheckFit(grpc::CallbackServerContext* context,
                                     const v1::CheckFitRequest* request,
                                     v1::CheckFitResponse* response) override;
  grpc::ServerUnaryReactor* GetCalibration(
      grpc::CallbackServerContext* context,
      const v1::GetCalibrationRequest* request,
      v1::GetCalibrationResponse* response) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse* response) override;

 private:
  mutable absl::Mutex mu_;
  std::shared_ptr<const FitPlanner> planner_ ABSL_GUARDED_BY(mu_);
  Store* store_;
  PlannerMetrics* metrics_;
  size_t max_request_bytes_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_PLANNER_SERVICE_H_
