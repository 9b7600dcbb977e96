#ifndef HEADROOM_BENCH_CATALOG_LATENCY_H_
#define HEADROOM_BENCH_CATALOG_LATENCY_H_

// Times the catalog CheckFit (catalog_request.h) one call at a time, for the
// isolation benchmarks' phases alone and under load.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <vector>

#include "bench/catalog_request.h"
#include "bench/closed_loop.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"

namespace headroom::bench {

struct Latency {
  double p50_ms = 0;
  double p99_ms = 0;
  size_t calls = 0;
  size_t failed = 0;
};

// Sequential catalog CheckFits for `seconds` (at most 1,000,000 calls).
inline Latency MeasureCatalog(v1::Fit::Stub* stub, double seconds) {
  using Ms = std::chrono::duration<double, std::milli>;
  const v1::CheckFitRequest request = CatalogRequest();
  std::vector<double> ms;
  Latency out;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end && ms.size() < 1000000) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    v1::CheckFitResponse response;
    const auto start = Clock::now();
    const grpc::Status status = stub->CheckFit(&context, request, &response);
    ms.push_back(Ms(Clock::now() - start).count());
    if (!status.ok()) ++out.failed;
  }
  std::sort(ms.begin(), ms.end());
  out.calls = ms.size();
  if (!ms.empty()) {
    out.p50_ms = ms[ms.size() / 2];
    out.p99_ms = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
  }
  return out;
}

}  // namespace headroom::bench

#endif  // HEADROOM_BENCH_CATALOG_LATENCY_H_
