// Validation of what a worker names itself and its results with: the ids
// of a hello, a certificate's identity, and a result's key and probe id,
// each refused with its reason and what was wrong; when a hello may take a
// worker id another connection holds; what a hello's cards are counted as.

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/fleet/worker_reports.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

v1::WorkerHello Hello(const std::string& id) {
  v1::WorkerHello hello;
  hello.set_worker_id(id);
  return hello;
}

TEST(FleetIdTest, AllowsHostAndPodNamesOnly) {
  EXPECT_TRUE(CheckFleetId("gpu-node-1.pod_a:0", "hello.worker_id").ok());
  const absl::Status empty = CheckFleetId("", "hello.worker_id");
  EXPECT_EQ(empty.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(empty.message(),
            "hello.worker_id must be 1..128 characters; got 0");
  EXPECT_EQ(CheckFleetId(std::string(129, 'a'), "id").message(),
            "id must be 1..128 characters; got 129");
  EXPECT_EQ(CheckFleetId("a b", "id").message(),
            "id may hold letters, digits, '.', '_', '-' and ':' only");
  EXPECT_FALSE(CheckFleetId("w/../x", "id").ok());
}

TEST(CheckHelloTest, AWellFormedHelloPasses) {
  v1::WorkerHello hello = Hello("w-1");
  hello.set_node_name("node-1");
  EXPECT_EQ(CheckHello(hello, ""), std::nullopt);
  EXPECT_EQ(CheckHello(hello, "cert:w-1"), std::nullopt);
  // A worker token is named for its worker (issue 32).
  EXPECT_EQ(CheckHello(hello, "token:w-1"), std::nullopt);
}

TEST(CheckHelloTest, BadIdsAreMalformed) {
  std::optional<Rejection> bad = CheckHello(Hello("w 1"), "");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kMalformed);
  EXPECT_THAT(bad->detail, HasSubstr("hello.worker_id may hold"));

  v1::WorkerHello node = Hello("w-1");
  node.set_node_name(std::string(200, 'n'));
  bad = CheckHello(node, "");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kMalformed);
  EXPECT_EQ(bad->detail, "hello.node_name must be 1..128 characters; got 200");
}

TEST(CheckHelloTest, AnInventoryBeyondTheBoundsIsTooLarge) {
  v1::WorkerHello hello = Hello("w-1");
  for (int i = 0; i <= kMaxGpusPerWorker; ++i) hello.add_gpus();
  std::optional<Rejection> bad = CheckHello(hello, "");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kInventoryTooLarge);
  EXPECT_THAT(bad->detail, HasSubstr("gpus"));
}

TEST(CheckHelloTest, ACertificateSaysHelloAsItsWorkerOnly) {
  std::optional<Rejection> bad = CheckHello(Hello("w-2"), "cert:w-1");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kIdentityMismatch);
  EXPECT_EQ(bad->detail,
            "hello.worker_id 'w-2' is not the worker 'cert:w-1' this "
            "connection's credential is for");
  // A worker token alike.
  bad = CheckHello(Hello("w-2"), "token:w-1");
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kIdentityMismatch);
}

TEST(CheckResultIdsTest, NeedsAKeyAndAProbeId) {
  v1::ProbeResult result;
  result.set_key("k-1");
  result.set_probe_id("p-1");
  EXPECT_EQ(CheckResultIds(result), std::nullopt);

  result.set_key("");
  std::optional<Rejection> bad = CheckResultIds(result);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kMalformed);
  EXPECT_EQ(bad->detail, "result.key must be 1..256 characters; got 0");

  result.set_key(std::string(257, 'k'));
  EXPECT_EQ(CheckResultIds(result)->detail,
            "result.key must be 1..256 characters; got 257");

  result.set_key("k-1");
  result.set_probe_id("p 1");
  bad = CheckResultIds(result);
  ASSERT_TRUE(bad.has_value());
  EXPECT_EQ(bad->reason, WorkerRejection::kMalformed);
  EXPECT_THAT(bad->detail, HasSubstr("result.probe_id may hold"));
}

TEST(RefuseHelloTest, ALiveConnectionKeepsItsIdOnAnOpenPlanner) {
  EXPECT_FALSE(RefuseHello("w-1", "", false, false, std::nullopt, 5000));
  const HeldConnection live{"", "ipv4:10.0.0.1:5000", 10000};
  std::optional<HelloRefusal> refused =
      RefuseHello("w-1", "", false, false, live, 5000);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason, WorkerRejection::kAlreadyConnected);
  EXPECT_EQ(refused->status,
            absl::AlreadyExistsError(
                "worker w-1 is connected and alive from ipv4:10.0.0.1:5000; a "
                "second connection may replace it only after 2 heartbeats of "
                "silence"));
  // Silent past two heartbeats: a half-open connection gives way.
  const HeldConnection silent{"", "ipv4:10.0.0.1:5000", 10001};
  EXPECT_FALSE(RefuseHello("w-1", "", false, false, silent, 5000));
  // One side proved nothing: the open rule.
  const HeldConnection proven{"cert:w-1", "peer", 0};
  EXPECT_EQ(RefuseHello("w-1", "", false, false, proven, 5000)->reason,
            WorkerRejection::kAlreadyConnected);
}

