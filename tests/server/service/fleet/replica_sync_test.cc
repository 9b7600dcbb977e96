// Replica sync without a server: what another planner changes through its
// own handle on the same SQLite file (a cancel, a stored result, a
// re-queue and a claim elsewhere) reaches this planner's watchers and
// withdraws the assignment from the worker connected here.

#include "server/service/fleet/replica_sync.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/service/fleet/fleet_test_store.h"

namespace headroom {
namespace {

class FakeReplica : public ReplicaTarget {
 public:
  std::vector<std::string> WatchedProbes() override { return watched; }
  std::vector<RunningAssignment> RunningAssignments() override {
    return running;
  }
  void ProbeChanged(const v1::Probe& probe) override {
    changed.push_back(probe);
  }
  void Withdraw(const RunningAssignment& run,
                const std::string& reason) override {
    withdrawn.push_back({run.assignment, reason});
  }

  std::vector<std::string> watched;
  std::vector<RunningAssignment> running;
  std::vector<v1::Probe> changed;
  std::vector<std::pair<std::string, std::string>> withdrawn;
};

v1::Probe QueuedProbe() {
  v1::Probe probe;
  probe.set_gpu("L4");
  probe.set_template_("gpt2");
  probe.mutable_request()->set_gpu("L4");
  probe.mutable_request()->add_batches(8);
  return probe;
}

class ReplicaSyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto here = file_.Open();
    ASSERT_TRUE(here.ok()) << here.status();
    here_ = *std::move(here);
    auto other = file_.Open();
    ASSERT_TRUE(other.ok()) << other.status();
    other_ = *std::move(other);
    auto probe = here_->AddProbe(QueuedProbe());
    ASSERT_TRUE(probe.ok()) << probe.status();
    auto claimed = here_->ClaimProbe("w-here", {"L4"}, {}, 1000, 60000);
    ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
    probe_ = **claimed;
    fake_.watched = {probe_.id()};
    fake_.running = {{"w-here", probe_.id(), probe_.assignment_id()}};
  }

  TempStoreFile file_;
  std::unique_ptr<Store> here_;
  std::unique_ptr<Store> other_;
  v1::Probe probe_;
  FakeReplica fake_;
};

TEST_F(ReplicaSyncTest, NothingIsWithdrawnWhileTheStoreAgrees) {
  ReplicaSync sync(here_.get(), &fake_);
  sync.Poll();
  ASSERT_EQ(fake_.changed.size(), 1u);
  EXPECT_EQ(fake_.changed[0].state(), v1::Probe::RUNNING);
  EXPECT_TRUE(fake_.withdrawn.empty());
}

TEST_F(ReplicaSyncTest, ACancelThroughAnotherHandleIsSeenAndWithdrawn) {
  ASSERT_TRUE(other_->CancelProbe(probe_.id()).ok());
  ReplicaSync sync(here_.get(), &fake_);
  sync.Poll();
  ASSERT_EQ(fake_.changed.size(), 1u);
  EXPECT_EQ(fake_.changed[0].state(), v1::Probe::CANCELLED);
  ASSERT_EQ(fake_.withdrawn.size(), 1u);
  EXPECT_EQ(fake_.withdrawn[0].first, probe_.assignment_id());
  EXPECT_EQ(fake_.withdrawn[0].second,
            "probe " + probe_.id() + " is CANCELLED in the store");
}

TEST_F(ReplicaSyncTest, AResultStoredThroughAnotherHandleReachesWatchers) {
  v1::BatchResult batch;
  batch.set_batch(8);
  batch.set_peak_allocated_gb(2.5);
  ASSERT_TRUE(other_
                  ->RecordProbeResult(probe_.id(), probe_.assignment_id(),
                                      "w-here", "k-1", batch, std::nullopt)
                  .ok());
  ReplicaSync sync(here_.get(), &fake_);
  sync.Poll();
  ASSERT_EQ(fake_.changed.size(), 1u);
  ASSERT_EQ(fake_.changed[0].results_size(), 1);
  EXPECT_EQ(fake_.changed[0].results(0).peak_allocated_gb(), 2.5);
  EXPECT_TRUE(fake_.withdrawn.empty());
}

TEST_F(ReplicaSyncTest, ARequeueAndAClaimElsewhereWithdrawTheOldAssignment) {
  // The lease ran out as another replica saw it, and a worker there took it.
  auto requeued = other_->RequeueExpired(1000 + 60001);
  ASSERT_TRUE(requeued.ok()) << requeued.status();
  ASSERT_EQ(requeued->size(), 1u);
  auto claimed = other_->ClaimProbe("w-there", {"L4"}, {}, 70000, 60000);
  ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
  ReplicaSync sync(here_.get(), &fake_);
  sync.Poll();
  ASSERT_EQ(fake_.withdrawn.size(), 1u);
  EXPECT_EQ(fake_.withdrawn[0].second,
            "probe " + probe_.id() +
                " is RUNNING under another assignment in the store");
}

TEST(WithdrawalReasonTest, SaysWhatTheStoreHas) {
  const RunningAssignment running{"w", "p-1", "p-1.1"};
  v1::Probe stored;
  stored.set_state(v1::Probe::RUNNING);
  stored.set_assignment_id("p-1.1");
  EXPECT_EQ(WithdrawalReason(running, stored), "");
  stored.set_state(v1::Probe::QUEUED);
  stored.clear_assignment_id();
  EXPECT_EQ(WithdrawalReason(running, stored),
            "probe p-1 is QUEUED in the store");
}

}  // namespace
}  // namespace headroom
