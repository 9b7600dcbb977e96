#include "server/service/metrics.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/build_info.h"
#include "google/protobuf/descriptor.h"
#include "headroom/v1/fleet.pb.h"
#include "headroom/v1/planner.pb.h"
#include "server/service/grpc_status.h"

namespace headroom {
namespace {

using grpc::experimental::InterceptionHookPoints;

constexpr char kDcgmFbUsed[] = "DCGM_FI_DEV_FB_USED";
constexpr char kDcgmPower[] = "DCGM_FI_DEV_POWER_USAGE";
constexpr char kDcgmEnergy[] = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION";

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// go-grpc-prometheus splits "/headroom.v1.Fit/CheckFit" into service
// "headroom.v1.Fit" and method "CheckFit".
void SplitMethod(const std::string& full, std::string* service,
                 std::string* method) {
  const size_t slash = full.rfind('/');
  if (slash == std::string::npos || slash == 0) {
    *service = "unknown";
    *method = full;
    return;
  }
  *service = full.substr(1, slash - 1);
  *method = full.substr(slash + 1);
}

// Every method of the services this planner registers. Health and
// reflection are named as well as looked up: their descriptors may not be
// linked in.
std::set<std::string> KnownMethods() {
  std::set<std::string> methods = {
      "/grpc.health.v1.Health/Check",
      "/grpc.health.v1.Health/Watch",
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
  };
  const google::protobuf::DescriptorPool* pool =
      google::protobuf::DescriptorPool::generated_pool();
  // The request types' files hold headroom.v1's services (and link them
  // in): Fit, Calibration, Energy, Density, Microbatch, Fleet.
  std::vector<const google::protobuf::ServiceDescriptor*> services = {
      pool->FindServiceByName("grpc.health.v1.Health"),
      pool->FindServiceByName("grpc.reflection.v1alpha.ServerReflection")};
  for (const google::protobuf::FileDescriptor* file :
       {v1::CheckFitRequest::descriptor()->file(),
        v1::WorkerMessage::descriptor()->file()}) {
    for (int i = 0; i < file->service_count(); ++i) {
      services.push_back(file->service(i));
    }
  }
  for (const google::protobuf::ServiceDescriptor* service : services) {
    if (service == nullptr) continue;
    for (int i = 0; i < service->method_count(); ++i) {
      methods.insert(absl::StrCat("/", service->full_name(), "/",
                                  service->method(i)->name()));
    }
  }
  return methods;
}

// A label value from the network, at most kMaxLabelBytes.
std::string Bounded(const std::string& value) {
  return value.substr(0, PlannerMetrics::kMaxLabelBytes);
}

const char* TypeName(grpc::experimental::ServerRpcInfo::Type type) {
  using Type = grpc::experimental::ServerRpcInfo::Type;
  switch (type) {
    case Type::UNARY:
      return "unary";
    case Type::CLIENT_STREAMING:
      return "client_stream";
    case Type::SERVER_STREAMING:
      return "server_stream";
    case Type::BIDI_STREAMING:
      return "bidi_stream";
    default:
      return "unknown";
  }
}

class MetricsInterceptor : public grpc::experimental::Interceptor {
 public:
  MetricsInterceptor(PlannerMetrics* metrics,
                     grpc::experimental::ServerRpcInfo* info)
      : metrics_(metrics),
        type_(TypeName(info->type())),
        method_(info->method() ? info->method() : "unknown"),
        start_(std::chrono::steady_clock::now()) {
    metrics_->RpcStarted(type_, method_);
  }

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start_)
                                 .count();
      metrics_->RpcHandled(type_, method_, GrpcCodeName(status.error_code()),
                           seconds);
    }
    methods->Proceed();
  }

 private:
  PlannerMetrics* metrics_;
  std::string type_;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

class MetricsInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MetricsInterceptorFactory(PlannerMetrics* metrics)
      : metrics_(metrics) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new MetricsInterceptor(metrics_, info);
  }

 private:
  PlannerMetrics* metrics_;
};

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  // Finer than go-grpc-prometheus' defaults at the low end: answers here
  // take tens of microseconds.
  static const auto* const buckets =
      new prometheus::Histogram::BucketBoundaries{
          0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10};
  return *buckets;
}

}  // namespace

// The DCGM_FI_DEV_* series: one per GPU label set, with the workers using
// it and its latest reading. Shared by PlannerMetrics and what /metrics
// serializes; thread-safe.
class GpuSeriesTable {
 public:
  explicit GpuSeriesTable(std::function<int64_t()> now_ms)
      : now_ms_(std::move(now_ms)) {}

  static std::map<std::string, std::string> OtherLabels() {
    return {{"gpu", "other"},
            {"UUID", "other"},
            {"modelName", "other"},
            {"Hostname", "other"}};
  }

  // Counts one more user of `labels`; false (nothing counted) when `cap`
  // label sets are in use already and `labels` is not one of them.
  bool Use(const std::map<std::string, std::string>& labels, size_t cap) {
    absl::MutexLock lock(&mu_);
    auto it = series_.find(labels);
    if (it != series_.end()) {
      ++it->second.users;
      return true;
    }
    if (users_ >= cap) return false;
    series_[labels].users = 1;
    ++users_;
    return true;
  }

  // One user fewer; the series goes with its last user.
  void Release(const std::map<std::string, std::string>& labels) {
    absl::MutexLock lock(&mu_);
    auto it = series_.find(labels);
    if (it == series_.end() || --it->second.users > 0) return;
    series_.erase(it);
    --users_;
  }

  void Sample(const std::map<std::string, std::string>& labels, double fb_mib,
              std::optional<double> power_w, std::optional<double> energy_mj,
              int64_t fallback_period_ms) {
    const int64_t now = now_ms_();
    absl::MutexLock lock(&mu_);
    auto it = series_.find(labels);
    if (it == series_.end()) {
      // The shared "other" bucket has no users; anything else unknown is a
      // released GPU whose late sample must not bring it back.
      if (labels != OtherLabels()) return;
      it = series_.emplace(labels, Series{}).first;
    }
    Series& s = it->second;
    if (s.reading && !Stale(s, now) && labels != OtherLabels()) {
      // The period is the longest of the last kIntervals intervals between
      // arrivals (a burst does not shorten it); a gap that let the series go
      // stale starts it again. The shared "other" bucket, fed by many GPUs,
      // keeps the fallback.
      s.intervals_ms[s.next_interval] = now - s.last_ms;
      s.next_interval = (s.next_interval + 1) % kIntervals;
      s.period_ms =
          *std::max_element(s.intervals_ms.begin(), s.intervals_ms.end());
    } else {
      s.intervals_ms.fill(0);
      s.period_ms = 0;
    }
    s.reading = true;
    s.last_ms = now;
    s.fallback_period_ms = std::max<int64_t>(1, fallback_period_ms);
    s.fb_used_mib = fb_mib;
    s.power_w = power_w;
    if (energy_mj.has_value()) s.energy_mj = energy_mj;
  }

