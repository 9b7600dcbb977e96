// The probe queue: claims hand each probe to one worker, leases re-queue a
// vanished worker's probe, results are stored once, and all of it survives
// a reopen; against every store.

#include <optional>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/store/probe_transitions.h"
#include "tests/server/store/store_fixture.h"

namespace headroom {
namespace {

class FleetStoreTest : public StoreFixture {};
HEADROOM_INSTANTIATE_FOR_EVERY_STORE(FleetStoreTest);

v1::Probe QueuedProbe(const std::string& gpu, const std::string& executor) {
  v1::Probe probe;
  probe.set_gpu(gpu);
  probe.set_template_("gpt2");
  probe.mutable_request()->set_executor(executor);
  probe.mutable_request()->add_batches(8);
  return probe;
}

v1::BatchResult Result(uint32_t batch, double peak_gb) {
  v1::BatchResult result;
  result.set_batch(batch);
  result.set_peak_allocated_gb(peak_gb);
  return result;
}

TEST_P(FleetStoreTest, EachProbeGoesToOneMatchingWorker) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto l4 = (*store)->AddProbe(QueuedProbe("L4", ""));
  auto h100 = (*store)->AddProbe(QueuedProbe("H100", "sim"));
  ASSERT_TRUE(l4.ok() && h100.ok());
  EXPECT_EQ(l4->id(), "p-1");
  EXPECT_EQ(h100->id(), "p-2");
  EXPECT_EQ(l4->state(), v1::Probe::QUEUED);

