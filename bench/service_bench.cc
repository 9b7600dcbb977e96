// Microbenchmarks of the service layer's per-call work outside the core:
// the Prometheus updates every RPC (and every CheckFit verdict) makes.

#include <string>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "server/service/metrics.h"

namespace headroom {
namespace {

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
  const std::string method = "/headroom.v1.Planner/CheckFit";
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