  // The three families with every series that has a fresh reading; a stale
  // one loses its reading (it comes back with the GPU's next sample).
  std::vector<prometheus::MetricFamily> Collect() {
    prometheus::MetricFamily fb{kDcgmFbUsed,
                                "Framebuffer memory used (in MiB).",
                                prometheus::MetricType::Gauge,
                                {}};
    prometheus::MetricFamily power{
        kDcgmPower, "Power draw (in W).", prometheus::MetricType::Gauge, {}};
    prometheus::MetricFamily energy{
        kDcgmEnergy,
        "Total energy consumption since boot (in mJ).",
        prometheus::MetricType::Counter,
        {}};
    const int64_t now = now_ms_();
    absl::MutexLock lock(&mu_);
    for (auto& [labels, s] : series_) {
      if (!s.reading) continue;
      if (Stale(s, now)) {
        s.reading = false;
        s.power_w.reset();
        s.energy_mj.reset();
        continue;
      }
      prometheus::ClientMetric metric;
      for (const auto& [name, value] : labels) {
        metric.label.push_back({name, value});
      }
      prometheus::ClientMetric m = metric;
      m.gauge.value = s.fb_used_mib;
      fb.metric.push_back(m);
      if (s.power_w.has_value()) {
        m = metric;
        m.gauge.value = *s.power_w;
        power.metric.push_back(m);
      }
      if (s.energy_mj.has_value()) {
        m = metric;
        m.counter.value = *s.energy_mj;
        energy.metric.push_back(m);
      }
    }
    std::vector<prometheus::MetricFamily> families;
    for (prometheus::MetricFamily* f : {&fb, &power, &energy}) {
      if (!f->metric.empty()) families.push_back(std::move(*f));
    }
    return families;
  }

 private:
  static constexpr size_t kIntervals = 4;
  struct Series {
    int users = 0;
    bool reading = false;
    int64_t last_ms = 0;
    // 0 until two samples arrived (or while they came in the same ms).
    int64_t period_ms = 0;
    std::array<int64_t, kIntervals> intervals_ms{};
    size_t next_interval = 0;
    int64_t fallback_period_ms = 1;
    double fb_used_mib = 0;
    std::optional<double> power_w;
    std::optional<double> energy_mj;
  };

  static bool Stale(const Series& s, int64_t now) {
    const int64_t period = s.period_ms > 0 ? s.period_ms : s.fallback_period_ms;
    return now - s.last_ms > 2 * period;
  }

  const std::function<int64_t()> now_ms_;
  absl::Mutex mu_;
  std::map<std::map<std::string, std::string>, Series> series_
      ABSL_GUARDED_BY(mu_);
  // Label sets with users (the "other" bucket not counted).
  size_t users_ ABSL_GUARDED_BY(mu_) = 0;
};

const char* WorkerRejectionName(WorkerRejection reason) {
  switch (reason) {
    case WorkerRejection::kNotLeased:
      return "not_leased";
    case WorkerRejection::kUnknownBatch:
      return "unknown_batch";
    case WorkerRejection::kImplausibleValue:
      return "implausible_value";
    case WorkerRejection::kMalformed:
      return "malformed";
    case WorkerRejection::kHandbackLimit:
      return "handback_limit";
    case WorkerRejection::kDuplicateHello:
      return "duplicate_hello";
    case WorkerRejection::kIdentityMismatch:
      return "identity_mismatch";
    case WorkerRejection::kInventoryTooLarge:
      return "inventory_too_large";
    case WorkerRejection::kAlreadyConnected:
      return "already_connected";
  }
  return "malformed";
}

// The registry's families, then each declared family that has no series
// as its HELP and TYPE lines alone: prometheus-cpp leaves a family without
// series out of Collect(), so without this a family would be missing from
// /metrics until its first series.
class EveryFamily : public prometheus::Collectable {
 public:
  EveryFamily(std::shared_ptr<prometheus::Registry> registry,
              std::vector<prometheus::MetricFamily> declared,
              std::shared_ptr<GpuSeriesTable> gpus)
      : registry_(std::move(registry)),
        declared_(std::move(declared)),
        gpus_(std::move(gpus)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families = registry_->Collect();
    for (prometheus::MetricFamily& family : gpus_->Collect()) {
      families.push_back(std::move(family));
    }
    std::set<std::string> present;
    for (const prometheus::MetricFamily& family : families) {
      present.insert(family.name);
    }
    for (const prometheus::MetricFamily& family : declared_) {
      if (present.count(family.name) == 0) families.push_back(family);
    }
    return families;
  }

 private:
  const std::shared_ptr<prometheus::Registry> registry_;
  const std::vector<prometheus::MetricFamily> declared_;
  const std::shared_ptr<GpuSeriesTable> gpus_;
};

