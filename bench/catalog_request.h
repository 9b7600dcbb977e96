#ifndef HEADROOM_BENCH_CATALOG_REQUEST_H_
#define HEADROOM_BENCH_CATALOG_REQUEST_H_

// The catalog CheckFit the benchmarks time: bert-base by name at batches
// {8, 64} on the L4 and the H100.

#include "headroom/v1/planner.pb.h"

namespace headroom::bench {

inline v1::CheckFitRequest CatalogRequest() {
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.add_batches(8);
  request.add_batches(64);
  request.add_targets()->set_gpu("L4");
  request.add_targets()->set_gpu("H100");
  return request;
}

}  // namespace headroom::bench

#endif  // HEADROOM_BENCH_CATALOG_REQUEST_H_