  // An A10G worker can run neither.
  auto none = (*store)->ClaimProbe("w-a10g", {"A10G"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // An H100 worker without the sim executor cannot run p-2.
  none = (*store)->ClaimProbe("w-h100", {"H100"}, {"torch"}, 1000, 500);
  EXPECT_FALSE(none->has_value());

  auto first = (*store)->ClaimProbe("w-l4", {"L4"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(first.ok() && first->has_value());
  EXPECT_EQ((*first)->id(), "p-1");
  EXPECT_EQ((*first)->state(), v1::Probe::RUNNING);
  EXPECT_EQ((*first)->assignment_id(), "p-1.1");
  EXPECT_EQ((*first)->worker(), "w-l4");
  // Claimed once: a second L4 worker finds nothing.
  auto again = (*store)->ClaimProbe("w-l4-b", {"L4"}, {"sim"}, 1000, 500);
  EXPECT_FALSE(again->has_value());
}

// A learning probe (queued by the planner to anchor a prior-only answer)
// waits behind every operator probe, even one queued after it.
TEST_P(FleetStoreTest, LearningProbesRunAfterOperatorProbes) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Probe learning = QueuedProbe("L4", "sim");
  learning.mutable_request()->set_learn_key("mk-0123456789abcdef");
  auto first = (*store)->AddProbe(learning);
  auto second = (*store)->AddProbe(QueuedProbe("L4", "sim"));
  ASSERT_TRUE(first.ok() && second.ok());
  auto claimed = (*store)->ClaimProbe("w-l4", {"L4"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_EQ((*claimed)->id(), second->id());
  claimed = (*store)->ClaimProbe("w-l4b", {"L4"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_EQ((*claimed)->id(), first->id());
  EXPECT_EQ((*claimed)->request().learn_key(), "mk-0123456789abcdef");
}

// A probe needing N GPUs goes only to a worker with N of its kind; one
// that no idle worker can hold does not block the probes behind it.
TEST_P(FleetStoreTest, AMultiGpuProbeGoesOnlyToAWorkerWithEnoughGpus) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Probe four = QueuedProbe("L4", "sim");
  four.mutable_request()->mutable_setup()->set_gpus(4);
  four.mutable_request()->mutable_setup()->set_parallel(
      v1::TrainingSetup::FSDP_FULL);
  auto wide = (*store)->AddProbe(four);
  auto narrow = (*store)->AddProbe(QueuedProbe("L4", "sim"));
  ASSERT_TRUE(wide.ok() && narrow.ok());
  EXPECT_EQ(GpusNeeded(*wide), 4u);
  EXPECT_EQ(GpusNeeded(*narrow), 1u);
  // One L4: p-1 (4 x L4) is skipped, p-2 behind it is claimed.
  auto one = (*store)->ClaimProbe("w-1xl4", {"L4"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(one.ok() && one->has_value()) << one.status();
  EXPECT_EQ((*one)->id(), narrow->id());
  // Three L4s and an H100: still not four of one kind.
  auto three = (*store)->ClaimProbe("w-3xl4", {"L4", "L4", "H100", "L4"},
                                    {"sim"}, 1000, 500);
  ASSERT_TRUE(three.ok());
  EXPECT_FALSE(three->has_value());
  // Four H100s are four GPUs, but not of the kind asked for.
  auto h100s = (*store)->ClaimProbe(
      "w-4xh100", {"H100", "H100", "H100", "H100"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(h100s.ok());
  EXPECT_FALSE(h100s->has_value());
  auto four_l4 = (*store)->ClaimProbe("w-4xl4", {"L4", "L4", "L4", "L4"},
                                      {"sim"}, 1000, 500);
  ASSERT_TRUE(four_l4.ok() && four_l4->has_value()) << four_l4.status();
  EXPECT_EQ((*four_l4)->id(), wide->id());
  EXPECT_EQ((*four_l4)->request().setup().gpus(), 4u);
  EXPECT_EQ((*four_l4)->worker(), "w-4xl4");
  // Re-queued (the lease ran out), it is again only for four.
  ASSERT_EQ((*store)->RequeueExpired(2000)->size(), 2u);
  auto again = (*store)->ClaimProbe("w-1xl4", {"L4"}, {"sim"}, 3000, 500);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ((*again)->id(), narrow->id());
  EXPECT_FALSE((*(*store)->ClaimProbe("w-1xl4b", {"L4"}, {"sim"}, 3000, 500)));
}

// A probe pinned to a worker needs that many GPUs of the worker's most
// numerous kind; a pinned one-GPU probe goes to a worker of any inventory.
TEST_P(FleetStoreTest, APinnedMultiGpuProbeNeedsTheGpusToo) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Probe two = QueuedProbe("", "");
  two.mutable_request()->set_worker("w-pinned");
  two.mutable_request()->mutable_setup()->set_gpus(2);
  ASSERT_TRUE((*store)->AddProbe(two).ok());
  EXPECT_FALSE(
      (*(*store)->ClaimProbe("w-pinned", {"L4", "A10G"}, {}, 10, 100)));
  auto mine =
      (*store)->ClaimProbe("w-pinned", {"L4", "A10G", "L4"}, {}, 10, 100);
  ASSERT_TRUE(mine.ok() && mine->has_value());
  EXPECT_EQ((*mine)->id(), "p-1");
}

// Runs are counted without reading them (the evidence is rebuilt when the
// count changes).
TEST_P(FleetStoreTest, CountRunsFollowsAddRuns) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto none = (*store)->CountRuns();
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, 0);
  v1::MeasuredRun run;
  run.set_template_("gpt2");
  run.set_gpu("L4");
  run.set_batch(8);
  run.set_measured_peak_gb(5.0);
  run.set_model_key("mk-0123456789abcdef");
  ASSERT_TRUE((*store)->AddRuns({run}).ok());
  run.set_batch(16);
  ASSERT_TRUE((*store)->AddRuns({run}).ok());
  auto two = (*store)->CountRuns();
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, 2);
  auto listed = (*store)->ListRuns();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->at(0).model_key(), "mk-0123456789abcdef");
}

TEST_P(FleetStoreTest, PinnedProbeGoesOnlyToItsWorker) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::Probe pinned = QueuedProbe("", "");
  pinned.mutable_request()->set_worker("w-pinned");
  ASSERT_TRUE((*store)->AddProbe(pinned).ok());
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  // Another worker with every GPU skips the pinned p-1 and takes p-2.
  auto other = (*store)->ClaimProbe("w-other", {"L4", ""}, {}, 10, 100);
  ASSERT_TRUE(other.ok() && other->has_value()) << other.status();
  EXPECT_EQ((*other)->id(), "p-2");
  auto mine = (*store)->ClaimProbe("w-pinned", {}, {}, 10, 100);
  ASSERT_TRUE(mine.ok() && mine->has_value());
  EXPECT_EQ((*mine)->id(), "p-1");
  // Cancelled while running; a negative limit lists every probe.
  EXPECT_EQ((*store)->CancelProbe("p-1")->state(), v1::Probe::CANCELLED);
  EXPECT_EQ((*store)->ListProbes(v1::Probe::STATE_UNSPECIFIED, -1)->size(), 2u);
  EXPECT_EQ((*store)->ListProbes(v1::Probe::CANCELLED, 10)->size(), 1u);
}

TEST_P(FleetStoreTest, ExpiredLeaseRequeuesAndOldAssignmentIsIgnored) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  auto claimed = (*store)->ClaimProbe("w1", {"L4"}, {"sim"}, 1000, 500);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  // Renewed to 1800: nothing expires at 1600.
  EXPECT_TRUE((*store)->RenewLease("p-1.1", 1800).ok());
  auto expired = (*store)->RequeueExpired(1600);
  ASSERT_TRUE(expired.ok());
  EXPECT_TRUE(expired->empty());
  expired = (*store)->RequeueExpired(1801);
  ASSERT_EQ(expired->size(), 1u);
  EXPECT_EQ((*expired)[0], "p-1");
  EXPECT_EQ((*store)->RenewLease("p-1.1", 3000).code(),
            absl::StatusCode::kNotFound);

  auto second = (*store)->ClaimProbe("w2", {"L4"}, {"sim"}, 2000, 500);
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->assignment_id(), "p-1.2");
  EXPECT_EQ((*second)->attempts(), 2u);
  // The vanished worker's late finish changes nothing.
  auto late = (*store)->FinishAssignment("p-1", "p-1.1", v1::Probe::FAILED,
                                         "late", "", false);
  ASSERT_TRUE(late.ok());
  EXPECT_EQ(late->state(), v1::Probe::RUNNING);
  auto done = (*store)->FinishAssignment("p-1", "p-1.2", v1::Probe::SUCCEEDED,
                                         "", "", false);
  EXPECT_EQ(done->state(), v1::Probe::SUCCEEDED);
  // A finished probe cannot be cancelled.
  EXPECT_EQ((*store)->CancelProbe("p-1")->state(), v1::Probe::SUCCEEDED);
  EXPECT_EQ((*store)->CancelProbe("p-9").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_P(FleetStoreTest, QueuedProbesPastTheirExpiryFailOnlyUntilTaken) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  // p-1 and p-2 expire 10 s after submission at 1000, p-3 never; p-4
  // expires at 21000.
  for (uint32_t expires_s : {10u, 10u, 0u, 20u}) {
    v1::Probe probe = QueuedProbe("H100", "");
    probe.set_created_unix_ms(1000);
    probe.mutable_request()->set_expires_s(expires_s);
    ASSERT_TRUE((*store)->AddProbe(probe).ok());
  }
  auto none = (*store)->ListExpiredProbes(10999, 100);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());

  // A worker takes p-1 before its expiry: a running probe does not expire,
  // nor does it once its lease re-queues it (the lease rules apply).
  auto claimed = (*store)->ClaimProbe("w1", {"H100"}, {"sim"}, 5000, 500);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  EXPECT_EQ((*claimed)->id(), "p-1");
  ASSERT_EQ((*store)->RequeueExpired(6000)->size(), 1u);
  EXPECT_EQ((*store)->GetProbe("p-1")->state(), v1::Probe::QUEUED);

  // At 11000 only p-2 is past its expiry; the listing changes nothing.
  auto expired = (*store)->ListExpiredProbes(11000, 100);
  ASSERT_TRUE(expired.ok()) << expired.status();
  ASSERT_EQ(expired->size(), 1u);
  EXPECT_EQ((*expired)[0].id(), "p-2");
  EXPECT_EQ((*expired)[0].state(), v1::Probe::QUEUED);
  // The work per pass is bounded by the limit.
  EXPECT_EQ((*store)->ListExpiredProbes(30000, 1)->size(), 1u);
  EXPECT_EQ((*store)->ListExpiredProbes(30000, 100)->size(), 2u);

  auto failed = (*store)->ExpireProbe("p-2", 11000, "expired: test reason");
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), v1::Probe::FAILED);
  EXPECT_EQ(failed->error(), "expired: test reason");
  EXPECT_EQ(failed->updated_unix_ms(), 11000);
  // Stored so: read back, and no longer listed nor claimable.
  EXPECT_EQ((*store)->GetProbe("p-2")->state(), v1::Probe::FAILED);
  EXPECT_TRUE((*store)->ListExpiredProbes(11000, 100)->empty());

