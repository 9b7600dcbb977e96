#include "server/store/probe_transitions.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

v1::Probe Queued(const std::string& id) {
  v1::Probe probe;
  probe.set_id(id);
  probe.set_state(v1::Probe::QUEUED);
  probe.set_created_unix_ms(1000000);
  return probe;
}

TEST(ProbeTransitionsTest, EachClaimIsANewAttemptWithItsOwnAssignmentId) {
  v1::Probe probe = Queued("p-7");
  MarkClaimed(&probe, "gpu-node-1", 5000);
  EXPECT_EQ(probe.state(), v1::Probe::RUNNING);
  EXPECT_EQ(probe.attempts(), 1u);
  EXPECT_EQ(probe.assignment_id(), "p-7.1");
  EXPECT_EQ(probe.worker(), "gpu-node-1");
  EXPECT_EQ(probe.updated_unix_ms(), 5000);

  MarkRequeued(&probe, 6000);
  EXPECT_EQ(probe.state(), v1::Probe::QUEUED);
  EXPECT_EQ(probe.assignment_id(), "");
  EXPECT_EQ(probe.updated_unix_ms(), 6000);

  MarkClaimed(&probe, "gpu-node-2", 7000);
  EXPECT_EQ(probe.attempts(), 2u);
  EXPECT_EQ(probe.assignment_id(), "p-7.2");
  EXPECT_EQ(probe.worker(), "gpu-node-2");
}

TEST(ProbeTransitionsTest, OnlyTheRunningAssignmentFinishesTheProbe) {
  v1::Probe probe = Queued("p-1");
  MarkClaimed(&probe, "w", 1);
  // A stale assignment (an earlier attempt) changes nothing.
  EXPECT_FALSE(MarkFinished(&probe, "p-1.0", v1::Probe::SUCCEEDED, "", "",
                            /*requeue=*/false));
  EXPECT_EQ(probe.state(), v1::Probe::RUNNING);

  EXPECT_TRUE(MarkFinished(&probe, "p-1.1", v1::Probe::FAILED, "oom at 64",
                           "{\"k\":1}", /*requeue=*/false));
  EXPECT_EQ(probe.state(), v1::Probe::FAILED);
  EXPECT_EQ(probe.error(), "oom at 64");
  EXPECT_EQ(probe.details_json(), "{\"k\":1}");
  // Finished already: a second finish of the same assignment is refused.
  EXPECT_FALSE(MarkFinished(&probe, "p-1.1", v1::Probe::SUCCEEDED, "", "",
                            /*requeue=*/false));
  EXPECT_EQ(probe.state(), v1::Probe::FAILED);
}

TEST(ProbeTransitionsTest, AFinishThatRequeuesDropsTheAssignment) {
  v1::Probe probe = Queued("p-2");
  MarkClaimed(&probe, "w", 1);
  EXPECT_TRUE(MarkFinished(&probe, "p-2.1", v1::Probe::SUCCEEDED, "", "",
                           /*requeue=*/true));
  EXPECT_EQ(probe.state(), v1::Probe::QUEUED);
  EXPECT_EQ(probe.assignment_id(), "");
  EXPECT_EQ(probe.error(), "");
}

TEST(ProbeTransitionsTest, ALeaseIsTheRunningAssignmentOfItsWorker) {
  v1::Probe probe = Queued("p-3");
  EXPECT_THAT(std::string(CheckLeased(probe, "p-3.1", "w").message()),
              HasSubstr("probe p-3 is QUEUED, not running"));
  MarkClaimed(&probe, "w", 1);
  EXPECT_TRUE(CheckLeased(probe, "p-3.1", "w").ok());
  const absl::Status other = CheckLeased(probe, "p-3.1", "intruder");
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(other.message(),
            "probe p-3 runs as assignment p-3.1 on worker w, not as p-3.1 on "
            "intruder");
  EXPECT_FALSE(CheckLeased(probe, "p-3.0", "w").ok());
}

