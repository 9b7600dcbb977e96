#ifndef HEADROOM_SERVER_SERVICE_METRICS_H_
#define HEADROOM_SERVER_SERVICE_METRICS_H_

// Prometheus metrics of the planner: the go-grpc-prometheus server metrics
// (filled by a gRPC interceptor) and the headroom_* domain metrics.

#include <memory>
#include <mutex>
#include <string>

#include "grpcpp/support/server_interceptor.h"
#include "headroom/v1/calibration.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace headroom {

class PlannerMetrics {
 public:
  PlannerMetrics();
  PlannerMetrics(const PlannerMetrics&) = delete;
  PlannerMetrics& operator=(const PlannerMetrics&) = delete;

  // The registry /metrics serializes.
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Counts one RPC start / finish; `method` is "/pkg.Service/Method".
  void RpcStarted(const std::string& type, const std::string& method);
  void RpcHandled(const std::string& type, const std::string& method,
                  const std::string& code, double seconds);

  // Counts one verdict ("FITS", "BORDERLINE", "DOES_NOT_FIT").
  void Verdict(const std::string& verdict);

  // Publishes a factor set that became current: its page's median error
  // per column, its held-out saidFitsButOom, and headroom_factor_set_info
  // (1 for the current version, 0 for those before it).
  void FactorSetInstalled(const v1::FactorSet& set);

  // An interceptor factory for ServerBuilder that records the grpc_server_*
  // metrics for every RPC. The metrics object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& handling_seconds_;
  prometheus::Family<prometheus::Counter>& verdicts_;
  prometheus::Family<prometheus::Gauge>& calibration_error_;
  prometheus::Family<prometheus::Gauge>& said_fits_but_oom_;
  prometheus::Family<prometheus::Gauge>& factor_set_info_;
  std::mutex info_mu_;
  std::string current_version_;  // guarded by info_mu_
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_METRICS_H_
