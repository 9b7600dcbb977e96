// Microbenchmarks of the service layer's per-call work outside the core:
// the Prometheus updates every RPC (and every CheckFit verdict) makes, and
// the scheduler extender's filter over a thousand nodes.

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "base/json_io.h"
#include "benchmark/benchmark.h"
#include "core/calibration/calibrate.h"
#include "core/evidence/evidence.h"
#include "core/planner/fit_planner.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "server/service/metrics.h"
#include "server/service/scheduler_extender.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

// The planner over the shipped runs with their evidence, built once.
struct Planned {
  std::unique_ptr<FitPlanner> planner;
  std::shared_ptr<const Evidence> evidence;
};

const Planned* GetPlanned() {
  static const Planned* planned = []() -> Planned* {
    auto catalog = LoadModelCatalog(kRoot + "/models");
    auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
    if (!catalog.ok() || !runs.ok()) return nullptr;
    auto shared = std::make_shared<const ModelCatalog>(std::move(*catalog));
    auto fitted = Calibrate(*runs, *shared, FitOptions{}, "bench");
    if (!fitted.ok()) return nullptr;
    auto* p = new Planned;
    p->planner = std::make_unique<FitPlanner>(shared, fitted->factor_set, 0.95);
    p->evidence = Evidence::Build(*runs, *shared, p->planner->priors());
    return p;
  }();
  return planned;
}

// A filter body as kube-scheduler sends it: bert-base at batch 64 against
// 1,000 nodes of eight GPU kinds, each node with GPU Feature Discovery's
// labels and some of the usual others.
std::string ThousandNodeBody() {
  const char* products[][2] = {{"NVIDIA-L4", "23034"},
                               {"NVIDIA-A10G", "23028"},
                               {"NVIDIA-H100-80GB-HBM3", "81559"},
                               {"NVIDIA-H200", "143771"},
                               {"NVIDIA-A100-SXM4-40GB", "40960"},
                               {"NVIDIA-A100-SXM4-80GB", "81920"},
                               {"Tesla-T4", "15360"},
                               {"NVIDIA-L40S", "46068"}};
  std::string items;
  for (int i = 0; i < 1000; ++i) {
    const auto& gpu = products[i % 8];
    if (!items.empty()) items += ",";
    items += "{\"metadata\":{\"name\":\"node-" + std::to_string(i) +
             "\",\"labels\":{\"kubernetes.io/hostname\":\"node-" +
             std::to_string(i) +
             "\",\"kubernetes.io/os\":\"linux\",\"topology.kubernetes.io/"
             "zone\":\"zone-a\",\"nvidia.com/gpu.count\":\"8\","
             "\"nvidia.com/gpu.product\":\"" +
             gpu[0] + "\",\"nvidia.com/gpu.memory\":\"" + gpu[1] +
             "\",\"nvidia.com/cuda.driver.major\":\"550\"}},\"status\":{"
             "\"capacity\":{\"cpu\":\"96\",\"memory\":\"1056Gi\","
             "\"nvidia.com/gpu\":\"8\"},\"allocatable\":{\"cpu\":\"95\","
             "\"memory\":\"1050Gi\",\"nvidia.com/gpu\":\"8\"}}}";
  }
  return "{\"Pod\":{\"metadata\":{\"name\":\"train\",\"namespace\":"
         "\"ml\",\"annotations\":{\"headroom.dev/model\":\"bert-base\","
         "\"headroom.dev/batch\":\"64\"}},\"spec\":{\"containers\":[{"
         "\"name\":\"t\",\"resources\":{\"limits\":{\"nvidia.com/gpu\":"
         "\"1\"}}}]}},\"Nodes\":{\"items\":[" +
         items + "]},\"NodeNames\":null}";
}

// Times each iteration and reports its p50 and p99 in microseconds.
template <typename Call>
void TimeEach(benchmark::State& state, Call call) {
  std::vector<double> us;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    call();
    us.push_back(std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(us.begin(), us.end());
  if (us.empty()) return;
  state.counters["p50_us"] = us[us.size() / 2];
  state.counters["p99_us"] = us[std::min(us.size() - 1, us.size() * 99 / 100)];
}

// The extender's whole filter call (parse, decide on its pool, answer)
// over 1,000 nodes, as the HTTP handler runs it.
void BM_ExtenderFilter1000Nodes(benchmark::State& state) {
  const Planned* planned = GetPlanned();
  if (planned == nullptr) {
    state.SkipWithError("cannot load models/ or data/memory-runs.jsonl");
    return;
  }
  PlannerMetrics metrics;
  SchedulerExtender::Options options;
  options.budget = absl::Seconds(10);  // measure the work, never fail open
  SchedulerExtender extender(
      [planned](const v1::CheckFitRequest& request) {
        return planned->planner->CheckFit(request, planned->evidence.get());
      },
      [] { return nullptr; }, &metrics, options);
  const std::string body = ThousandNodeBody();
  state.counters["body_kb"] = static_cast<double>(body.size()) / 1000;
  TimeEach(state, [&] {
    HttpServer::Answer answer = extender.Filter(body);
    benchmark::DoNotOptimize(answer);
  });
}
BENCHMARK(BM_ExtenderFilter1000Nodes)->Iterations(300);

// The same job as one plain CheckFit on the eight kinds.
void BM_CheckFitSameJobEightKinds(benchmark::State& state) {
  const Planned* planned = GetPlanned();
  if (planned == nullptr) {
    state.SkipWithError("cannot load models/ or data/memory-runs.jsonl");
    return;
  }
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.add_batches(64);
  for (const char* gpu : {"L4", "A10G", "H100", "H200", "T4", "A100-80GB"}) {
    request.add_targets()->set_gpu(gpu);
  }
  // The A100-40GB and the L40S as the extender reads their labels.
  request.add_targets()->set_memory_gb(42.94);
  request.add_targets()->set_memory_gb(48.30);
  TimeEach(state, [&] {
    auto answer = planned->planner->CheckFit(request, planned->evidence.get());
    benchmark::DoNotOptimize(answer);
  });
}
BENCHMARK(BM_CheckFitSameJobEightKinds)->Iterations(3000);

// One headroom_verdicts_total update; CheckFit makes one per verdict
// (batches x targets, 9 for the load generator's request).
void BM_MetricsVerdict(benchmark::State& state) {
  PlannerMetrics metrics;
  const std::string verdict = "FITS";
  for (auto _ : state) metrics.Verdict(verdict);
}
BENCHMARK(BM_MetricsVerdict);

// The interceptor's finish-side update every RPC makes, Ping included.
void BM_MetricsRpcHandled(benchmark::State& state) {
  PlannerMetrics metrics;
  const std::string type = "unary";
  const std::string method = "/headroom.v1.Fit/CheckFit";
  const std::string code = "OK";
  for (auto _ : state) metrics.RpcHandled(type, method, code, 1e-4);
}
BENCHMARK(BM_MetricsRpcHandled);

// One uncontended absl::Mutex lock/unlock, which PlannerService::planner()
// takes per CheckFit; arg 1 turns deadlock detection off first.
void BM_AbslMutexLock(benchmark::State& state) {
  absl::SetMutexDeadlockDetectionMode(state.range(0) == 0
                                          ? absl::OnDeadlockCycle::kAbort
                                          : absl::OnDeadlockCycle::kIgnore);
  absl::Mutex mu;
  for (auto _ : state) {
    absl::MutexLock lock(&mu);
    benchmark::ClobberMemory();
  }
}
BENCHMARK(BM_AbslMutexLock)->Arg(0)->Arg(1);

}  // namespace
}  // namespace headroom
