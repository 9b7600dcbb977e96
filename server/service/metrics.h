#ifndef HEADROOM_SERVER_SERVICE_METRICS_H_
#define HEADROOM_SERVER_SERVICE_METRICS_H_

// Prometheus metrics of the planner: the go-grpc-prometheus server metrics
// (filled by a gRPC interceptor) and the headroom_* domain metrics.

#include <array>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_interceptor.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/planner.pb.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"

namespace headroom {

class GpuSeriesTable;

// Why the planner refused a worker's message: the fixed label values of
// headroom_worker_messages_rejected_total{reason}.
enum class WorkerRejection {
  kNotLeased,          // not the running assignment leased to this worker
  kUnknownBatch,       // a batch, repetition or mode the probe never asked
  kImplausibleValue,   // NaN, a negative or impossible peak, OOM and a peak
  kMalformed,          // a missing or oversized key, no probe named
  kHandbackLimit,      // handed back too often: the probe failed instead
  kDuplicateHello,     // a second hello on one stream
  kIdentityMismatch,   // the hello's worker id is not the caller's identity
  kInventoryTooLarge,  // a hello beyond the inventory bounds
  kAlreadyConnected,   // the worker id is connected and alive elsewhere
};
inline constexpr WorkerRejection kAllWorkerRejections[] = {
    WorkerRejection::kNotLeased,        WorkerRejection::kUnknownBatch,
    WorkerRejection::kImplausibleValue, WorkerRejection::kMalformed,
    WorkerRejection::kHandbackLimit,    WorkerRejection::kDuplicateHello,
    WorkerRejection::kIdentityMismatch, WorkerRejection::kInventoryTooLarge,
    WorkerRejection::kAlreadyConnected};

// The label value ("not_leased", ...), also sent in v1::Rejected.reason.
const char* WorkerRejectionName(WorkerRejection reason);

// The outcomes of headroom_probe_results_total{outcome}.
inline constexpr const char* kProbeOutcomes[] = {"measured", "oom", "error",
                                                 "duplicate"};

// Every family is on /metrics from the first scrape: those whose labels are
// a fixed set (verdicts, probe states and outcomes, rejection reasons,
// extender verbs and outcomes) and the unlabelled ones with each series at
// 0; those whose labels are open (per RPC method, factor set, GPU) as their
// HELP and TYPE lines until their first series.
class PlannerMetrics {
 public:
  // `now_ms` is the clock GPU series age by (default: a steady clock in
  // milliseconds); tests pass their own.
  explicit PlannerMetrics(std::function<int64_t()> now_ms = nullptr);
  PlannerMetrics(const PlannerMetrics&) = delete;
  PlannerMetrics& operator=(const PlannerMetrics&) = delete;

  // The registry the families live in (only families with series).
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
  // What /metrics serializes: the registry, plus each family without series
  // as its HELP and TYPE lines alone. Holds the registry: it may outlive
  // this object.
  std::shared_ptr<const prometheus::Collectable> exported() const;

  // Counts one RPC start / finish; `method` is "/pkg.Service/Method". A
  // method no registered service has (headroom.v1's Fit, Calibration,
  // Energy, Density, Microbatch and Fleet, health, reflection) counts as
  // service and method "unknown", so made-up method names add no series.
  void RpcStarted(const std::string& type, const std::string& method);
  void RpcHandled(const std::string& type, const std::string& method,
                  const std::string& code, double seconds);

  // Counts one verdict ("FITS", "BORDERLINE", "DOES_NOT_FIT").
  void Verdict(const std::string& verdict);
  // Counts every verdict of a CheckFit answer, as Verdict does each, but
  // without a label lookup per verdict.
  void CountVerdicts(const v1::CheckFitResponse& answer);

  // Publishes a factor set that became current: its page's median error
  // per column, its held-out saidFitsButOom, and headroom_factor_set_info
  // (1 for the current version, 0 for those before it).
  void FactorSetInstalled(const v1::FactorSet& set);

  // The fleet: workers connected to this planner, probes per state (from
  // the store), samples received, results by outcome (kProbeOutcomes).
  void WorkersConnected(int64_t count);
  void ProbeStates(const std::vector<std::pair<std::string, int64_t>>& counts);
  void SamplesReceived(uint64_t count);
  void ProbeResultReceived(const std::string& outcome);
  // Counts one refused worker message
  // (headroom_worker_messages_rejected_total{reason}).
  void WorkerMessageRejected(WorkerRejection reason);

