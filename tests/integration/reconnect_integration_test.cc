// A worker reconnects within its backoff after a planner restart (issue 32,
// item 7), with the real binaries on loopback: the planner is killed and
// started again on the same port, and the worker, with --backoff_max_ms=
// 1000, is connected to the new one well before gRPC's own reconnect
// backoff (1 s growing to 120 s, polled every 5 s when nobody waits on the
// channel) would have let it: 17-18 s were seen before.

#include <unistd.h>

#include <string>

#include "gtest/gtest.h"
#include "tests/support/fleet_client.h"
#include "tests/support/sim_fleet.h"
#include "tests/support/sqlite_files.h"

namespace headroom {
namespace {

using ::headroom::testing::WaitFor;
using ::headroom::testing::WorkersConnected;

TEST(ReconnectIntegrationTest, AWorkerReconnectsWithinItsBackoffAfterRestart) {
  ::headroom::testing::SimFleet sim("reconnect");
  ASSERT_TRUE(sim.StartPlanner({}));
  ASSERT_TRUE(sim.StartWorker(
      "sim-l4", {"--sim_gpu=L4", "--sample_ms=50", "--backoff_max_ms=1000"}));
  // The restarted planner keeps a store of its own: no worker is connected
  // there until one says hello to it (the first planner's store would say
  // its workers are, by their fresh last-seen times).
  const std::string fresh =
      ::testing::TempDir() + "/reconnect-fresh-" + std::to_string(getpid());
  RemoveSqliteFiles(fresh + ".db");
  ASSERT_TRUE(sim.RestartPlanner({"--db=" + fresh + ".db"}));
  // The worker's backoff is at most 1 s and the channel retries on it:
  // connected within a few of those. The deadline only bounds the test;
  // gRPC's defaults took 17-18 s.
  EXPECT_TRUE(WaitFor([&] { return WorkersConnected(sim.fleet())["sim-l4"]; },
                      /*seconds=*/8))
      << "the worker did not reconnect to the restarted planner within 8 s";
  RemoveSqliteFiles(fresh + ".db");
}

}  // namespace
}  // namespace headroom
