#include "core/calibration/promotion.h"

#include <limits>

#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

v1::FactorSet Set(const std::string& version, double median, int oom) {
  v1::FactorSet set;
  set.set_version(version);
  v1::ColumnSummary& heldout =
      (*set.mutable_page()->mutable_summary())["ours_heldout"];
  heldout.set_median_abs_err(median);
  heldout.set_said_fits_but_oom(oom);
  return set;
}

TEST(PromotionTest, NoWorseOnBothFiguresIsPromoted) {
  const v1::FactorSet current = Set("fs-1", 0.06, 4);
  EXPECT_TRUE(DecidePromotion(Set("", 0.06, 4), &current, false).promote);
  EXPECT_TRUE(DecidePromotion(Set("", 0.05, 3), &current, false).promote);
}

TEST(PromotionTest, WorseOnEitherFigureIsKeptUnlessForced) {
  const v1::FactorSet current = Set("fs-1", 0.06, 4);
  const PromotionDecision error =
      DecidePromotion(Set("", 0.07, 3), &current, false);
  EXPECT_FALSE(error.promote);
  EXPECT_THAT(error.reason, HasSubstr("kept fs-1"));
  EXPECT_FALSE(DecidePromotion(Set("", 0.05, 5), &current, false).promote);
  const PromotionDecision forced =
      DecidePromotion(Set("", 0.07, 5), &current, true);
  EXPECT_TRUE(forced.promote);
  EXPECT_THAT(forced.reason, HasSubstr("forced"));
}

TEST(PromotionTest, FirstFactorSetIsPromoted) {
  EXPECT_TRUE(DecidePromotion(Set("", 0.5, 50), nullptr, false).promote);
}

TEST(RollbackTest, WalksBackThroughTheHistoryNeverForward) {
  // fs-3 current after fs-1, fs-2: back to fs-2, then fs-1, then nothing.
  std::vector<std::string> history = {"fs-1", "fs-2", "fs-3"};
  auto target = RollbackTarget(history, "fs-3");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "fs-2");
  history.push_back(*target);
  target = RollbackTarget(history, "fs-2");
  ASSERT_TRUE(target.ok());
  EXPECT_EQ(*target, "fs-1");
  history.push_back(*target);
  target = RollbackTarget(history, "fs-1");
  EXPECT_EQ(target.status().code(), absl::StatusCode::kFailedPrecondition);
  // A version promoted again pops back to it as well.
  EXPECT_EQ(*RollbackTarget({"fs-1", "fs-2", "fs-3", "fs-1", "fs-4"}, "fs-4"),
            "fs-1");
}

TEST(ValidateRunsTest, NamesTheRunAndField) {
  ModelCatalog catalog;
  auto spec = ParseSpecJson(R"({"name": "lin", "positions": 1,
      "layers": [{"linear": {"in_features": 2, "out_features": 2}}]})",
                            "test");
  ASSERT_TRUE(catalog.Add(*spec).ok());
  v1::MeasuredRun good;
  good.set_template_("lin");
  good.set_batch(4);
  good.set_gpu("L4");
  good.set_params(4);
  good.set_measured_peak_gb(1.5);
  EXPECT_TRUE(ValidateRuns({good}, catalog).ok());

  v1::MeasuredRun unknown = good;
  unknown.set_template_("lim");
  absl::Status status = ValidateRuns({good, unknown}, catalog);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("runs[1].template"));

  v1::MeasuredRun both = good;
  both.set_oom_on_gb(24);
  EXPECT_THAT(ValidateRuns({both}, catalog).message(),
              HasSubstr("exactly one of measured_peak_gb and oom_on_gb"));

  v1::MeasuredRun negative = good;
  negative.set_measured_peak_gb(-2);
  EXPECT_THAT(ValidateRuns({negative}, catalog).message(),
              HasSubstr("runs[0].measured_peak_gb = -2"));

  v1::MeasuredRun zero_batch = good;
  zero_batch.set_batch(0);
  EXPECT_THAT(ValidateRuns({zero_batch}, catalog).message(),
              HasSubstr("runs[0].batch = 0"));

  // A run of a model that is not a template carries its spec, which must be
  // a valid one; a run with neither names both ways to say the model.
  v1::MeasuredRun inline_spec = good;
  inline_spec.clear_template_();
  *inline_spec.mutable_spec() = *spec;
  EXPECT_TRUE(ValidateRuns({inline_spec}, catalog).ok());
  v1::MeasuredRun bad_spec = inline_spec;
  bad_spec.mutable_spec()->mutable_layers(0)->mutable_linear()->set_in_features(
      0);
  EXPECT_THAT(ValidateRuns({good, bad_spec}, catalog).message(),
              HasSubstr("runs[1].spec"));
  v1::MeasuredRun no_model = good;
  no_model.clear_template_();
  EXPECT_THAT(ValidateRuns({no_model}, catalog).message(),
              HasSubstr("name a catalog template or set spec"));
}