// A result journaled through a reconnect longer than the lease: kept when
// its worker held the probe's last lease, refused from anyone else.
TEST(ProbeTransitionsTest, AResultOutlivingItsLeaseIsKeptOnlyFromItsWorker) {
  v1::Probe probe = Queued("p-4");
  MarkClaimed(&probe, "w", 1);
  MarkRequeued(&probe, 2);  // the lease ran out
  EXPECT_TRUE(CheckResultLease(probe, "p-4.1", "w").ok());
  EXPECT_FALSE(CheckLeased(probe, "p-4.1", "w").ok());
  for (const auto& [assignment, worker] :
       std::vector<std::pair<std::string, std::string>>{
           {"p-4.1", "intruder"},
           {"p-4.2", "w"},  // no such attempt
           {"p-4.0", "w"},
           {"p-5.1", "w"},  // another probe's
           {"p-4.1x", "w"},
           {"p-4.", "w"}}) {
    const absl::Status refused = CheckResultLease(probe, assignment, worker);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition)
        << assignment << " " << worker;
    EXPECT_THAT(std::string(refused.message()),
                HasSubstr("probe p-4 is QUEUED, not running"));
  }
  // Taken again by the same worker: its earlier attempt's results count.
  MarkClaimed(&probe, "w", 3);
  EXPECT_TRUE(CheckResultLease(probe, "p-4.1", "w").ok());
  EXPECT_TRUE(CheckResultLease(probe, "p-4.2", "w").ok());
  // Taken by another: only that worker's running assignment.
  MarkRequeued(&probe, 4);
  MarkClaimed(&probe, "w2", 5);
  EXPECT_FALSE(CheckResultLease(probe, "p-4.1", "w").ok());
  EXPECT_FALSE(CheckResultLease(probe, "p-4.2", "w").ok());
  EXPECT_TRUE(CheckResultLease(probe, "p-4.3", "w2").ok());
  // Finished: nothing more.
  ASSERT_TRUE(MarkFinished(&probe, "p-4.3", v1::Probe::SUCCEEDED, "", "",
                           /*requeue=*/false));
  EXPECT_FALSE(CheckResultLease(probe, "p-4.3", "w2").ok());
}

TEST(ProbeTransitionsTest, AResultIsKnownByBatchRepetitionAndMode) {
  v1::Probe probe = Queued("p-4");
  v1::BatchResult stored;
  stored.set_batch(16);
  stored.set_repetition(2);
  stored.set_mode("eager");
  *probe.add_results() = stored;
  EXPECT_TRUE(HasResultFor(probe, stored));
  v1::BatchResult other = stored;
  other.set_repetition(3);
  EXPECT_FALSE(HasResultFor(probe, other));
  other = stored;
  other.set_mode("compiled");
  EXPECT_FALSE(HasResultFor(probe, other));
  other = stored;
  other.set_batch(32);
  EXPECT_FALSE(HasResultFor(probe, other));
}

TEST(ProbeTransitionsTest, TheThirdHandBackFailsTheProbe) {
  v1::Probe probe = Queued("p-5");
  for (int i = 1; i <= 2; ++i) {
    MarkClaimed(&probe, "w", i);
    MarkHandedBack(&probe, /*max_handbacks=*/3);
    EXPECT_EQ(probe.state(), v1::Probe::QUEUED) << i;
    EXPECT_EQ(probe.assignment_id(), "") << i;
    EXPECT_EQ(probe.handbacks(), static_cast<uint32_t>(i));
  }
  MarkClaimed(&probe, "w", 3);
  MarkHandedBack(&probe, 3);
  EXPECT_EQ(probe.state(), v1::Probe::FAILED);
  EXPECT_EQ(probe.error(),
            "handed back 3 times (the limit is 3); not queued again");
}

TEST(ProbeTransitionsTest, OnlyAnUntakenQueuedProbeWithAnExpiryExpires) {
  v1::Probe probe = Queued("p-6");
  EXPECT_EQ(ExpiryDeadlineMs(probe), 0);  // no expires_s
  probe.mutable_request()->set_expires_s(60);
  EXPECT_EQ(ExpiryDeadlineMs(probe), 1000000 + 60000);

  EXPECT_FALSE(MarkExpired(&probe, 1000000 + 59999, "too long"));
  EXPECT_EQ(probe.state(), v1::Probe::QUEUED);
  EXPECT_TRUE(MarkExpired(&probe, 1000000 + 60000, "too long"));
  EXPECT_EQ(probe.state(), v1::Probe::FAILED);
  EXPECT_EQ(probe.error(), "too long");
  EXPECT_EQ(probe.updated_unix_ms(), 1000000 + 60000);

  // A probe a worker has taken once never expires, even back in the queue.
  v1::Probe taken = Queued("p-8");
  taken.mutable_request()->set_expires_s(60);
  MarkClaimed(&taken, "w", 1);
  MarkRequeued(&taken, 2);
  EXPECT_EQ(ExpiryDeadlineMs(taken), 0);
  EXPECT_FALSE(MarkExpired(&taken, 1000000 + 600000, "too long"));
  EXPECT_EQ(taken.state(), v1::Probe::QUEUED);
}

TEST(ProbeTransitionsTest, OnlyAQueuedOrRunningProbeIsCancelled) {
  v1::Probe queued = Queued("p-9");
  EXPECT_TRUE(MarkCancelled(&queued));
  EXPECT_EQ(queued.state(), v1::Probe::CANCELLED);
  EXPECT_FALSE(MarkCancelled(&queued));

  v1::Probe running = Queued("p-10");
  MarkClaimed(&running, "w", 1);
  EXPECT_TRUE(MarkCancelled(&running));
  EXPECT_EQ(running.state(), v1::Probe::CANCELLED);

  v1::Probe done = Queued("p-11");
  done.set_state(v1::Probe::SUCCEEDED);
  EXPECT_FALSE(MarkCancelled(&done));
  EXPECT_EQ(done.state(), v1::Probe::SUCCEEDED);
}

}  // namespace
}  // namespace headroom