  // Not yet past its expiry (p-4), taken by a worker (p-1), never expiring
  // (p-3) or cancelled: ExpireProbe changes nothing.
  EXPECT_EQ((*store)->ExpireProbe("p-4", 11000, "x")->state(),
            v1::Probe::QUEUED);
  EXPECT_EQ((*store)->ExpireProbe("p-1", 11000, "x")->state(),
            v1::Probe::QUEUED);
  EXPECT_EQ((*store)->ExpireProbe("p-3", 99000, "x")->state(),
            v1::Probe::QUEUED);
  ASSERT_EQ((*store)->CancelProbe("p-4")->state(), v1::Probe::CANCELLED);
  auto cancelled = (*store)->ExpireProbe("p-4", 99000, "x");
  EXPECT_EQ(cancelled->state(), v1::Probe::CANCELLED);
  EXPECT_EQ(cancelled->error(), "");
  EXPECT_TRUE((*store)->ListExpiredProbes(99000, 100)->empty());
  EXPECT_EQ((*store)->ExpireProbe("p-9", 99000, "x").status().code(),
            absl::StatusCode::kNotFound);

  // The expiry survives a reopen.
  v1::Probe late = QueuedProbe("H100", "");
  late.set_created_unix_ms(1000);
  late.mutable_request()->set_expires_s(100);
  ASSERT_TRUE((*store)->AddProbe(late).ok());
  store->reset();
  auto reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto after = (*reopened)->ListExpiredProbes(101000, 100);
  ASSERT_TRUE(after.ok()) << after.status();
  ASSERT_EQ(after->size(), 1u);
  EXPECT_EQ((*after)[0].id(), "p-5");
}

TEST_P(FleetStoreTest, ResultsAreStoredOnceWithTheirRun) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  ASSERT_TRUE((*store)->ClaimProbe("w1", {"L4"}, {}, 1000, 500)->has_value());
  v1::MeasuredRun run;
  run.set_template_("gpt2");
  run.set_gpu("L4");
  run.set_batch(8);
  run.set_measured_peak_gb(5.5);
  run.set_source("probe p-1");
  auto first = (*store)->RecordProbeResult("p-1", "p-1.1", "w1", "p-1/8/0",
                                           Result(8, 5.5), run);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(*first);
  auto resent = (*store)->RecordProbeResult("p-1", "p-1.1", "w1", "p-1/8/0",
                                            Result(8, 5.5), run);
  ASSERT_TRUE(resent.ok());
  EXPECT_FALSE(*resent);
  // Another key for the same batch, repetition and mode: still once.
  auto rekeyed = (*store)->RecordProbeResult("p-1", "p-1.1", "w1", "other",
                                             Result(8, 6.5), run);
  ASSERT_TRUE(rekeyed.ok());
  EXPECT_FALSE(*rekeyed);
  EXPECT_EQ((*store)->GetProbe("p-1")->results_size(), 1);
  EXPECT_EQ((*store)->GetProbe("p-1")->results(0).peak_allocated_gb(), 5.5);
  EXPECT_EQ((*store)->ListRuns()->size(), 1u);
  EXPECT_EQ((*store)
                ->RecordProbeResult("p-7", "p-7.1", "w1", "p-7/1/0",
                                    Result(1, 1), run)
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

// Only the worker holding the running assignment may report for it; a key
// stored before stays a duplicate after the lease is gone.
TEST_P(FleetStoreTest, ResultsOutsideTheLeaseAreRefusedAndNotStored) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  const std::optional<v1::MeasuredRun> no_run;
  // Queued, not running: refused.
  auto queued = (*store)->RecordProbeResult("p-1", "p-1.1", "w1", "k",
                                            Result(8, 5), no_run);
  EXPECT_EQ(queued.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(queued.status().message().find("QUEUED"), std::string::npos)
      << queued.status();
  ASSERT_TRUE((*store)->ClaimProbe("w1", {"L4"}, {}, 1000, 500)->has_value());
  // Another worker naming w1's assignment, and w1 naming another one.
  auto other = (*store)->RecordProbeResult("p-1", "p-1.1", "w2", "k",
                                           Result(8, 5), no_run);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(other.status().message().find("w2"), std::string::npos);
  auto stale = (*store)->RecordProbeResult("p-1", "p-1.0", "w1", "k",
                                           Result(8, 5), no_run);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->GetProbe("p-1")->results_size(), 0);

  ASSERT_TRUE(*(*store)->RecordProbeResult("p-1", "p-1.1", "w1", "k",
                                           Result(8, 5), no_run));
  ASSERT_EQ((*store)->RequeueExpired(2000)->size(), 1u);
  // Re-sent after the lease ran out (its ack was lost): a duplicate.
  auto late = (*store)->RecordProbeResult("p-1", "p-1.1", "w1", "k",
                                          Result(8, 5), no_run);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_FALSE(*late);
  // A batch measured under the first assignment and sent again under the
  // second is stored once.
  ASSERT_TRUE((*store)->ClaimProbe("w2", {"L4"}, {}, 2000, 500)->has_value());
  auto rerun = (*store)->RecordProbeResult("p-1", "p-1.2", "w2", "k2",
                                           Result(8, 5.1), no_run);
  ASSERT_TRUE(rerun.ok()) << rerun.status();
  EXPECT_FALSE(*rerun);
  EXPECT_EQ((*store)->GetProbe("p-1")->results_size(), 1);
}

TEST_P(FleetStoreTest, HandBacksAreCountedAndBounded) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  ASSERT_TRUE((*store)->ClaimProbe("w1", {"L4"}, {}, 1000, 5000)->has_value());
  // Only the holder of the lease hands it back.
  EXPECT_EQ((*store)->HandBack("p-1", "p-1.1", "w2", 3).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*store)->GetProbe("p-1")->state(), v1::Probe::RUNNING);
  for (int i = 1; i <= 2; ++i) {
    auto back = (*store)->HandBack("p-1", absl::StrCat("p-1.", i), "w1", 3);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->state(), v1::Probe::QUEUED);
    EXPECT_EQ(back->handbacks(), static_cast<uint32_t>(i));
    ASSERT_TRUE(
        (*store)->ClaimProbe("w1", {"L4"}, {}, 1000, 5000)->has_value());
  }
  auto failed = (*store)->HandBack("p-1", "p-1.3", "w1", 3);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), v1::Probe::FAILED);
  EXPECT_EQ(failed->handbacks(), 3u);
  EXPECT_NE(failed->error().find("handed back 3 times"), std::string::npos)
      << failed->error();
  // Stored so: another store on the same database sees it.
  auto reopened = Open();
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*reopened)->GetProbe("p-1")->state(), v1::Probe::FAILED);
  EXPECT_EQ((*reopened)->GetProbe("p-1")->handbacks(), 3u);
}

