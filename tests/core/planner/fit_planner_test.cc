#include "core/planner/fit_planner.h"

#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "tests/core/frontends/onnx_test_graphs.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// A one-template catalog: "lin", one 1000x1000 linear layer (1e6
// parameters) over 1000 positions, 0.004 GB of outputs per sample.
std::shared_ptr<ModelCatalog> LinCatalog() {
  auto spec = ParseSpecJson(R"({"name": "lin", "positions": 1000,
      "layers": [{"linear": {"in_features": 1000, "out_features": 1000}}]})",
                            "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto catalog = std::make_shared<ModelCatalog>();
  if (spec.ok()) {
    EXPECT_TRUE(catalog->Add(*spec).ok());
  }
  return catalog;
}

// Hand-set factors: optimizer 1 and outputs as given, headroom 1.15, k95 1.2.
v1::FactorSet LinFactors(const std::string& version, double outputs) {
  v1::FactorSet set;
  set.set_version(version);
  set.set_headroom(1.15);
  set.set_k95(1.2);
  set.mutable_factors()->set_optimizer(1.0);
  set.mutable_factors()->set_outputs(outputs);
  return set;
}

// A planner over a one-template catalog with hand-set factors: the test is
// about request handling, not about fitted values.
class FitPlannerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    v1::FactorSet set = LinFactors("fs-test", 1.0);
    set.set_k90(1.1);
    planner_ = std::make_unique<FitPlanner>(LinCatalog(), set, 0.95);
  }

  v1::CheckFitRequest Request() {
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_("lin");
    request.add_batches(1000);
    request.add_targets()->set_memory_gb(24);
    return request;
  }

  std::unique_ptr<FitPlanner> planner_;
};

TEST_F(FitPlannerTest, AnswersWithPeakVerdictAndMaxBatch) {
  v1::CheckFitRequest request = Request();
  request.add_batches(5000);
  request.add_targets()->set_gpu("L4");
  auto response = planner_->CheckFit(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->factor_set_version(), "fs-test");
  EXPECT_EQ(response->params(), 1000000u);
  EXPECT_DOUBLE_EQ(response->k(), 1.2);
  // Backward start: 1e6 params x 16 bytes (weights, gradients, AdamW
  // moments) + 1000 x 1000 x 4 bytes per sample; the update (1e6 x 20
  // bytes) is less.
  EXPECT_NEAR(response->estimates(0).peak_gb(), 0.016 + 4.0, 1e-12);
  EXPECT_EQ(response->estimates(0).moment(), "backward start");
  EXPECT_NEAR(response->estimates(1).peak_gb(), 0.016 + 20.0, 1e-12);
  ASSERT_EQ(response->targets_size(), 2);
  EXPECT_EQ(response->targets(1).name(), "L4");
  EXPECT_EQ(response->targets(0).verdicts(0), v1::FITS);
  // 20.016 <= 24 but 20.016 * 1.2 * 1.15 > 24.
  EXPECT_EQ(response->targets(0).verdicts(1), v1::BORDERLINE);
  // FITS while (0.016 + 0.004 b) * 1.38 <= 24 -> b <= 4343.
  EXPECT_EQ(response->targets(0).max_batch_fits(), 4343u);
  // Not DOES_NOT_FIT while 0.016 + 0.004 b <= 24 -> b <= 5996.
  EXPECT_EQ(response->targets(0).max_batch_not_does_not_fit(), 5996u);
}

TEST(FitPlannerMomentTest, SmallBatchPeaksAtTheOptimizerUpdate) {
  FitPlanner planner(LinCatalog(), LinFactors("fs-m", 0.5), 0.95);
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("lin");
  request.add_batches(1);
  request.add_batches(2);
  request.add_targets()->set_memory_gb(24);
  auto response = planner.CheckFit(request);
  ASSERT_TRUE(response.ok()) << response.status();
  // Batch 1: 0.016 + 0.002 at backward start < 1e6 x 20 bytes at the update.
  EXPECT_NEAR(response->estimates(0).peak_gb(), 0.020, 1e-12);
  EXPECT_EQ(response->estimates(0).moment(), "optimizer update");
  EXPECT_NEAR(response->estimates(0).components().optimizer(), 0.020, 1e-12);
  EXPECT_EQ(response->estimates(0).components().outputs(), 0.0);
  // Batch 2: 0.016 + 0.004 ties the update; backward start is named.
  EXPECT_NEAR(response->estimates(1).peak_gb(), 0.020, 1e-12);
  EXPECT_EQ(response->estimates(1).moment(), "backward start");
  EXPECT_NEAR(response->estimates(1).components().outputs(), 0.004, 1e-12);
}

