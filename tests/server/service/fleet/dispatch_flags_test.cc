// The dispatch policy's flags: a value out of range stops the planner at
// start with INVALID_ARGUMENT naming the flag and its range; values in
// range start it.

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/service/planner_app.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using testing::TestPlannerConfig;

TEST(DispatchFlagsTest, AValueOutOfRangeIsRefusedAtStart) {
  struct Case {
    std::function<void(PlannerConfig*)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](PlannerConfig* c) { c->dispatch_ms = 5; },
       "dispatch_ms = 5 is out of range; allowed 10..60000"},
      {[](PlannerConfig* c) { c->max_handbacks = 0; },
       "max_handbacks = 0 is out of range; allowed 1..1000"},
      {[](PlannerConfig* c) { c->expiries_per_pass = 100001; },
       "expiries_per_pass = 100001 is out of range; allowed 1..100000"},
      {[](PlannerConfig* c) { c->worker_last_seen_ms = 999; },
       "worker_last_seen_ms = 999 is out of range; allowed 1000..3600000"},
      {[](PlannerConfig* c) { c->worker_max_unhandled = 8; },
       "worker_max_unhandled = 8 is out of range; allowed 16..1000000"},
      {[](PlannerConfig* c) { c->probe_counts_ms = 99; },
       "probe_counts_ms = 99 is out of range; allowed 100..60000"},
      {[](PlannerConfig* c) { c->store_threads = 0; },
       "store_threads = 0 is out of range; allowed 1..64"},
      {[](PlannerConfig* c) { c->store_queue = 100001; },
       "store_queue = 100001 is out of range; allowed 1..100000"},
      {[](PlannerConfig* c) { c->db_pool = 65; },
       "--db_pool must be 1..64 store connections; got 65"},
  };
  for (const Case& bad : cases) {
    PlannerConfig config = TestPlannerConfig();
    bad.set(&config);
    auto app = PlannerApp::Start(config);
    ASSERT_FALSE(app.ok()) << bad.message;
    EXPECT_EQ(app.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(app.status().message(), bad.message);
  }
}

TEST(DispatchFlagsTest, ValuesInRangeStartThePlanner) {
  PlannerConfig config = TestPlannerConfig();
  config.dispatch_ms = 20;
  config.max_handbacks = 1;
  config.expiries_per_pass = 5;
  config.worker_last_seen_ms = 1000;
  config.worker_max_unhandled = 16;
  config.probe_counts_ms = 100;
  auto app = PlannerApp::Start(config);
  ASSERT_TRUE(app.ok()) << app.status();
  EXPECT_GT((*app)->grpc_port(), 0);
}

}  // namespace
}  // namespace headroom
