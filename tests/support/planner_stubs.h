#ifndef HEADROOM_TESTS_SUPPORT_PLANNER_STUBS_H_
#define HEADROOM_TESTS_SUPPORT_PLANNER_STUBS_H_

// One stub per headroom.v1 domain service on one channel, for tests that
// call several domains of one planner (CheckFit, then Refit, then ...).

#include <memory>

#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"

namespace headroom::testing {

struct PlannerStubs {
  explicit PlannerStubs(const std::shared_ptr<grpc::ChannelInterface>& channel)
      : fit(v1::Fit::NewStub(channel)),
        calibration(v1::Calibration::NewStub(channel)),
        energy(v1::Energy::NewStub(channel)),
        density(v1::Density::NewStub(channel)),
        microbatch(v1::Microbatch::NewStub(channel)) {}

  std::unique_ptr<v1::Fit::Stub> fit;
  std::unique_ptr<v1::Calibration::Stub> calibration;
  std::unique_ptr<v1::Energy::Stub> energy;
  std::unique_ptr<v1::Density::Stub> density;
  std::unique_ptr<v1::Microbatch::Stub> microbatch;
};

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_PLANNER_STUBS_H_