TEST(FitPlannerRegimeTest, AdoptedRegimeAnswersForItsGpuOnly) {
  v1::FactorSet set = LinFactors("fs-r", 1.0);
  v1::Regime* l4 = set.add_regimes();
  l4->set_gpu("L4");
  l4->set_adopted(true);
  l4->set_k95(1.1);
  l4->mutable_factors()->set_optimizer(1.0);
  l4->mutable_factors()->set_outputs(2.0);
  v1::Regime* h100 = set.add_regimes();
  h100->set_gpu("H100");
  h100->set_adopted(false);
  h100->mutable_factors()->set_outputs(9.0);
  FitPlanner planner(LinCatalog(), set, 0.95);
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("lin");
  request.add_batches(1000);
  request.add_targets()->set_gpu("L4");
  request.add_targets()->set_gpu("H100");
  request.add_targets()->set_memory_gb(24);
  auto response = planner.CheckFit(request);
  ASSERT_TRUE(response.ok()) << response.status();
  // Global: 0.016 + 4 GB; the L4 regime doubles the outputs: 0.016 + 8 GB.
  EXPECT_NEAR(response->estimates(0).peak_gb(), 4.016, 1e-12);
  EXPECT_EQ(response->targets(0).regime(), "L4");
  EXPECT_NEAR(response->targets(0).peaks_gb(0), 8.016, 1e-12);
  EXPECT_DOUBLE_EQ(response->targets(0).k(), 1.1);
  EXPECT_EQ(response->targets(1).regime(), "global");
  EXPECT_NEAR(response->targets(1).peaks_gb(0), 4.016, 1e-12);
  EXPECT_EQ(response->targets(2).regime(), "global");
  // L4 max FITS batch: (0.016 + 0.008 b) * 1.1 * 1.15 <= 24 -> b <= 2369.
  EXPECT_EQ(response->targets(0).max_batch_fits(), 2369u);
}

TEST_F(FitPlannerTest, CoverageSelectsK) {
  v1::CheckFitRequest request = Request();
  request.set_coverage(0.9);
  EXPECT_DOUBLE_EQ(planner_->CheckFit(request)->k(), 1.1);
  request.set_coverage(0.5);
  auto bad = planner_->CheckFit(request);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("coverage"));
}

TEST_F(FitPlannerTest, RejectsBatchOutOfRange) {
  for (uint64_t batch : {uint64_t{0}, (uint64_t{1} << 20) + 1}) {
    v1::CheckFitRequest request = Request();
    request.set_batches(0, batch);
    auto response = planner_->CheckFit(request);
    ASSERT_FALSE(response.ok());
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(response.status().message(), HasSubstr("batches[0]"));
    EXPECT_THAT(response.status().message(), HasSubstr("allowed 1..1048576"));
  }
}

