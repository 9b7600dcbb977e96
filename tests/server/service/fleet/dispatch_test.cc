// The dispatcher without a server: which probe goes to which connected
// worker (pinned, GPU kind, executor, learning probes last, one each for N
// idle workers), leases and expiry under a fake clock, and the assignment
// a claim becomes; on a SQLite store opened through OpenStore.

#include "server/service/fleet/dispatch.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/service/fleet/fleet_test_store.h"

namespace headroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

v1::GpuDevice Gpu(const std::string& driver_name, const std::string& kind,
                  uint32_t index) {
  v1::GpuDevice gpu;
  gpu.set_name(driver_name);
  gpu.set_catalog_gpu(kind);
  gpu.set_index(index);
  return gpu;
}

v1::Probe QueuedProbe(const std::string& gpu, const std::string& executor) {
  v1::Probe probe;
  probe.set_gpu(gpu);
  probe.set_template_("gpt2");
  probe.mutable_request()->set_gpu(gpu);
  probe.mutable_request()->set_executor(executor);
  probe.mutable_request()->add_batches(8);
  probe.set_created_unix_ms(1000);
  return probe;
}

v1::Probe Pinned(const std::string& worker) {
  v1::Probe probe;
  probe.set_template_("gpt2");
  probe.mutable_request()->set_worker(worker);
  probe.mutable_request()->add_batches(8);
  probe.set_created_unix_ms(1000);
  return probe;
}

// The service's side: the workers it reports, what it was sent.
class FakeFleet : public DispatchTarget {
 public:
  struct Sent {
    std::string worker;
    std::string probe;
    v1::Assignment assignment;
  };

  void AddWorker(const std::string& id, std::vector<v1::GpuDevice> gpus,
                 std::vector<std::string> executors) {
    IdleWorker idle{id, {}, executors, gpus};
    for (const v1::GpuDevice& gpu : gpus)
      idle.gpu_kinds.push_back(gpu.catalog_gpu());
    idle_.push_back(idle);
    connected_.push_back({id, gpus, executors, false});
  }

  std::vector<IdleWorker> IdleWorkers() override {
    std::vector<IdleWorker> idle;
    for (const IdleWorker& worker : idle_) {
      if (busy_.count(worker.worker) == 0) idle.push_back(worker);
    }
    return idle;
  }
  std::vector<ConnectedWorker> ConnectedWorkers() override {
    return connected_;
  }
  bool Assign(const std::string& worker, const v1::Probe& probe,
              const v1::Assignment& assignment) override {
    if (!accept) return false;
    busy_[worker] = probe.id();
    sent.push_back({worker, probe.id(), assignment});
    return true;
  }
  void ProbeChanged(const v1::Probe& probe) override {
    changed.push_back(probe);
  }

  // The probe each worker was sent, by worker.
  std::map<std::string, std::string> Placement() const {
    std::map<std::string, std::string> placement;
    for (const Sent& s : sent) placement[s.worker] = s.probe;
    return placement;
  }

  bool accept = true;
  std::vector<Sent> sent;
  std::vector<v1::Probe> changed;

 private:
  std::vector<IdleWorker> idle_;
  std::vector<ConnectedWorker> connected_;
  std::map<std::string, std::string> busy_;
};

class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = file_.Open();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    policy_.lease_ms = 500;
    dispatcher_ = std::make_unique<Dispatcher>(store_.get(), &fleet_, policy_,
                                               [this] { return now_ms_; });
  }

  std::string Add(v1::Probe probe) {
    auto stored = store_->AddProbe(std::move(probe));
    EXPECT_TRUE(stored.ok()) << stored.status();
    return stored.ok() ? stored->id() : "";
  }

  v1::Probe::State StateOf(const std::string& id) {
    auto probe = store_->GetProbe(id);
    EXPECT_TRUE(probe.ok()) << probe.status();
    return probe.ok() ? probe->state() : v1::Probe::STATE_UNSPECIFIED;
  }

  TempStoreFile file_;
  std::unique_ptr<Store> store_;
  DispatchPolicy policy_;
  FakeFleet fleet_;
  int64_t now_ms_ = 10000;
  std::unique_ptr<Dispatcher> dispatcher_;
};