// What a refit must not import: an unknown card, no parameter count, a
// peak larger than the card, an unknown enum, a huge string, an infinite
// timing. Each names the run, the field and what is allowed.
TEST(ValidateRunsTest, RefusesRunsOutsideWhatTheCardAllows) {
  ModelCatalog catalog;
  auto spec = ParseSpecJson(R"({"name": "lin", "positions": 1,
      "layers": [{"linear": {"in_features": 2, "out_features": 2}}]})",
                            "test");
  ASSERT_TRUE(catalog.Add(*spec).ok());
  v1::MeasuredRun good;
  good.set_template_("lin");
  good.set_batch(4);
  good.set_gpu("L4");
  good.set_params(4);
  good.set_measured_peak_gb(24);
  ASSERT_TRUE(ValidateRuns({good}, catalog).ok());

  auto message = [&](const v1::MeasuredRun& run) {
    const absl::Status status = ValidateRuns({good, run}, catalog);
    EXPECT_FALSE(status.ok());
    return std::string(status.message());
  };
  v1::MeasuredRun run = good;
  run.set_gpu("Z9000");
  EXPECT_THAT(message(run), HasSubstr("runs[1].gpu"));
  run = good;
  run.clear_gpu();
  EXPECT_THAT(message(run), HasSubstr("runs[1].gpu"));
  run = good;
  run.set_params(0);
  EXPECT_THAT(message(run), HasSubstr("runs[1].params = 0 is out of range"));
  run = good;
  run.set_measured_peak_gb(26);
  EXPECT_THAT(message(run),
              HasSubstr("runs[1].measured_peak_gb = 26 is out of range; "
                        "allowed (0, 25.7688] GB (L4 has 24 GB, x 1.0737 as "
                        "GiB)"));
  run = good;
  run.clear_measured_peak_gb();
  run.set_oom_on_gb(80);
  EXPECT_THAT(message(run), HasSubstr("runs[1].oom_on_gb = 80"));
  run = good;
  run.set_device_peak_gb(1e300);
  EXPECT_THAT(message(run), HasSubstr("runs[1].device_peak_gb"));
  run = good;
  run.set_step_seconds(std::numeric_limits<double>::infinity());
  EXPECT_THAT(message(run), HasSubstr("runs[1].step_seconds = inf"));
  run = good;
  run.set_measured_by(static_cast<v1::MeasurementSource>(77));
  EXPECT_THAT(message(run), HasSubstr("runs[1].measured_by = 77"));
  run = good;
  run.set_framework(std::string(5000, 'x'));
  const std::string long_text = message(run);
  EXPECT_THAT(long_text, HasSubstr("runs[1].framework is 5000 bytes; allowed "
                                   "up to 4096"));
  EXPECT_LT(long_text.size(), 400u);
  run.set_framework(std::string(1 << 20, 'x'));
  EXPECT_THAT(message(run),
              HasSubstr("runs[1] is 1048603 bytes; a stored run allows up to "
                        "262144"));
}

}  // namespace
}  // namespace headroom