TEST_F(FitPlannerTest, RejectsUnknownTemplateAndGpu) {
  v1::CheckFitRequest request = Request();
  request.mutable_model()->set_template_("lim");
  auto response = planner_->CheckFit(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(response.status().message(), HasSubstr("lin"));

  request = Request();
  request.add_targets()->set_gpu("A1000");
  response = planner_->CheckFit(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(response.status().message(), HasSubstr("A100"));
}

TEST_F(FitPlannerTest, RejectsNegativeCardAndEmptyTargets) {
  v1::CheckFitRequest request = Request();
  request.mutable_targets(0)->set_memory_gb(-8);
  auto response = planner_->CheckFit(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(), HasSubstr("targets[0].memory_gb"));
  request.clear_targets();
  response = planner_->CheckFit(request);
  EXPECT_THAT(response.status().message(), HasSubstr("targets has 0 entries"));
}

TEST_F(FitPlannerTest, RejectsInlineSpecWithoutLayers) {
  v1::CheckFitRequest request = Request();
  request.mutable_model()->mutable_spec()->set_name("empty");
  auto response = planner_->CheckFit(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(response.status().message(), HasSubstr("spec.layers is empty"));
}

TEST_F(FitPlannerTest, ConvertsAnOnnxGraphWithTheSetupsPositions) {
  // x [batch, seq, 1000] -> Linear 1000x1000: the template "lin" as ONNX.
  testing::GraphBuilder g("lin-onnx");
  g.Output(
      g.Linear(g.Input("x", {"batch", "seq", 1000}), 1000, 1000, false, "/fc"));
  v1::CheckFitRequest request = Request();
  request.mutable_model()->set_onnx(g.Serialize());
  request.mutable_setup()->set_positions(1000);
  auto response = planner_->CheckFit(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->model(), "lin-onnx");
  EXPECT_EQ(response->params(), 1000000u);
  // The positions were given: not assumed. Precision and optimizer were
  // not: fp32 and AdamW, whose two fp32 moments of 1,000,000 weights are
  // 8,000,000 bytes = 0.01 GB.
  EXPECT_THAT(response->assumptions(),
              ::testing::ElementsAre(
                  "batch axis: symbolic dimension 'batch' (x axis 0)",
                  "symbolic dimension 'seq' bound to 1000 positions",
                  "precision fp32 (not given; --precision bf16 for mixed "
                  "precision)",
                  "optimizer adamw (not given): 0.01 GB of state for 1 M "
                  "trained parameters"));

  request.mutable_setup()->set_positions(0);
  EXPECT_THAT(planner_->CheckFit(request).status().message(),
              HasSubstr("model.onnx: graph input 'x' axis 1 is symbolic"));
  request.mutable_model()->set_onnx("not a graph");
  auto bad = planner_->CheckFit(request);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr("model.onnx: not an ONNX model"));
}

TEST_F(FitPlannerTest, RejectsMissingModel) {
  v1::CheckFitRequest request = Request();
  request.clear_model();
  EXPECT_THAT(planner_->CheckFit(request).status().message(),
              HasSubstr("model is empty"));
}

// A full model asked by name answers as its config.json sent as
// model.hf_config does (same parameters, peaks and model key), and names the
// file it came from.
TEST(FitPlannerFullModelTest, ByNameAnswersAsTheConfigFileDoes) {
  absl::StatusOr<ModelCatalog> loaded =
      LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto catalog = std::make_shared<ModelCatalog>(std::move(*loaded));
  const FitPlanner planner(catalog, LinFactors("fs-test", 1.0), 0.95);
  absl::StatusOr<std::string> config =
      ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/models/hf/qwen2.5-7b.json");
  ASSERT_TRUE(config.ok()) << config.status();
  for (uint64_t positions : {0u, 4096u}) {
    v1::CheckFitRequest by_name;
    by_name.mutable_model()->set_template_("qwen2.5-7b");
    by_name.add_batches(1);
    by_name.add_batches(8);
    by_name.add_targets()->set_gpu("H100");
    by_name.mutable_setup()->set_positions(positions);
    v1::CheckFitRequest by_file = by_name;
    by_file.mutable_model()->set_hf_config(*config);

    absl::StatusOr<v1::CheckFitResponse> named = planner.CheckFit(by_name);
    absl::StatusOr<v1::CheckFitResponse> filed = planner.CheckFit(by_file);
    ASSERT_TRUE(named.ok()) << named.status();
    ASSERT_TRUE(filed.ok()) << filed.status();
    EXPECT_EQ(named->model(), "qwen2.5-7b");
    EXPECT_EQ(named->params(), filed->params());
    EXPECT_EQ(named->params(), CountParams(**catalog->Find("qwen2.5-7b")));
    ASSERT_EQ(named->estimates_size(), 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_DOUBLE_EQ(named->estimates(i).peak_gb(),
                       filed->estimates(i).peak_gb())
          << positions;
    }
    ASSERT_GE(named->assumptions_size(), 1);
    EXPECT_THAT(named->assumptions(0),
                HasSubstr("the full model: qwen2.5-7b is "
                          "models/hf/qwen2.5-7b.json, the config.json of "
                          "Qwen/Qwen2.5-7B as published"));
    absl::StatusOr<ModelKey> named_key = planner.KeyOf(by_name);
    absl::StatusOr<ModelKey> filed_key = planner.KeyOf(by_file);
    ASSERT_TRUE(named_key.ok() && filed_key.ok());
    EXPECT_EQ(named_key->id, filed_key->id) << positions;
  }
}

}  // namespace
}  // namespace headroom