  // GPU readings from workers, in dcgm-exporter's metric names, units and
  // labels: DCGM_FI_DEV_FB_USED (MiB) and DCGM_FI_DEV_POWER_USAGE (W) as
  // gauges, DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ) as a counter. A
  // simulated GPU's series carry simulated="true". A series is exported
  // only while it tells the truth: from its GPU's first sample until that
  // sample is older than twice the GPU's sample period (the longest of the
  // last four intervals between its sample arrivals; the fallback period
  // the fleet gives until two have arrived), or until its worker goes
  // (ReleaseGpuSeries). The labels come from workers' hellos, so they are
  // bounded: values cut to kMaxLabelBytes, and past kMaxGpuSeries label
  // sets in use every new GPU shares the series labelled "other".
  static constexpr size_t kMaxLabelBytes = 128;
  static constexpr size_t kMaxGpuSeries = 1024;
  // A GPU's handle: the labels of its series.
  struct GpuGauges {
    std::map<std::string, std::string> labels;
    // Past the cap: the shared "other" series (never released).
    bool other = false;
  };
  GpuGauges GpuSeries(const std::string& gpu_index, const std::string& uuid,
                      const std::string& model_name,
                      const std::string& hostname, bool simulated = false);
  void ReleaseGpuSeries(const GpuGauges& gauges);
  // One reading of the GPU: memory used, power and the energy counter where
  // the worker reads them. `fallback_period_ms` bounds the series' life
  // until a second sample says the period.
  void GpuSample(const GpuGauges& gauges, double fb_used_mib,
                 std::optional<double> power_w,
                 std::optional<double> total_energy_mj,
                 int64_t fallback_period_ms);

  // The scheduler extender: one call by verb ("filter", "prioritize") and
  // outcome ("answered", "untouched" for a pod without annotations,
  // "bad_request", "bad_annotation", "fail_open"), and the nodes a filter
  // dropped.
  void ExtenderCall(const std::string& verb, const std::string& outcome);
  void ExtenderNodesFilteredOut(int64_t count);

  // An interceptor factory for ServerBuilder that records the grpc_server_*
  // metrics for every RPC. The metrics object must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  InterceptorFactory();

 private:
  // Register a family in registry_ and declare it in declared_.
  prometheus::Family<prometheus::Counter>& NewCounter(const std::string& name,
                                                      const std::string& help);
  prometheus::Family<prometheus::Gauge>& NewGauge(const std::string& name,
                                                  const std::string& help);
  prometheus::Family<prometheus::Histogram>& NewHistogram(
      const std::string& name, const std::string& help);

  std::shared_ptr<prometheus::Registry> registry_;
  // Every family's name, help and type, without series (set in the
  // constructor, read-only after).
  std::vector<prometheus::MetricFamily> declared_;
  prometheus::Family<prometheus::Counter>& started_;
  prometheus::Family<prometheus::Counter>& handled_;
  prometheus::Family<prometheus::Histogram>& handling_seconds_;
  prometheus::Family<prometheus::Counter>& verdicts_;
  // verdicts_' series of FITS, BORDERLINE and DOES_NOT_FIT, by enum value
  // (set in the constructor, never removed; others are looked up).
  std::array<prometheus::Counter*, v1::Verdict_ARRAYSIZE> verdict_counters_{};
  prometheus::Family<prometheus::Gauge>& calibration_error_;
  prometheus::Family<prometheus::Gauge>& said_fits_but_oom_;
  prometheus::Family<prometheus::Gauge>& factor_set_info_;
  prometheus::Family<prometheus::Gauge>& workers_connected_;
  prometheus::Family<prometheus::Gauge>& probes_;
  prometheus::Family<prometheus::Counter>& samples_;
  prometheus::Family<prometheus::Counter>& probe_results_;
  prometheus::Family<prometheus::Counter>& worker_rejections_;
  prometheus::Family<prometheus::Counter>& extender_calls_;
  prometheus::Family<prometheus::Counter>& extender_filtered_out_;
  // "/pkg.Service/Method" of every registered service's methods.
  const std::set<std::string> known_methods_;
  absl::Mutex info_mu_;
  std::string current_version_ ABSL_GUARDED_BY(info_mu_);
  // Versions with factor-set series and their page's columns, oldest
  // first; at most kKeptFactorSets (refits come from the network too).
  static constexpr size_t kKeptFactorSets = 16;
  std::deque<std::pair<std::string, std::vector<std::string>>>
      installed_versions_ ABSL_GUARDED_BY(info_mu_);
  // The GPU series (DCGM_FI_DEV_*, declared as families without series),
  // shared with what /metrics serializes (exported()).
  std::shared_ptr<GpuSeriesTable> gpu_table_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_METRICS_H_