TEST_F(DispatchTest, EachIdleWorkerGetsAProbeItCanRun) {
  const std::string l4 = Add(QueuedProbe("L4", "torch"));
  const std::string h100 = Add(QueuedProbe("H100", "sim"));
  const std::string pinned = Add(Pinned("w-pinned"));
  fleet_.AddWorker("w-h100", {Gpu("NVIDIA H100 80GB HBM3", "H100", 0)},
                   {"sim"});
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 1)}, {"torch"});
  fleet_.AddWorker("w-pinned", {Gpu("NVIDIA A10G", "A10G", 0)}, {"torch"});
  dispatcher_->Once();
  EXPECT_EQ(fleet_.Placement(),
            (std::map<std::string, std::string>{
                {"w-h100", h100}, {"w-l4", l4}, {"w-pinned", pinned}}));
  for (const std::string& id : {l4, h100, pinned}) {
    EXPECT_EQ(StateOf(id), v1::Probe::RUNNING) << id;
  }
  // The assignment names the device of the probe's kind and the lease.
  for (const FakeFleet::Sent& sent : fleet_.sent) {
    EXPECT_EQ(sent.assignment.lease_ms(), 500);
    if (sent.worker == "w-l4") {
      EXPECT_EQ(sent.assignment.gpu_index(), 1u);
    }
  }
  // Watchers hear of each claim.
  EXPECT_EQ(fleet_.changed.size(), 3u);
}

