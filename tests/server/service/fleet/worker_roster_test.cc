// The workers connected to a planner, without a server: streams not bound
// to a call (what they are sent waits in the reactor), a real
// PlannerMetrics. Who may take a worker id, what the dispatcher and the
// listings see, and what a stream's end leaves to store.

#include "server/service/fleet/worker_roster.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service/background_worker.h"

namespace headroom {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

v1::WorkerHello Hello(const std::string& id, const std::string& running = "") {
  v1::WorkerHello hello;
  hello.set_worker_id(id);
  hello.set_hostname("host-" + id);
  hello.add_executors("torch");
  hello.set_running_assignment_id(running);
  for (uint32_t index : {0u, 1u}) {
    v1::GpuDevice& gpu = *hello.add_gpus();
    gpu.set_index(index);
    gpu.set_name("NVIDIA L4");
    gpu.set_uuid("GPU-" + id + "-" + std::to_string(index));
  }
  return hello;
}

class WorkerRosterTest : public ::testing::Test {
 protected:
  // A stream of a caller that proved `identity` ("" on an open planner).
  std::unique_ptr<WorkerStream> Stream(const std::string& identity = "") {
    return std::make_unique<WorkerStream>(nullptr, &executor_, "peer-1",
                                          identity, 16);
  }

  std::optional<HelloRefusal> Register(WorkerStream* stream,
                                       v1::WorkerHello hello,
                                       int64_t now_ms = NowMs()) {
    std::vector<std::string> kinds = StampCatalogGpus(&hello);
    return roster_.Register(stream, hello, std::move(kinds), now_ms,
                            kHeartbeatMs);
  }