TEST_P(FleetStoreTest, QueueAndWorkersSurviveReopen) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
    ASSERT_TRUE((*store)->AddProbe(QueuedProbe("H100", "")).ok());
    ASSERT_TRUE((*store)->ClaimProbe("w1", {"L4"}, {}, 10, 100)->has_value());
    v1::WorkerStatus worker;
    worker.mutable_hello()->set_worker_id("w1");
    worker.mutable_hello()->add_gpus()->set_name("L4");
    worker.set_connected(true);
    ASSERT_TRUE((*store)->PutWorker(worker).ok());
    worker.set_connected(false);
    ASSERT_TRUE((*store)->PutWorker(worker).ok());
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto probes = (*store)->ListProbes(v1::Probe::STATE_UNSPECIFIED, 10);
  ASSERT_EQ(probes->size(), 2u);
  EXPECT_EQ((*probes)[0].id(), "p-2");  // newest first
  EXPECT_EQ((*store)->ListProbes(v1::Probe::RUNNING, 10)->size(), 1u);
  auto counts = (*store)->CountProbes();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(counts->size(), 2u);
  auto workers = (*store)->ListWorkers();
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_FALSE((*workers)[0].connected());
  EXPECT_EQ((*workers)[0].hello().gpus(0).name(), "L4");
}

