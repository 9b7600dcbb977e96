// The probe a SubmitProbeRequest becomes, and each bound it is refused
// for, with the message the operator gets.

#include "server/service/fleet/probe_requests.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "tests/server/service/fleet/fleet_test_store.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const ModelCatalog& Catalog() {
  static const ModelCatalog* catalog = [] {
    auto loaded =
        LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return new ModelCatalog(loaded.ok() ? *std::move(loaded) : ModelCatalog());
  }();
  return *catalog;
}

v1::SubmitProbeRequest Request() {
  v1::SubmitProbeRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.set_gpu("L4");
  request.add_batches(8);
  request.add_batches(16);
  return request;
}

std::string RefusalOf(const v1::SubmitProbeRequest& request) {
  absl::StatusOr<v1::Probe> probe = NewProbe(request, Catalog(), 4 << 20, 5);
  EXPECT_FALSE(probe.ok());
  return std::string(probe.status().message());
}

TEST(NewProbeTest, AGoodRequestBecomesAQueuedProbeOfTheCatalogModel) {
  absl::StatusOr<v1::Probe> probe = NewProbe(Request(), Catalog(), 4 << 20, 5);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->gpu(), "L4");
  EXPECT_EQ(probe->template_(), "bert-base");
  EXPECT_EQ(probe->spec().name(), "bert-base");
  EXPECT_EQ(probe->request().batches_size(), 2);
  EXPECT_EQ(probe->created_unix_ms(), 5);
  EXPECT_EQ(probe->updated_unix_ms(), 5);

  v1::SubmitProbeRequest pinned = Request();
  pinned.set_worker("gpu-node-1");
  probe = NewProbe(pinned, Catalog(), 4 << 20, 5);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->gpu(), "");
  EXPECT_EQ(probe->request().worker(), "gpu-node-1");
}

TEST(NewProbeTest, EachBoundIsRefusedNamingTheField) {
  v1::SubmitProbeRequest request = Request();
  request.clear_gpu();
  EXPECT_EQ(RefusalOf(request),
            "placement is empty; set gpu (a catalog GPU kind such as \"L4\") "
            "or worker (a worker id from ListWorkers)");

  request = Request();
  request.set_worker("a b");
  EXPECT_EQ(RefusalOf(request),
            "worker may hold letters, digits, '.', '_', '-' and ':' only");

  request = Request();
  request.set_repetitions(11);
  EXPECT_EQ(RefusalOf(request),
            "repetitions = 11 is out of range; allowed 0..10");

  request = Request();
  request.set_executor("rocm");
  EXPECT_EQ(RefusalOf(request),
            "executor = \"rocm\"; allowed \"torch\", \"cuda\", \"sim\" or "
            "empty");

  request = Request();
  request.set_steps(1001);
  EXPECT_EQ(RefusalOf(request),
            "steps and warmup_steps must be 0..1000; got 1001 and 0");

  request = Request();
  request.set_batch_timeout_s(-1);
  EXPECT_EQ(RefusalOf(request),
            "batch_timeout_s is out of range; allowed 0..86400 seconds");

  request = Request();
  request.set_expires_s(kMaxExpiresS + 1);
  EXPECT_EQ(RefusalOf(request),
            "expires_s = 2592001 is out of range; allowed 0..2592000 seconds "
            "(30 days; 0 = never)");

  request = Request();
  request.set_gpu("Z9000");
  EXPECT_THAT(RefusalOf(request), HasSubstr("gpu: "));

  request = Request();
  request.clear_batches();
  EXPECT_THAT(RefusalOf(request), HasSubstr("batches"));

  request = Request();
  request.set_learn_key(std::string(300, 'k'));
  EXPECT_THAT(RefusalOf(request),
              HasSubstr("learn_key is 300 bytes; allowed up to 256"));
}

v1::SubmitProbeRequest Parallel(uint32_t gpus,
                                v1::TrainingSetup::Parallel strategy,
                                const std::string& executor) {
  v1::SubmitProbeRequest request = Request();
  request.mutable_setup()->set_gpus(gpus);
  request.mutable_setup()->set_parallel(strategy);
  request.set_executor(executor);
  return request;
}