PlannerMetrics::PlannerMetrics(std::function<int64_t()> now_ms)
    : registry_(std::make_shared<prometheus::Registry>()),
      started_(NewCounter("grpc_server_started_total",
                          "Total number of RPCs started on the server.")),
      handled_(NewCounter("grpc_server_handled_total",
                          "Total number of RPCs completed on the server, "
                          "regardless of success or failure.")),
      handling_seconds_(
          NewHistogram("grpc_server_handling_seconds",
                       "Histogram of response latency (seconds) of gRPC that "
                       "had been application-level handled by the server.")),
      verdicts_(NewCounter("headroom_fit_verdicts_total",
                           "Fit verdicts given, by outcome.")),
      calibration_error_(
          NewGauge("headroom_calibration_median_abs_error",
                   "Median absolute relative error of a factor set's "
                   "calibration page, per prediction column.")),
      said_fits_but_oom_(
          NewGauge("headroom_calibration_said_fits_but_oom",
                   "Held-out checks a factor set called fitting that went "
                   "OOM (run x card).")),
      factor_set_info_(NewGauge("headroom_factor_set_info",
                                "1 for the factor set answers use now.")),
      workers_connected_(NewGauge("headroom_workers_connected",
                                  "Worker daemons connected to this planner.")),
      probes_(NewGauge("headroom_probes", "Probes in the store, by state.")),
      samples_(NewCounter("headroom_fleet_samples_total",
                          "GPU samples received from workers.")),
      probe_results_(NewCounter("headroom_probe_results_total",
                                "Batch results received from workers, by "
                                "outcome.")),
      worker_rejections_(
          NewCounter("headroom_worker_messages_rejected_total",
                     "Worker messages the planner refused (nothing of them "
                     "stored), by reason.")),
      extender_calls_(NewCounter("headroom_extender_calls_total",
                                 "Kubernetes scheduler extender calls, by verb "
                                 "and outcome (fail_open: answered without "
                                 "deciding, the budget ran out).")),
      extender_filtered_out_(
          NewCounter("headroom_extender_nodes_filtered_total",
                     "Nodes the extender's filter dropped.")),
      known_methods_(KnownMethods()),
      gpu_table_(std::make_shared<GpuSeriesTable>(
          now_ms != nullptr ? std::move(now_ms) : SteadyNowMs)) {
  // Declared here (HELP and TYPE until a GPU reads); gpu_table_ exports
  // their series. Energy is a counter, as dcgm-exporter exports it.
  // (The names spelled out, as kDcgm* spell them, so tests/deploy finds
  // every registered family by its New* call.)
  NewGauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).");
  NewGauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).");
  NewCounter("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
             "Total energy consumption since boot (in mJ).");
  // The build, as Prometheus' *_build_info convention has it: always 1, the
  // identity in the labels (common/build_info.h).
  const BuildInfo& build = GetBuildInfo();
  NewGauge("headroom_build_info",
           "The planner's build: its version, commit (git describe "
           "--always --dirty) and CMake build type; always 1.")
      .Add({{"version", build.version},
            {"commit", build.commit},
            {"build_type", build.build_type}})
      .Set(1);
  for (const char* verb : {"filter", "prioritize"}) {
    for (const char* outcome : {"answered", "untouched", "bad_request",
                                "bad_annotation", "fail_open"}) {
      extender_calls_.Add({{"verb", verb}, {"outcome", outcome}});
    }
  }
  extender_filtered_out_.Add({});
  workers_connected_.Add({}).Set(0);
  // Every probe state has a series from the first scrape (0 until the
  // fleet's first count), so dashboards never see the family missing.
  for (int state = v1::Probe::QUEUED; state <= v1::Probe::CANCELLED; ++state) {
    probes_
        .Add({{"state",
               v1::Probe::State_Name(static_cast<v1::Probe::State>(state))}})
        .Set(0);
  }
  samples_.Add({});
  for (const char* outcome : kProbeOutcomes) {
    probe_results_.Add({{"outcome", outcome}});
  }
  for (WorkerRejection reason : kAllWorkerRejections) {
    worker_rejections_.Add({{"reason", WorkerRejectionName(reason)}});
  }
  for (v1::Verdict verdict : {v1::FITS, v1::BORDERLINE, v1::DOES_NOT_FIT}) {
    verdict_counters_[verdict] =
        &verdicts_.Add({{"verdict", v1::Verdict_Name(verdict)}});
  }
}