TEST_F(DispatchTest, AWorkerWithoutTheExecutorOrKindGetsNothing) {
  const std::string probe = Add(QueuedProbe("L4", "cuda"));
  fleet_.AddWorker("w-l4-torch", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  fleet_.AddWorker("w-a10g-cuda", {Gpu("NVIDIA A10G", "A10G", 0)}, {"cuda"});
  fleet_.AddWorker("w-other", {Gpu("NVIDIA L4", "L4", 0)}, {"cuda"});
  dispatcher_->Once();
  EXPECT_EQ(fleet_.Placement(),
            (std::map<std::string, std::string>{{"w-other", probe}}));
}

TEST_F(DispatchTest, LearningProbesGoLast) {
  v1::Probe learning = QueuedProbe("L4", "");
  learning.mutable_request()->set_learn_key("key-1");
  const std::string learn = Add(learning);
  const std::string asked = Add(QueuedProbe("L4", ""));
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  dispatcher_->Once();
  ASSERT_EQ(fleet_.sent.size(), 1u);
  EXPECT_EQ(fleet_.sent[0].probe, asked);
  EXPECT_EQ(StateOf(learn), v1::Probe::QUEUED);
}

TEST_F(DispatchTest, NIdleWorkersTakeNProbesOldestFirst) {
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(Add(QueuedProbe("L4", "")));
  for (int i = 0; i < 3; ++i) {
    fleet_.AddWorker(absl::StrCat("w-", i), {Gpu("NVIDIA L4", "L4", 0)},
                     {"torch"});
  }
  dispatcher_->Once();
  std::vector<std::string> claimed;
  for (const FakeFleet::Sent& sent : fleet_.sent) claimed.push_back(sent.probe);
  EXPECT_THAT(claimed, UnorderedElementsAre(ids[0], ids[1], ids[2]));
  EXPECT_EQ(StateOf(ids[3]), v1::Probe::QUEUED);
  EXPECT_EQ(StateOf(ids[4]), v1::Probe::QUEUED);
  // Busy now: a second pass hands out nothing more.
  dispatcher_->Once();
  EXPECT_EQ(fleet_.sent.size(), 3u);
}

TEST_F(DispatchTest, AnExpiredLeaseGoesBackToTheQueueAndResumes) {
  v1::Probe probe = QueuedProbe("L4", "");
  probe.mutable_request()->add_batches(16);
  const std::string id = Add(probe);
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  dispatcher_->Once();
  ASSERT_EQ(fleet_.sent.size(), 1u);
  const std::string first = fleet_.sent[0].assignment.assignment_id();
  v1::BatchResult measured;
  measured.set_batch(8);
  measured.set_peak_allocated_gb(3);
  ASSERT_TRUE(
      store_
          ->RecordProbeResult(id, first, "w-l4", "k-8", measured, std::nullopt)
          .ok());
  // Within the lease nothing changes; past it, the probe is queued again.
  now_ms_ += policy_.lease_ms - 1;
  dispatcher_->Once();
  EXPECT_EQ(StateOf(id), v1::Probe::RUNNING);
  now_ms_ += 2;
  FakeFleet other;
  other.accept = false;
  Dispatcher requeue(store_.get(), &other, policy_, [this] { return now_ms_; });
  requeue.Once();
  EXPECT_EQ(StateOf(id), v1::Probe::QUEUED);
  ASSERT_FALSE(other.changed.empty());
  EXPECT_EQ(other.changed[0].state(), v1::Probe::QUEUED);

  // The next worker is sent only the batch not measured yet.
  FakeFleet next;
  next.AddWorker("w-l4-b", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  Dispatcher resume(store_.get(), &next, policy_, [this] { return now_ms_; });
  resume.Once();
  ASSERT_EQ(next.sent.size(), 1u);
  ASSERT_EQ(next.sent[0].assignment.runs_size(), 1);
  EXPECT_EQ(next.sent[0].assignment.runs(0).batch(), 16u);
  EXPECT_NE(next.sent[0].assignment.assignment_id(), first);
}

// Issue 32, item 7: a result the worker journaled while its lease ran out
// (a reconnect longer than the lease) is stored when it arrives, and the
// probe resumes with only what is still not measured; the same result
// claimed by another worker is refused.
TEST_F(DispatchTest, AJournaledResultOfAnExpiredLeaseIsKeptNotMeasuredAgain) {
  v1::Probe probe = QueuedProbe("L4", "");
  probe.mutable_request()->add_batches(16);
  probe.mutable_request()->add_batches(32);
  const std::string id = Add(probe);
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  dispatcher_->Once();
  ASSERT_EQ(fleet_.sent.size(), 1u);
  const std::string first = fleet_.sent[0].assignment.assignment_id();
  v1::BatchResult measured;
  measured.set_batch(8);
  measured.set_peak_allocated_gb(3);
  ASSERT_TRUE(*store_->RecordProbeResult(id, first, "w-l4", "k-8", measured,
                                         std::nullopt));
  // The lease runs out while the worker is away; the probe is queued again.
  now_ms_ += policy_.lease_ms + 1;
  FakeFleet away;
  away.accept = false;
  Dispatcher requeue(store_.get(), &away, policy_, [this] { return now_ms_; });
  requeue.Once();
  ASSERT_EQ(StateOf(id), v1::Probe::QUEUED);

  // Back, it sends batch 16 from its journal: stored. From another worker
  // the same is refused.
  measured.set_batch(16);
  const auto intruder = store_->RecordProbeResult(id, first, "w-other", "k-16x",
                                                  measured, std::nullopt);
  EXPECT_EQ(intruder.status().code(), absl::StatusCode::kFailedPrecondition);
  const auto late = store_->RecordProbeResult(id, first, "w-l4", "k-16",
                                              measured, std::nullopt);
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_TRUE(*late);
  EXPECT_EQ(store_->GetProbe(id)->results_size(), 2);

  // The next assignment measures only batch 32.
  FakeFleet next;
  next.AddWorker("w-l4-b", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  Dispatcher resume(store_.get(), &next, policy_, [this] { return now_ms_; });
  resume.Once();
  ASSERT_EQ(next.sent.size(), 1u);
  ASSERT_EQ(next.sent[0].assignment.runs_size(), 1);
  EXPECT_EQ(next.sent[0].assignment.runs(0).batch(), 32u);
  // Once another worker holds it, the old lease's results are refused.
  measured.set_batch(32);
  EXPECT_EQ(
      store_
          ->RecordProbeResult(id, first, "w-l4", "k-32", measured, std::nullopt)
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

TEST_F(DispatchTest, AProbeAWorkerLeftBeforeItWasSentGoesStraightBack) {
  const std::string id = Add(QueuedProbe("L4", ""));
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  fleet_.accept = false;
  dispatcher_->Once();
  EXPECT_EQ(StateOf(id), v1::Probe::QUEUED);
}

TEST_F(DispatchTest, AQueuedProbePastItsExpiryFailsSayingWhy) {
  v1::Probe probe = QueuedProbe("H100", "");
  probe.mutable_request()->set_expires_s(5);
  const std::string id = Add(probe);
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  now_ms_ = 1000 + 4999;
  dispatcher_->Once();
  EXPECT_EQ(StateOf(id), v1::Probe::QUEUED);
  now_ms_ = 1000 + 5000;
  dispatcher_->Once();
  auto failed = store_->GetProbe(id);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), v1::Probe::FAILED);
  EXPECT_THAT(failed->error(), HasSubstr("expired: queued longer than 5 s"));
  EXPECT_THAT(failed->error(),
              HasSubstr("no connected worker has a H100 (connected: L4)"));
  ASSERT_FALSE(fleet_.changed.empty());
  EXPECT_EQ(fleet_.changed.back().state(), v1::Probe::FAILED);
}

TEST_F(DispatchTest, ExpiriesAreSpreadOverPassesByThePolicy) {
  for (int i = 0; i < 3; ++i) {
    v1::Probe probe = QueuedProbe("H100", "");
    probe.mutable_request()->set_expires_s(1);
    Add(probe);
  }
  DispatchPolicy policy = policy_;
  policy.expiries_per_pass = 2;
  Dispatcher dispatcher(store_.get(), &fleet_, policy, [] { return 99000; });
  dispatcher.FailExpired(99000);
  auto failed = store_->ListProbes(v1::Probe::FAILED, -1);
  ASSERT_TRUE(failed.ok());
  EXPECT_EQ(failed->size(), 2u);
  dispatcher.FailExpired(99000);
  EXPECT_EQ(store_->ListProbes(v1::Probe::FAILED, -1)->size(), 3u);
}

v1::Probe FourGpuProbe() {
  v1::Probe probe = QueuedProbe("L4", "sim");
  probe.mutable_request()->mutable_setup()->set_gpus(4);
  probe.mutable_request()->mutable_setup()->set_parallel(
      v1::TrainingSetup::FSDP_FULL);
  return probe;
}

std::vector<v1::GpuDevice> L4s(int n) {
  std::vector<v1::GpuDevice> gpus;
  for (int i = 0; i < n; ++i) gpus.push_back(Gpu("NVIDIA L4", "L4", i));
  return gpus;
}

TEST_F(DispatchTest, AFourGpuProbeGoesToTheNodeWithFourAndBlocksNoOne) {
  const std::string wide = Add(FourGpuProbe());
  const std::string narrow = Add(QueuedProbe("L4", "sim"));
  fleet_.AddWorker("w-1xl4", L4s(1), {"sim"});
  dispatcher_->Once();
  // The one-L4 node takes the probe queued behind the one it cannot hold.
  EXPECT_EQ(fleet_.Placement(),
            (std::map<std::string, std::string>{{"w-1xl4", narrow}}));
  EXPECT_EQ(StateOf(wide), v1::Probe::QUEUED);
  ASSERT_EQ(fleet_.sent.size(), 1u);
  EXPECT_TRUE(fleet_.sent[0].assignment.gpu_indices().empty());
  fleet_.AddWorker("w-4xl4", L4s(4), {"sim"});
  dispatcher_->Once();
  ASSERT_EQ(fleet_.sent.size(), 2u);
  EXPECT_EQ(fleet_.sent[1].worker, "w-4xl4");
  EXPECT_EQ(fleet_.sent[1].probe, wide);
  EXPECT_THAT(fleet_.sent[1].assignment.gpu_indices(), ElementsAre(0, 1, 2, 3));
  EXPECT_EQ(fleet_.sent[1].assignment.setup().gpus(), 4u);
}

TEST_F(DispatchTest, AProbeNoNodeCanHoldExpiresSayingHowManyItNeeds) {
  v1::Probe probe = FourGpuProbe();
  probe.mutable_request()->set_expires_s(5);
  const std::string id = Add(probe);
  fleet_.AddWorker("w-1xl4", L4s(1), {"sim"});
  fleet_.AddWorker("w-2xl4", L4s(2), {"sim"});
  now_ms_ = 1000 + 5000;
  dispatcher_->Once();
  auto failed = store_->GetProbe(id);
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->state(), v1::Probe::FAILED);
  EXPECT_THAT(failed->error(), HasSubstr("expired: queued longer than 5 s"));
  EXPECT_THAT(failed->error(),
              HasSubstr("needs 4 x L4 on one node; the largest node has 2"));
  EXPECT_TRUE(fleet_.sent.empty());
}

TEST(NoWorkerForTest, CountsTheGpusOfOneNode) {
  const v1::Probe four = FourGpuProbe();
  const ConnectedWorker one{"w-1", L4s(1), {"sim"}};
  const ConnectedWorker three{"w-3", L4s(3), {"sim", "torch"}};
  EXPECT_EQ(NoWorkerFor(four, {one, three}),
            "needs 4 x L4 on one node; the largest node has 3");
  // Four L4s on a node that does not run the executor are no help.
  const ConnectedWorker torch_only{"w-4t", L4s(4), {"torch"}};
  EXPECT_EQ(NoWorkerFor(four, {one, torch_only}),
            "needs 4 x L4 on one node; the largest node has 1");
  EXPECT_EQ(NoWorkerFor(four, {torch_only}),
            "no connected worker that matches runs the \"sim\" executor");
  const ConnectedWorker four_l4{"w-4", L4s(4), {"sim"}};
  EXPECT_EQ(NoWorkerFor(four, {one, four_l4}), "");
  // Pinned: the worker's own GPUs.
  v1::Probe pinned = Pinned("w-3");
  pinned.mutable_request()->mutable_setup()->set_gpus(4);
  EXPECT_EQ(NoWorkerFor(pinned, {three}),
            "needs 4 x GPU on one worker; the worker has 3");
}

TEST(AssignmentForTest, AMultiGpuProbeGetsOneGpuPerRankOfItsKind) {
  v1::Probe probe = FourGpuProbe();
  probe.set_id("p-1");
  probe.set_assignment_id("p-1.1");
  const v1::Assignment assignment =
      AssignmentFor(probe,
                    {Gpu("NVIDIA A10G", "A10G", 0), Gpu("NVIDIA L4", "L4", 1),
                     Gpu("NVIDIA L4", "L4", 2), Gpu("NVIDIA L4", "L4", 4),
                     Gpu("NVIDIA L4", "L4", 5), Gpu("NVIDIA L4", "L4", 6)},
                    DispatchPolicy());
  EXPECT_THAT(assignment.gpu_indices(), ElementsAre(1, 2, 4, 5));
  EXPECT_EQ(assignment.gpu_index(), 1u);
  EXPECT_EQ(assignment.setup().parallel(), v1::TrainingSetup::FSDP_FULL);
  // Pinned: the worker's most numerous kind.
  v1::Probe pinned = Pinned("w");
  pinned.mutable_request()->mutable_setup()->set_gpus(2);
  const v1::Assignment mine =
      AssignmentFor(pinned,
                    {Gpu("NVIDIA A10G", "A10G", 0), Gpu("NVIDIA L4", "L4", 1),
                     Gpu("NVIDIA L4", "L4", 2)},
                    DispatchPolicy());
  EXPECT_THAT(mine.gpu_indices(), ElementsAre(1, 2));
}

TEST(NoWorkerForTest, SaysWhyNoConnectedWorkerCanTakeAProbe) {
  const v1::Probe l4 = QueuedProbe("L4", "cuda");
  EXPECT_EQ(NoWorkerFor(l4, {}), "no worker is connected");
  const ConnectedWorker a10g{"w-a", {Gpu("NVIDIA A10G", "", 0)}, {"torch"}};
  EXPECT_EQ(NoWorkerFor(l4, {a10g}),
            "no connected worker has a L4 (connected: A10G)");
  const ConnectedWorker l4_torch{"w-l", {Gpu("NVIDIA L4", "", 0)}, {"torch"}};
  EXPECT_EQ(NoWorkerFor(l4, {a10g, l4_torch}),
            "no connected worker that matches runs the \"cuda\" executor");
  ConnectedWorker l4_cuda{"w-c", {Gpu("NVIDIA L4", "", 0)}, {"cuda"}};
  EXPECT_EQ(NoWorkerFor(l4, {a10g, l4_cuda}), "");
  // A draining worker does not count.
  l4_cuda.draining = true;
  EXPECT_EQ(NoWorkerFor(l4, {l4_cuda}), "no worker is connected");
  EXPECT_EQ(NoWorkerFor(Pinned("w-gone"), {a10g}),
            "worker 'w-gone' is not connected");
  EXPECT_EQ(NoWorkerFor(Pinned("w-a"), {a10g}), "");
}

TEST(AssignmentForTest, SendsOnlyWhatIsNotMeasuredWithTheDefaults) {
  v1::Probe probe = QueuedProbe("L4", "sim");
  probe.set_id("p-3");
  probe.set_assignment_id("p-3.2");
  probe.mutable_request()->add_batches(16);
  probe.mutable_request()->set_repetitions(2);
  v1::BatchResult done;
  done.set_batch(8);
  done.set_repetition(1);
  *probe.add_results() = done;
  DispatchPolicy policy;
  policy.lease_ms = 1234;
  const v1::Assignment assignment = AssignmentFor(
      probe, {Gpu("NVIDIA A10G", "A10G", 0), Gpu("NVIDIA L4", "L4", 3)},
      policy);
  EXPECT_EQ(assignment.assignment_id(), "p-3.2");
  EXPECT_EQ(assignment.probe_id(), "p-3");
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (const v1::BatchRun& run : assignment.runs()) {
    runs.emplace_back(run.batch(), run.repetition());
  }
  EXPECT_THAT(runs, ElementsAre(std::pair<uint32_t, uint32_t>{8, 0},
                                std::pair<uint32_t, uint32_t>{16, 0},
                                std::pair<uint32_t, uint32_t>{16, 1}));
  EXPECT_EQ(assignment.gpu_index(), 3u);
  EXPECT_EQ(assignment.executor(), "sim");
  EXPECT_EQ(assignment.warmup_steps(), 1u);
  EXPECT_EQ(assignment.steps(), 3u);
  EXPECT_EQ(assignment.batch_timeout_s(), 600);
  EXPECT_EQ(assignment.lease_ms(), 1234);

  probe.mutable_request()->set_warmup_steps(2);
  probe.mutable_request()->set_steps(7);
  probe.mutable_request()->set_batch_timeout_s(30);
  const v1::Assignment asked = AssignmentFor(probe, {}, policy);
  EXPECT_EQ(asked.warmup_steps(), 2u);
  EXPECT_EQ(asked.steps(), 7u);
  EXPECT_EQ(asked.batch_timeout_s(), 30);
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

TEST_F(DispatchTest, OnlyTheWorkerRunningAnAssignmentRenewsItsLease) {
  const std::string id = Add(QueuedProbe("L4", "torch"));
  fleet_.AddWorker("w-l4", {Gpu("NVIDIA L4", "L4", 0)}, {"torch"});
  dispatcher_->Once();
  ASSERT_EQ(fleet_.sent.size(), 1u);
  const std::string assignment = fleet_.sent[0].assignment.assignment_id();
  EXPECT_TRUE(RenewOwnLease(store_.get(), "w-l4", assignment, 90000).ok());
  // Another connection cannot keep w-l4's lease alive.
  EXPECT_EQ(RenewOwnLease(store_.get(), "w-other", assignment, 90000).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RenewOwnLease(store_.get(), "w-l4", "no-dot", 90000),
            absl::NotFoundError("not an assignment id"));
  EXPECT_EQ(RenewOwnLease(store_.get(), "w-l4", ".1", 90000).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RenewOwnLease(store_.get(), "w-l4", "p-unknown.1", 90000).code(),
            absl::StatusCode::kNotFound);
  // Renewed to 90000: a pass at 80000 leaves it running.
  now_ms_ = 80000;
  dispatcher_->Once();
  EXPECT_EQ(StateOf(id), v1::Probe::RUNNING);
}

TEST(CancelMessageTest, NamesTheAssignmentAndWhy) {
  const v1::PlannerMessage cancel = CancelMessage("p-1.2", kNotRunningHere);
  EXPECT_EQ(cancel.cancel().assignment_id(), "p-1.2");
  EXPECT_EQ(cancel.cancel().reason(),
            "assignment no longer running here (lease expired or probe "
            "ended)");
}

ConnectedWorker Worker(const std::string& id, v1::GpuDevice gpu,
                       std::vector<std::string> executors,
                       bool draining = false) {
  return {id, {std::move(gpu)}, std::move(executors), draining};
}

v1::GpuDevice Simulated(v1::GpuDevice gpu) {
  gpu.set_simulated(true);
  return gpu;
}

TEST(LearningWorkerTest, ARealCardFirstThenASimulatedOneWhenAsked) {
  const std::vector<ConnectedWorker> workers = {
      Worker("w-sim", Simulated(Gpu("NVIDIA L4", "L4", 0)), {"sim"}),
      Worker("w-draining", Gpu("NVIDIA A10G", "A10G", 0), {"torch"}, true),
      Worker("w-cuda", Gpu("NVIDIA A10G", "A10G", 0), {"cuda"}),
      Worker("w-a10g", Gpu("NVIDIA A10G", "A10G", 1), {"torch"})};
  absl::StatusOr<Learner::Worker> real = LearningWorker(workers, false);
  ASSERT_TRUE(real.ok()) << real.status();
  EXPECT_EQ(real->id, "w-a10g");
  EXPECT_EQ(real->gpu, "A10G");
  EXPECT_EQ(real->memory_gb, 24);
  EXPECT_EQ(real->executor, "torch");
  EXPECT_FALSE(real->simulated);

  const std::vector<ConnectedWorker> simulated(workers.begin(),
                                               workers.begin() + 3);
  absl::StatusOr<Learner::Worker> sim = LearningWorker(simulated, true);
  ASSERT_TRUE(sim.ok()) << sim.status();
  EXPECT_EQ(sim->id, "w-sim");
  EXPECT_EQ(sim->executor, "sim");
  EXPECT_TRUE(sim->simulated);
  EXPECT_EQ(LearningWorker(simulated, false).status(),
            absl::FailedPreconditionError(
                "only simulated workers are connected, and simulated runs "
                "anchor only questions that ask for them (set "
                "include_simulated)"));
}

TEST(LearningWorkerTest, SaysWhyNoWorkerCanLearn) {
  EXPECT_EQ(LearningWorker({}, true).status(),
            absl::FailedPreconditionError("no worker is connected"));
  EXPECT_EQ(LearningWorker({Worker("w-draining", Gpu("NVIDIA L4", "L4", 0),
                                   {"torch"}, true)},
                           true)
                .status(),
            absl::FailedPreconditionError("no worker is connected"));
  EXPECT_EQ(
      LearningWorker({Worker("w-cuda", Gpu("NVIDIA L4", "L4", 0), {"cuda"}),
                      Worker("w-odd", Gpu("Odd Card 3000", "", 0), {"torch"})},
                     true)
          .status(),
      absl::FailedPreconditionError(
          "no connected worker has a catalog GPU and an executor that "
          "builds models (torch, or sim on a simulated card)"));
}

TEST(NamedProbeCountsTest, EveryStateByNameZeroWhereNoneAre) {
  EXPECT_THAT(
      NamedProbeCounts({{v1::Probe::RUNNING, 2}, {v1::Probe::FAILED, 7}}),
      ElementsAre(std::pair<std::string, int64_t>{"QUEUED", 0},
                  std::pair<std::string, int64_t>{"RUNNING", 2},
                  std::pair<std::string, int64_t>{"SUCCEEDED", 0},
                  std::pair<std::string, int64_t>{"FAILED", 7},
                  std::pair<std::string, int64_t>{"CANCELLED", 0}));
}

}  // namespace
}  // namespace headroom