// Issue 32: SubmitProbe stored a spec whose Linear 2^32 -> 2^32 counted 0
// parameters, and a setup CheckFit refuses. A probe is held to the rules an
// answer and a Refit are: the layer and product, or the setup field, named.
TEST(NewProbeTest, ASpecOrSetupCheckFitRefusesIsRefused) {
  v1::SubmitProbeRequest wide = Request();
  v1::ModelSpec& spec = *wide.mutable_model()->mutable_spec();
  spec.set_name("wide");
  spec.set_positions(1);
  v1::Layer& stem = *spec.add_layers();
  stem.set_name("stem");
  stem.mutable_conv()->set_in_channels(uint64_t{1} << 32);
  stem.mutable_conv()->set_out_channels(uint64_t{1} << 32);
  stem.mutable_conv()->add_kernel(3);
  EXPECT_THAT(RefusalOf(wide),
              HasSubstr("layer 'stem' (Conv): 4294967296 x 4294967296 "
                        "overflows the parameter count"));
  v1::SubmitProbeRequest setup = Request();
  setup.mutable_setup()->set_precision(
      static_cast<v1::TrainingSetup::Precision>(42));
  EXPECT_THAT(RefusalOf(setup),
              HasSubstr("setup.precision = 42 is not allowed"));
  setup = Request();
  setup.mutable_setup()->set_offload(v1::TrainingSetup::OPTIMIZER);
  EXPECT_THAT(RefusalOf(setup), HasSubstr("setup.offload = OPTIMIZER"));
}

TEST(NewProbeTest, AMultiGpuProbeRunsOnOneNodeWithWhatItsExecutorRuns) {
  // Accepted: every strategy on the sim, DDP and FSDP on torch, 16 GPUs.
  for (const auto& [strategy, executor] :
       {std::pair{v1::TrainingSetup::FSDP_FULL, "sim"},
        {v1::TrainingSetup::ZERO3, "sim"},
        {v1::TrainingSetup::ZERO1, "sim"},
        {v1::TrainingSetup::DDP, "torch"},
        {v1::TrainingSetup::FSDP_GRAD_OP, "torch"},
        {v1::TrainingSetup::FSDP_FULL, ""}}) {
    absl::StatusOr<v1::Probe> probe =
        NewProbe(Parallel(16, strategy, executor), Catalog(), 4 << 20, 5);
    ASSERT_TRUE(probe.ok()) << executor << " " << probe.status();
    EXPECT_EQ(probe->request().setup().gpus(), 16u);
  }
  EXPECT_EQ(RefusalOf(Parallel(17, v1::TrainingSetup::DDP, "sim")),
            "setup.gpus = 17 is out of range for a probe; allowed 0 or 1 (one "
            "GPU) .. 16 (the GPUs of one node)");
  v1::SubmitProbeRequest two_nodes =
      Parallel(8, v1::TrainingSetup::FSDP_HYBRID, "sim");
  two_nodes.mutable_setup()->set_nodes(2);
  EXPECT_THAT(RefusalOf(two_nodes),
              HasSubstr("setup.nodes = 2; a probe runs on one node"));
  v1::SubmitProbeRequest per_node = Parallel(8, v1::TrainingSetup::DDP, "sim");
  per_node.mutable_setup()->set_gpus_per_node(4);
  EXPECT_THAT(RefusalOf(per_node),
              HasSubstr("setup.gpus_per_node = 4 is under setup.gpus = 8"));
  for (const char* executor : {"torch", ""}) {
    EXPECT_THAT(RefusalOf(Parallel(4, v1::TrainingSetup::ZERO2, executor)),
                HasSubstr("setup.parallel = zero2 needs DeepSpeed, which the "
                          "torch executor does not run"));
  }
  EXPECT_THAT(RefusalOf(Parallel(2, v1::TrainingSetup::DDP, "cuda")),
              HasSubstr("setup.gpus = 2: the cuda executor runs on one GPU"));
  // One GPU: what it always was, any executor.
  EXPECT_TRUE(
      NewProbe(Parallel(1, v1::TrainingSetup::PARALLEL_UNSPECIFIED, "cuda"),
               Catalog(), 4 << 20, 5)
          .ok());
}