prometheus::Family<prometheus::Counter>& PlannerMetrics::NewCounter(
    const std::string& name, const std::string& help) {
  declared_.push_back({name, help, prometheus::MetricType::Counter, {}});
  return prometheus::BuildCounter().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Gauge>& PlannerMetrics::NewGauge(
    const std::string& name, const std::string& help) {
  declared_.push_back({name, help, prometheus::MetricType::Gauge, {}});
  return prometheus::BuildGauge().Name(name).Help(help).Register(*registry_);
}

prometheus::Family<prometheus::Histogram>& PlannerMetrics::NewHistogram(
    const std::string& name, const std::string& help) {
  declared_.push_back({name, help, prometheus::MetricType::Histogram, {}});
  return prometheus::BuildHistogram().Name(name).Help(help).Register(
      *registry_);
}

std::shared_ptr<const prometheus::Collectable> PlannerMetrics::exported()
    const {
  return std::make_shared<EveryFamily>(registry_, declared_, gpu_table_);
}

void PlannerMetrics::RpcStarted(const std::string& type,
                                const std::string& method) {
  std::string service = "unknown", name = "unknown";
  if (known_methods_.count(method) > 0) SplitMethod(method, &service, &name);
  started_
      .Add({{"grpc_type", type},
            {"grpc_service", service},
            {"grpc_method", name}})
      .Increment();
}

void PlannerMetrics::RpcHandled(const std::string& type,
                                const std::string& method,
                                const std::string& code, double seconds) {
  std::string service = "unknown", name = "unknown";
  if (known_methods_.count(method) > 0) SplitMethod(method, &service, &name);
  handled_
      .Add({{"grpc_type", type},
            {"grpc_service", service},
            {"grpc_method", name},
            {"grpc_code", code}})
      .Increment();
  handling_seconds_
      .Add({{"grpc_type", type},
            {"grpc_service", service},
            {"grpc_method", name}},
           LatencyBuckets())
      .Observe(seconds);
}

void PlannerMetrics::Verdict(const std::string& verdict) {
  verdicts_.Add({{"verdict", verdict}}).Increment();
}

void PlannerMetrics::CountVerdicts(const v1::CheckFitResponse& answer) {
  for (const v1::TargetResult& target : answer.targets()) {
    for (int verdict : target.verdicts()) {
      prometheus::Counter* counter =
          verdict >= 0 && verdict < v1::Verdict_ARRAYSIZE
              ? verdict_counters_[verdict]
              : nullptr;
      if (counter != nullptr) {
        counter->Increment();
      } else {
        Verdict(v1::Verdict_Name(verdict));
      }
    }
  }
}

void PlannerMetrics::FactorSetInstalled(const v1::FactorSet& set) {
  for (const auto& [column, summary] : set.page().summary()) {
    calibration_error_.Add({{"factor_set", set.version()}, {"column", column}})
        .Set(summary.median_abs_err());
  }
  auto heldout = set.page().summary().find("ours_heldout");
  if (heldout != set.page().summary().end()) {
    said_fits_but_oom_.Add({{"factor_set", set.version()}})
        .Set(heldout->second.said_fits_but_oom());
  }
  absl::MutexLock lock(&info_mu_);
  if (!current_version_.empty()) {
    factor_set_info_.Add({{"factor_set", current_version_}}).Set(0);
  }
  factor_set_info_.Add({{"factor_set", set.version()}}).Set(1);
  current_version_ = set.version();
  // The oldest version's series go once kKeptFactorSets have some.
  installed_versions_.erase(
      std::remove_if(installed_versions_.begin(), installed_versions_.end(),
                     [&](const auto& v) { return v.first == set.version(); }),
      installed_versions_.end());
  std::vector<std::string> columns;
  for (const auto& [column, summary] : set.page().summary()) {
    columns.push_back(column);
  }
  installed_versions_.emplace_back(set.version(), std::move(columns));
  while (installed_versions_.size() > kKeptFactorSets) {
    const auto [old, old_columns] = installed_versions_.front();
    installed_versions_.pop_front();
    const auto remove = [&](prometheus::Family<prometheus::Gauge>& family,
                            const std::map<std::string, std::string>& labels) {
      // Has() alone does not say; Add() then Remove() drops it either way.
      family.Remove(&family.Add(labels));
    };
    remove(factor_set_info_, {{"factor_set", old}});
    remove(said_fits_but_oom_, {{"factor_set", old}});
    for (const std::string& column : old_columns) {
      remove(calibration_error_, {{"factor_set", old}, {"column", column}});
    }
  }
}

void PlannerMetrics::WorkersConnected(int64_t count) {
  workers_connected_.Add({}).Set(static_cast<double>(count));
}

void PlannerMetrics::ProbeStates(
    const std::vector<std::pair<std::string, int64_t>>& counts) {
  for (const auto& [state, count] : counts) {
    probes_.Add({{"state", state}}).Set(static_cast<double>(count));
  }
}

void PlannerMetrics::ExtenderCall(const std::string& verb,
                                  const std::string& outcome) {
  extender_calls_.Add({{"verb", verb}, {"outcome", outcome}}).Increment();
}

void PlannerMetrics::ExtenderNodesFilteredOut(int64_t count) {
  extender_filtered_out_.Add({}).Increment(static_cast<double>(count));
}

void PlannerMetrics::SamplesReceived(uint64_t count) {
  samples_.Add({}).Increment(static_cast<double>(count));
}

void PlannerMetrics::ProbeResultReceived(const std::string& outcome) {
  probe_results_.Add({{"outcome", outcome}}).Increment();
}

void PlannerMetrics::WorkerMessageRejected(WorkerRejection reason) {
  worker_rejections_.Add({{"reason", WorkerRejectionName(reason)}}).Increment();
}

PlannerMetrics::GpuGauges PlannerMetrics::GpuSeries(
    const std::string& gpu_index, const std::string& uuid,
    const std::string& model_name, const std::string& hostname,
    bool simulated) {
  GpuGauges gauges;
  gauges.labels = {{"gpu", Bounded(gpu_index)},
                   {"UUID", Bounded(uuid)},
                   {"modelName", Bounded(model_name)},
                   {"Hostname", Bounded(hostname)}};
  if (simulated) gauges.labels.emplace("simulated", "true");
  gauges.other = !gpu_table_->Use(gauges.labels, kMaxGpuSeries);
  if (gauges.other) gauges.labels = GpuSeriesTable::OtherLabels();
  return gauges;
}

void PlannerMetrics::ReleaseGpuSeries(const GpuGauges& gauges) {
  // The "other" bucket stays: GPUs past the cap share it.
  if (gauges.other) return;
  gpu_table_->Release(gauges.labels);
}

void PlannerMetrics::GpuSample(const GpuGauges& gauges, double fb_used_mib,
                               std::optional<double> power_w,
                               std::optional<double> total_energy_mj,
                               int64_t fallback_period_ms) {
  gpu_table_->Sample(gauges.labels, fb_used_mib, power_w, total_energy_mj,
                     fallback_period_ms);
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
PlannerMetrics::InterceptorFactory() {
  return std::make_unique<MetricsInterceptorFactory>(this);
}

}  // namespace headroom