// The claim rule is the database's, over the whole queue: a probe behind
// more probes than any window of old (1,000) is still found.
TEST_P(FleetStoreTest, AProbeBehindManyOthersNobodyCanRunIsClaimed) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  for (int i = 0; i < 1100; ++i) {
    ASSERT_TRUE((*store)->AddProbe(QueuedProbe("H100", "")).ok());
  }
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  auto claimed = (*store)->ClaimProbe("w-l4", {"L4"}, {}, 1000, 500);
  ASSERT_TRUE(claimed.ok()) << claimed.status();
  ASSERT_TRUE(claimed->has_value());
  EXPECT_EQ((*claimed)->id(), "p-1101");
  EXPECT_FALSE((*(*store)->ClaimProbe("w-l4", {"L4"}, {}, 1000, 500)));
}

// A measured result is stored once, as its measured run: the probe reads it
// back whole, and the store hands back the probe as it is after the result.
TEST_P(FleetStoreTest, AMeasuredResultIsItsRunAndComesBackWhole) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
  ASSERT_TRUE((*store)->ClaimProbe("w1", {"L4"}, {}, 1000, 500)->has_value());
  v1::BatchResult result = Result(8, 5.5);
  result.set_repetition(2);
  result.set_step_seconds(0.25);
  result.set_energy_j(40);
  result.set_samples(17);
  v1::MeasuredRun run;
  run.set_template_("gpt2");
  run.set_gpu("L4");
  run.set_batch(8);
  run.set_measured_peak_gb(5.5);
  run.set_step_seconds(0.25);
  v1::Probe updated;
  auto stored = (*store)->RecordProbeResult("p-1", "p-1.1", "w1", "k1", result,
                                            run, &updated);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(*stored);
  ASSERT_EQ(updated.results_size(), 1);
  EXPECT_EQ(updated.results(0).SerializeAsString(), result.SerializeAsString());
  v1::BatchResult oom;
  oom.set_batch(16);
  oom.set_oom(true);
  ASSERT_TRUE(*(*store)->RecordProbeResult("p-1", "p-1.1", "w1", "k2", oom,
                                           std::nullopt, &updated));
  ASSERT_EQ(updated.results_size(), 2);
  for (auto reopened : {true, false}) {
    if (reopened) {
      store->reset();
      store = Open();
      ASSERT_TRUE(store.ok()) << store.status();
    }
    auto probe = (*store)->GetProbe("p-1");
    ASSERT_TRUE(probe.ok()) << probe.status();
    EXPECT_EQ(probe->SerializeAsString(), updated.SerializeAsString());
    auto listed = (*store)->ListProbes(v1::Probe::RUNNING, 10);
    ASSERT_EQ(listed->size(), 1u);
    EXPECT_EQ((*listed)[0].SerializeAsString(), updated.SerializeAsString());
  }
  EXPECT_EQ((*store)->ListRuns()->size(), 1u);
  // The finished probe still holds both.
  auto finished = (*store)->FinishAssignment(
      "p-1", "p-1.1", v1::Probe::SUCCEEDED, "", "", false);
  ASSERT_TRUE(finished.ok());
  EXPECT_EQ(finished->results_size(), 2);
  EXPECT_EQ(finished->results(1).oom(), true);
}

// A stored row that does not parse is DATA_LOSS in every store.
TEST_P(FleetStoreTest, ACorruptRowIsDataLoss) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AddProbe(QueuedProbe("L4", "")).ok());
    ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), true).ok());
  }
  // 0xff: a field number 31 of a wire type that does not exist.
  ASSERT_TRUE(ExecSql("UPDATE probes SET body = " +
                      std::string(GetParam() == StoreKind::kSqlite
                                      ? "X'ffffffff'"
                                      : "'\\xffffffff'::bytea"))
                  .ok());
  ASSERT_TRUE(ExecSql("UPDATE factor_sets SET body = " +
                      std::string(GetParam() == StoreKind::kSqlite
                                      ? "X'ffffffff'"
                                      : "'\\xffffffff'::bytea"))
                  .ok());
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->GetProbe("p-1").status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ((*store)->CurrentFactorSet().status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace headroom
