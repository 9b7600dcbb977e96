#include "server/core/calibration/evaluate.h"

#include <map>

#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/core/calibration/calibrate.h"
#include "server/core/common/json_io.h"
#include "server/core/planner/fit_planner.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

class EvaluateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
    ASSERT_TRUE(runs.ok());
    runs_ = *runs;
    auto catalog = ModelCatalog::LoadDirectory(kRoot + "/models");
    ASSERT_TRUE(catalog.ok());
    catalog_ = std::make_shared<ModelCatalog>(std::move(*catalog));
    auto fitted = Calibrate(runs_, *catalog_, FitOptions{}, "test");
    ASSERT_TRUE(fitted.ok());
    set_ = fitted->factor_set;
    set_.set_version("fs-eval");
  }
  std::vector<v1::MeasuredRun> runs_;
  std::shared_ptr<ModelCatalog> catalog_;
  v1::FactorSet set_;
};

// Evaluated on its own training file, the summary is the in-sample page.
TEST_F(EvaluateTest, OnTrainingRunsSummaryEqualsInSamplePage) {
  auto report = EvaluateOn(set_, runs_, *catalog_, 0.95, PageRules{});
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->rows_size(), 187);
  const v1::EvalSummary& ours = report->summary().at("ours");
  const v1::ColumnSummary& page = set_.page().summary().at("ours");
  EXPECT_EQ(ours.runs(), page.runs());
  EXPECT_DOUBLE_EQ(ours.median_abs_err(), page.median_abs_err());
  EXPECT_EQ(ours.within25(), page.within25());
  EXPECT_EQ(ours.said_fits_but_oom(), page.said_fits_but_oom());
  EXPECT_EQ(ours.agree(), page.agree());
  // Every usable run x card check is either fitting or not.
  EXPECT_EQ(ours.said_fits_but_oom() + ours.said_no_but_fits() + ours.agree(),
            640);
  EXPECT_LE(ours.flagged(), ours.no_fit());
  EXPECT_DOUBLE_EQ(ours.k(), set_.k95());
}

// The rows are the numbers the service gives for the same queries.
TEST_F(EvaluateTest, RowsMatchCheckFit) {
  auto report = EvaluateOn(set_, runs_, *catalog_, 0.95, PageRules{});
  ASSERT_TRUE(report.ok());
  FitPlanner planner(catalog_, set_, 0.95);
  for (int i = 0; i < report->rows_size(); i += 17) {
    const v1::EvalRow& row = report->rows(i);
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_(row.template_());
    request.add_batches(row.batch());
    request.add_targets()->set_memory_gb(24);
    auto answer = planner.CheckFit(request);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_DOUBLE_EQ(answer->estimates(0).peak_gb(), row.predicted_gb());
    EXPECT_DOUBLE_EQ(answer->estimates(0).upper_gb(), row.upper_gb());
    EXPECT_EQ(v1::Verdict_Name(answer->targets(0).verdicts(0)),
              row.verdicts().at("24"));
  }
}

// Every GPU with enough runs gets a regime, with its page over that GPU's
// runs, adopted exactly when it beats the global factors held out there.
TEST_F(EvaluateTest, RegimesPerGpuWithTheirPages) {
  std::map<std::string, int> runs_per_gpu;
  for (const auto& run : runs_) {
    if (run.excluded().empty()) ++runs_per_gpu[run.gpu()];
  }
  ASSERT_EQ(set_.regimes_size(), 3);
  for (const v1::Regime& regime : set_.regimes()) {
    EXPECT_EQ(regime.runs(), runs_per_gpu[regime.gpu()]) << regime.gpu();
    const auto& page = regime.page().summary();
    ASSERT_TRUE(page.count("ours_heldout") && page.count("global_heldout"));
    const bool better = page.at("ours_heldout").median_abs_err() <
                            page.at("global_heldout").median_abs_err() &&
                        page.at("ours_heldout").said_fits_but_oom() <=
                            page.at("global_heldout").said_fits_but_oom();
    EXPECT_EQ(regime.adopted(), better) << regime.reason();
    EXPECT_GT(regime.k95(), 0);
  }
  EXPECT_EQ(set_.regimes(2).gpu(), "L4");
  EXPECT_EQ(set_.regimes(2).runs(), 51);
}

TEST_F(EvaluateTest, UnknownTemplateNamesTheRow) {
  std::vector<v1::MeasuredRun> test = {runs_[0], runs_[1]};
  test[1].set_template_("not-a-model");
  auto report = EvaluateOn(set_, test, *catalog_, 0.95, PageRules{});
  ASSERT_FALSE(report.ok());
  EXPECT_EQ(report.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(report.status().message().find("test row 2"), std::string::npos);
}

}  // namespace
}  // namespace headroom
