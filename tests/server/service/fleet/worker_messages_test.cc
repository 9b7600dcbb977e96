// Validation of what a worker names itself and its results with: the ids
// of a hello, a certificate's identity, and a result's key and probe id,
// each refused with its reason and what was wrong.

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

}  // namespace
}  // namespace headroom