TEST(RefuseHelloTest, OnlyTheSameIdentityReplacesAProvenConnection) {
  const HeldConnection held{"cert:w-1", "peer", 0};
  EXPECT_FALSE(RefuseHello("w-1", "cert:w-1", false, false, held, 5000));
  std::optional<HelloRefusal> other =
      RefuseHello("w-1", "token:w-1", false, false, held, 5000);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->reason, WorkerRejection::kIdentityMismatch);
  EXPECT_EQ(other->status,
            absl::PermissionDeniedError("worker w-1 is connected as "
                                        "'cert:w-1'; 'token:w-1' may not "
                                        "replace it"));
}

TEST(RefuseHelloTest, NoneWhileStoppingAndOnePerStream) {
  std::optional<HelloRefusal> stopping =
      RefuseHello("w-1", "", true, true, std::nullopt, 5000);
  ASSERT_TRUE(stopping.has_value());
  EXPECT_EQ(
      stopping->status,
      absl::UnavailableError("hello refused: the planner is shutting down"));
  std::optional<HelloRefusal> twice =
      RefuseHello("w-1", "", false, true, std::nullopt, 5000);
  ASSERT_TRUE(twice.has_value());
  EXPECT_EQ(twice->reason, WorkerRejection::kDuplicateHello);
  EXPECT_EQ(twice->status, absl::FailedPreconditionError(
                               "hello refused: sent twice on one stream"));
}

TEST(StampCatalogGpusTest, OneKindPerGpuEmptyForUnknownCards) {
  v1::WorkerHello hello = Hello("w-1");
  hello.add_gpus()->set_name("NVIDIA L4");
  hello.add_gpus()->set_name("Mystery GPU");
  hello.add_gpus()->set_name("NVIDIA A10G");
  EXPECT_THAT(StampCatalogGpus(&hello),
              ::testing::ElementsAre("L4", "", "A10G"));
  EXPECT_EQ(hello.gpus(0).catalog_gpu(), "L4");
  EXPECT_EQ(hello.gpus(1).catalog_gpu(), "");
}

TEST(NodeTargetsTest, TheFirstCatalogCardOfEachNodeElseItsMemory) {
  v1::WorkerHello l4 = Hello("w-1");
  l4.set_hostname("host-a");
  l4.set_node_name("node-a");
  l4.add_gpus()->set_name("Mystery GPU");
  l4.add_gpus()->set_name("NVIDIA L4");
  v1::WorkerHello second = Hello("w-2");  // the same node: the first counts
  second.set_node_name("node-a");
  second.add_gpus()->set_name("NVIDIA A10G");
  v1::WorkerHello odd = Hello("w-3");  // no node name: its host name
  odd.set_hostname("host-b");
  v1::GpuDevice& card = *odd.add_gpus();
  card.set_name("Mystery GPU");
  card.set_memory_bytes(48'000'000'000);
  v1::WorkerHello none = Hello("w-4");  // no GPUs
  none.set_hostname("host-c");
  v1::WorkerHello sim = Hello("w-5");  // a simulated card names no node
  sim.set_node_name("node-sim");
  v1::GpuDevice& fake = *sim.add_gpus();
  fake.set_name("NVIDIA H100 80GB HBM3");
  fake.set_simulated(true);
  const std::map<std::string, v1::Target> targets =
      NodeTargets({l4, second, odd, none, sim}, false);
  ASSERT_EQ(targets.size(), 2u);
  EXPECT_EQ(targets.at("node-a").gpu(), "L4");
  EXPECT_EQ(targets.at("host-b").memory_gb(), 48);
  // Unless the extender was told to take simulated cards.
  const std::map<std::string, v1::Target> with_sim =
      NodeTargets({l4, second, odd, none, sim}, true);
  ASSERT_EQ(with_sim.size(), 3u);
  EXPECT_EQ(with_sim.at("node-sim").gpu(), "H100");
}

TEST(RejectedMessageTest, NamesTheKeyCutTheReasonAndWhy) {
  const v1::PlannerMessage message = RejectedMessage(
      WorkerRejection::kNotLeased, std::string(300, 'k'), "probe p-1 ended");
  EXPECT_EQ(message.rejected().key(), std::string(kMaxResultKeyLength, 'k'));
  EXPECT_EQ(message.rejected().reason(), "not_leased");
  EXPECT_EQ(message.rejected().detail(), "probe p-1 ended");
}

}  // namespace
}  // namespace headroom