TEST(NewProbeTest, ARequestOverTheMessageLimitIsRefused) {
  absl::StatusOr<v1::Probe> probe = NewProbe(Request(), Catalog(), 8, 5);
  ASSERT_FALSE(probe.ok());
  EXPECT_EQ(probe.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckOperatorProbeRequestTest, FieldsOtherCallsSetAreRefused) {
  EXPECT_TRUE(CheckOperatorProbeRequest(Request()).ok());
  v1::SubmitProbeRequest autotune = Request();
  autotune.mutable_autotune();
  EXPECT_EQ(CheckOperatorProbeRequest(autotune),
            absl::InvalidArgumentError("autotune is set by SubmitAutotune "
                                       "only; send the autotune there"));
  v1::SubmitProbeRequest learn = Request();
  learn.set_learn_key("k");
  EXPECT_EQ(CheckOperatorProbeRequest(learn),
            absl::InvalidArgumentError("learn_key is set by the planner only "
                                       "(CheckFitRequest.learn)"));
  v1::SubmitProbeRequest energy = Request();
  energy.mutable_energy();
  EXPECT_EQ(CheckOperatorProbeRequest(energy),
            absl::InvalidArgumentError("energy is set by SubmitEnergyProbe "
                                       "only; send the energy probe there"));
}

TEST(LearningProbeRequestTest, FewStepsOfTheQuestionsModelOnTheWorker) {
  v1::CheckFitRequest question;
  question.mutable_model()->set_template_("bert-base");
  question.mutable_setup()->set_gpus(1);
  const v1::SubmitProbeRequest probe =
      LearningProbeRequest(question, {8, 16}, "w-1", "torch", "key-1");
  EXPECT_EQ(probe.model().template_(), "bert-base");
  EXPECT_EQ(probe.setup().gpus(), 1u);
  EXPECT_THAT(probe.batches(), ::testing::ElementsAre(8u, 16u));
  EXPECT_EQ(probe.worker(), "w-1");
  EXPECT_EQ(probe.executor(), "torch");
  EXPECT_EQ(probe.repetitions(), 1u);
  EXPECT_EQ(probe.warmup_steps(), 1u);
  EXPECT_EQ(probe.steps(), 2u);
  EXPECT_EQ(probe.learn_key(), "key-1");
  // It is a probe the planner may queue.
  EXPECT_TRUE(NewProbe(probe, Catalog(), 4 << 20, 5).ok());
}

TEST(OutstandingLearningTest, AQueuedProbeOfTheKeyIsOutstanding) {
  TempStoreFile file;
  absl::StatusOr<std::unique_ptr<Store>> store = file.Open();
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::optional<std::string>> none =
      OutstandingLearning(store->get(), "key-1");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value());
  v1::SubmitProbeRequest request = Request();
  request.set_learn_key("key-1");
  absl::StatusOr<v1::Probe> probe = NewProbe(request, Catalog(), 4 << 20, 5);
  ASSERT_TRUE(probe.ok()) << probe.status();
  absl::StatusOr<v1::Probe> stored = (*store)->AddProbe(*probe);
  ASSERT_TRUE(stored.ok()) << stored.status();
  absl::StatusOr<std::optional<std::string>> found =
      OutstandingLearning(store->get(), "key-1");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(*found, std::optional<std::string>(stored->id()));
  absl::StatusOr<std::optional<std::string>> other =
      OutstandingLearning(store->get(), "key-2");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->has_value());
}

TEST(ProbesPageSizeTest, LimitAloneIsThePageSizeOfAnOldClient) {
  v1::ListProbesRequest request;
  EXPECT_EQ(*ProbesPageSize(request), 0);
  request.set_page_size(20);
  request.set_limit(7);
  EXPECT_EQ(*ProbesPageSize(request), 20);
  request.set_page_size(0);
  EXPECT_EQ(*ProbesPageSize(request), 7);
  request.set_limit(9000);
  EXPECT_EQ(*ProbesPageSize(request), 500);
  request.set_limit(10001);
  EXPECT_EQ(ProbesPageSize(request).status(),
            absl::InvalidArgumentError(
                "limit = 10001 is out of range; allowed 0..10000 (0 = 100)"));
}

}  // namespace
}  // namespace headroom
