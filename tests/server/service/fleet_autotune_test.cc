// The planner's side of an autotune on the fleet, without a server: what it
// refuses before planning, the GPU it plans for, the probe it queues, the
// assignment a re-queued search resumes with, and the records it refuses
// to store.

#include "server/service/fleet_autotune.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/service/fleet/fleet_test_store.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

v1::SubmitAutotuneRequest Request() {
  v1::SubmitAutotuneRequest request;
  request.mutable_plan()->set_template_("bert-base");
  request.mutable_plan()->set_context(512);
  request.mutable_plan()->add_microbatch_candidates(8);
  request.mutable_plan()->add_microbatch_candidates(16);
  request.set_gpu("L4");
  return request;
}

std::string RefusalOf(const v1::SubmitAutotuneRequest& request) {
  const ModelCatalog catalog;
  absl::StatusOr<v1::AutotunePlan> plan =
      PlanAutotune(request, "L4", catalog, v1::FactorSet());
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(plan.status().message());
}

TEST(FleetAutotuneTest, RefusesWhatCannotBeSearchedBeforePlanning) {
  v1::SubmitAutotuneRequest request = Request();
  request.set_policy("fastest");
  EXPECT_EQ(RefusalOf(request),
            "policy = 'fastest' is unknown; allowed max_batch (also when "
            "empty), max_throughput");

  request = Request();
  request.set_executor("cuda");
  EXPECT_THAT(RefusalOf(request),
              HasSubstr("executor = \"cuda\" measures no microbatch"));

  request = Request();
  request.mutable_plan()->set_context(0);
  EXPECT_THAT(RefusalOf(request), HasSubstr("plan.context = 0"));

  request = Request();
  for (int i = 0; i < kMaxAutotuneCandidates; ++i) {
    request.mutable_plan()->add_microbatch_candidates(32);
  }
  EXPECT_EQ(RefusalOf(request),
            "plan.microbatch_candidates has 66 entries; an autotune probe "
            "allows 1..64");
}

TEST(FleetAutotuneTest, TheProbeCarriesTheCandidatesPlacementAndPlan) {
  v1::SubmitAutotuneRequest request = Request();
  request.set_worker("node-3");
  request.set_executor("sim");
  request.set_warmup_steps(2);
  request.set_steps(5);
  request.set_batch_timeout_s(30);
  v1::AutotunePlan autotune;
  *autotune.mutable_request() = request.plan();
  autotune.set_policy("max_batch");

  const v1::SubmitProbeRequest probe = AutotuneProbeRequest(request, autotune);
  EXPECT_EQ(probe.model().template_(), "bert-base");
  EXPECT_THAT(probe.batches(), ::testing::ElementsAre(8u, 16u));
  EXPECT_EQ(probe.worker(), "node-3");
  EXPECT_EQ(probe.gpu(), "");
  EXPECT_EQ(probe.executor(), "sim");
  EXPECT_EQ(probe.warmup_steps(), 2u);
  EXPECT_EQ(probe.steps(), 5u);
  EXPECT_EQ(probe.batch_timeout_s(), 30);
  EXPECT_EQ(probe.autotune().policy(), "max_batch");

  request.set_gpu("H100");  // placement by card instead of by worker
  EXPECT_EQ(AutotuneProbeRequest(request, autotune).gpu(), "H100");
  EXPECT_EQ(AutotuneProbeRequest(request, autotune).worker(), "");
}

TEST(FleetAutotuneTest, AResumedSearchRunsOnlyWhatIsNotMeasured) {
  v1::Probe probe;
  v1::AutotunePlan& autotune = *probe.mutable_request()->mutable_autotune();
  for (uint32_t batch : {8u, 16u, 32u}) {
    for (const char* mode : {"eager", "compiled"}) {
      v1::PlannedMicrobatch* planned =
          autotune.mutable_plan()->add_candidates();
      planned->set_microbatch(batch);
      planned->set_mode(mode);
    }
  }
  v1::BatchResult* eager8 = probe.add_results();
  eager8->set_batch(8);
  eager8->set_mode("eager");
  v1::BatchResult* compiled16 = probe.add_results();
  compiled16->set_batch(16);
  compiled16->set_mode("compiled");

  v1::Assignment assignment;
  assignment.add_runs()->set_batch(999);  // replaced, not kept
  FillAutotuneAssignment(probe, &assignment);
  std::vector<std::string> runs;
  for (const v1::BatchRun& run : assignment.runs()) {
    runs.push_back(absl::StrCat(run.batch(), "/", run.mode()));
    EXPECT_EQ(run.repetition(), 0u);
  }
  EXPECT_THAT(runs, ::testing::ElementsAre("8/compiled", "16/eager", "32/eager",
                                           "32/compiled"));
  ASSERT_EQ(assignment.measured_size(), 2);
  EXPECT_EQ(assignment.measured(0).batch(), 8u);
  EXPECT_EQ(assignment.measured(1).batch(), 16u);
  EXPECT_EQ(assignment.autotune().plan().candidates_size(), 6);
}

v1::WorkerStatus Known(const std::string& id,
                       const std::vector<std::string>& cards) {
  v1::WorkerStatus status;
  status.mutable_hello()->set_worker_id(id);
  for (const std::string& card : cards) {
    status.mutable_hello()->add_gpus()->set_name(card);
  }
  return status;
}

TEST(AutotuneGpuTest, ThePlacementsKindOrThePinnedWorkersFirstCatalogCard) {
  const std::vector<v1::WorkerStatus> workers = {
      Known("w-1", {"Mystery GPU", "NVIDIA A10G", "NVIDIA L4"}),
      Known("w-2", {"Mystery GPU"})};
  v1::SubmitAutotuneRequest request = Request();
  EXPECT_EQ(*AutotuneGpu(request, workers), "L4");
  request.set_gpu("Z9000");
  EXPECT_EQ(AutotuneGpu(request, workers).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_THAT(AutotuneGpu(request, workers).status().message(),
              HasSubstr("gpu: "));
  request.set_worker("w-1");
  EXPECT_EQ(*AutotuneGpu(request, workers), "A10G");
  request.set_worker("w-2");
  EXPECT_EQ(AutotuneGpu(request, workers).status(),
            absl::NotFoundError("worker 'w-2' is not known with a catalog "
                                "GPU; see ListWorkers"));
  request.set_worker("bad id!");
  EXPECT_EQ(AutotuneGpu(request, workers).status().code(),
            absl::StatusCode::kInvalidArgument);
  request.clear_placement();
  EXPECT_EQ(AutotuneGpu(request, workers).status(),
            absl::InvalidArgumentError(
                "placement is empty; set gpu (a catalog GPU kind such as "
                "\"L4\") or worker (a worker id from ListWorkers)"));
}

TEST(AcceptAutotuneRecordTest, ARecordOfNoCardInTheHelloIsRefused) {
  TempStoreFile file;
  absl::StatusOr<std::unique_ptr<Store>> store = file.Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::WorkerHello hello;
  hello.set_worker_id("w-1");
  hello.add_gpus()->set_index(0);
  v1::ProbeResult result;
  result.set_final(true);
  EXPECT_EQ(
      AcceptAutotuneRecord(store->get(), v1::Probe(), result, hello).status(),
      absl::InvalidArgumentError("the final result has no record"));
  result.mutable_autotune_record();
  result.mutable_gpu()->set_index(3);
  EXPECT_EQ(
      AcceptAutotuneRecord(store->get(), v1::Probe(), result, hello).status(),
      absl::InvalidArgumentError("gpu index 3 is not in the worker's hello"));
}

}  // namespace
}  // namespace headroom