  static constexpr int64_t kHeartbeatMs = 5000;
  BackgroundWorker executor_;
  PlannerMetrics metrics_;
  WorkerRoster roster_{&metrics_};
};

TEST_F(WorkerRosterTest, ARegisteredWorkerIsIdleUntilAssigned) {
  auto stream = Stream();
  EXPECT_FALSE(roster_.HelloOf(stream.get()).has_value());
  EXPECT_FALSE(Register(stream.get(), Hello("w-1")).has_value());
  ASSERT_TRUE(roster_.HelloOf(stream.get()).has_value());
  EXPECT_EQ(roster_.HelloOf(stream.get())->gpus(0).catalog_gpu(), "L4");

  std::vector<IdleWorker> idle = roster_.Idle();
  ASSERT_EQ(idle.size(), 1u);
  EXPECT_EQ(idle[0].worker, "w-1");
  EXPECT_THAT(idle[0].gpu_kinds, ElementsAre("L4", "L4"));
  EXPECT_THAT(idle[0].executors, ElementsAre("torch"));
  ASSERT_EQ(roster_.Connected().size(), 1u);
  EXPECT_EQ(roster_.Connected()[0].gpus.size(), 2u);

  v1::Probe probe;
  probe.set_id("p-1");
  probe.set_assignment_id("p-1.1");
  EXPECT_TRUE(roster_.Assign("w-1", probe, v1::Assignment()));
  EXPECT_FALSE(roster_.Assign("w-1", probe, v1::Assignment()));
  EXPECT_FALSE(roster_.Assign("w-unknown", probe, v1::Assignment()));
  EXPECT_THAT(roster_.Idle(), IsEmpty());
  ASSERT_EQ(roster_.Running().size(), 1u);
  EXPECT_EQ(roster_.Running()[0].worker, "w-1");
  EXPECT_EQ(roster_.Running()[0].probe, "p-1");
  EXPECT_EQ(roster_.Running()[0].assignment, "p-1.1");

  // Withdrawn only while it is still the running one.
  EXPECT_FALSE(roster_.Withdraw("w-1", "p-1.2", "lease lost"));
  EXPECT_TRUE(roster_.Withdraw("w-1", "p-1.1", "lease lost"));
  EXPECT_THAT(roster_.Running(), IsEmpty());

  // The worker's own word ends it too; an operator's cancel whatever runs.
  EXPECT_TRUE(roster_.Assign("w-1", probe, v1::Assignment()));
  roster_.AssignmentDone(stream.get(), "p-1.0");
  EXPECT_EQ(roster_.Running().size(), 1u);
  roster_.AssignmentDone(stream.get(), "p-1.1");
  EXPECT_THAT(roster_.Running(), IsEmpty());
  EXPECT_TRUE(roster_.Assign("w-1", probe, v1::Assignment()));
  roster_.Cancel("w-1", "p-1.1", "probe cancelled by an operator");
  EXPECT_EQ(roster_.Idle().size(), 1u);
}

TEST_F(WorkerRosterTest, AHelloWithARunningAssignmentIsBusy) {
  auto stream = Stream();
  EXPECT_FALSE(Register(stream.get(), Hello("w-1", "p-9.2")).has_value());
  EXPECT_THAT(roster_.Idle(), IsEmpty());
  ASSERT_EQ(roster_.Running().size(), 1u);
  EXPECT_EQ(roster_.Running()[0].assignment, "p-9.2");
}

TEST_F(WorkerRosterTest, ALiveConnectionKeepsItsIdOnAnOpenPlanner) {
  auto first = Stream();
  auto second = Stream();
  const int64_t now = NowMs();
  // The generation (what the extender's node inventory is kept by) moves
  // when the registered workers change, and only then.
  const uint64_t start = roster_.generation();
  ASSERT_FALSE(Register(first.get(), Hello("w-1"), now).has_value());
  EXPECT_EQ(roster_.generation(), start + 1);
  std::optional<HelloRefusal> twice = Register(first.get(), Hello("w-1"));
  ASSERT_TRUE(twice.has_value());
  EXPECT_EQ(twice->reason, WorkerRejection::kDuplicateHello);

  std::optional<HelloRefusal> live = Register(second.get(), Hello("w-1"), now);
  ASSERT_TRUE(live.has_value());
  EXPECT_EQ(live->reason, WorkerRejection::kAlreadyConnected);
  EXPECT_EQ(live->status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(roster_.generation(), start + 1);  // refused: nothing changed

  // Silent for over two heartbeats (a half-open connection): replaced.
  EXPECT_FALSE(
      Register(second.get(), Hello("w-1"), now + 3 * kHeartbeatMs).has_value());
  EXPECT_EQ(roster_.Connected().size(), 1u);
  EXPECT_EQ(roster_.generation(), start + 2);
  // The replaced stream's end stores nothing and leaves the new one.
  EXPECT_FALSE(roster_.Remove(first.get(), now).has_value());
  EXPECT_EQ(roster_.Connected().size(), 1u);
  EXPECT_EQ(roster_.generation(), start + 2);
  std::optional<v1::WorkerStatus> gone = roster_.Remove(second.get(), now + 1);
  ASSERT_TRUE(gone.has_value());
  EXPECT_EQ(gone->hello().worker_id(), "w-1");
  EXPECT_FALSE(gone->connected());
  EXPECT_EQ(gone->last_seen_unix_ms(), now + 1);
  EXPECT_THAT(roster_.Connected(), IsEmpty());
  EXPECT_EQ(roster_.generation(), start + 3);
}

TEST_F(WorkerRosterTest, OnlyTheSameIdentityReplacesAProvenWorker) {
  auto first = Stream("cert:w-1");
  auto stranger = Stream("token:w-2");
  auto again = Stream("cert:w-1");
  const int64_t now = NowMs();
  ASSERT_FALSE(Register(first.get(), Hello("w-1"), now).has_value());
  std::optional<HelloRefusal> refused =
      Register(stranger.get(), Hello("w-1"), now + 10 * kHeartbeatMs);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason, WorkerRejection::kIdentityMismatch);
  EXPECT_EQ(refused->status,
            absl::PermissionDeniedError("worker w-1 is connected as "
                                        "'cert:w-1'; 'token:w-2' may not "
                                        "replace it"));
  // The same identity replaces even a live connection (a restart).
  EXPECT_FALSE(Register(again.get(), Hello("w-1"), now).has_value());
  EXPECT_FALSE(roster_.Remove(first.get(), now).has_value());
}

TEST_F(WorkerRosterTest, HeartbeatsWriteLastSeenAtMostOncePerPeriod) {
  auto stream = Stream();
  EXPECT_FALSE(roster_.Heartbeat(stream.get(), false, 1000, 30000));
  ASSERT_FALSE(Register(stream.get(), Hello("w-1"), 1000).has_value());
  std::optional<WorkerRoster::Heard> soon =
      roster_.Heartbeat(stream.get(), false, 2000, 30000);
  ASSERT_TRUE(soon.has_value());
  EXPECT_EQ(soon->worker, "w-1");
  EXPECT_FALSE(soon->refresh.has_value());
  std::optional<WorkerRoster::Heard> later =
      roster_.Heartbeat(stream.get(), true, 31000, 30000);
  ASSERT_TRUE(later.has_value() && later->refresh.has_value());
  EXPECT_TRUE(later->refresh->connected());
  EXPECT_EQ(later->refresh->last_seen_unix_ms(), 31000);
  // Draining: connected, but given nothing new.
  EXPECT_THAT(roster_.Idle(), IsEmpty());
  ASSERT_EQ(roster_.Connected().size(), 1u);
  EXPECT_TRUE(roster_.Connected()[0].draining);
}

TEST_F(WorkerRosterTest, TheListingSaysWhoIsConnectedHereOrRecently) {
  auto stream = Stream();
  ASSERT_FALSE(Register(stream.get(), Hello("w-1")).has_value());
  v1::SampleBatch samples;
  samples.add_samples()->set_gpu_index(1);
  samples.add_samples()->set_gpu_index(7);  // no such GPU: counted only
  EXPECT_TRUE(roster_.Samples(stream.get(), samples, kHeartbeatMs));
  auto unregistered = Stream();
  EXPECT_FALSE(roster_.Samples(unregistered.get(), samples, kHeartbeatMs));

  std::vector<v1::WorkerStatus> stored(3);
  *stored[0].mutable_hello() = Hello("w-1");
  stored[1].mutable_hello()->set_worker_id("w-stale");
  stored[1].set_connected(true);
  stored[1].set_last_seen_unix_ms(100000 - 60001);
  stored[2].mutable_hello()->set_worker_id("w-elsewhere");
  stored[2].set_connected(true);
  stored[2].set_last_seen_unix_ms(100000 - 59000);
  roster_.MarkLive(&stored, 100000, 30000);
  EXPECT_TRUE(stored[0].connected());
  EXPECT_EQ(stored[0].samples_received(), 2u);
  EXPECT_EQ(stored[0].last_seen_unix_ms(), 100000);
  EXPECT_FALSE(stored[1].connected());
  EXPECT_TRUE(stored[2].connected());
}

TEST_F(WorkerRosterTest, AfterCloseEveryHelloIsRefused) {
  auto stream = Stream();
  roster_.Close(grpc::Status(grpc::StatusCode::UNAVAILABLE, "stopping"));
  std::optional<HelloRefusal> refused = Register(stream.get(), Hello("w-1"));
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->status,
            absl::UnavailableError("hello refused: the planner is shutting "
                                   "down"));
  EXPECT_THAT(roster_.Connected(), IsEmpty());
}

}  // namespace
}  // namespace headroom
