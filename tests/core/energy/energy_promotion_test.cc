// Issue 21: a refit's held-out figures and the promotion rule, an
// architecture that borrowed getting a curve of its own, and whether an
// answer's points near N were measured.

#include <cmath>
#include <string>
#include <vector>

#include "core/catalog/gpu_catalog.h"
#include "core/energy/energy_curves.h"
#include "core/energy/energy_refit.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/shipped_energy_curves.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const v1::EnergyCurveSet& Shipped() { return testing::ShippedEnergyCurves(); }

double CurveDe(double a, double s, double nstar, double n_b) {
  const double x = n_b / nstar;
  return a - s * x / (1 + x);
}

// One fp16 and one quantized window per size on `gpu`: fp16 costs
// 1000 J per 1k tokens per billion parameters, the quantization dE[i] %
// more.
std::vector<v1::EnergyRun> Runs(const std::string& gpu,
                                const std::vector<double>& sizes,
                                const std::vector<double>& de,
                                const std::string& quant = "nf4") {
  std::vector<v1::EnergyRun> runs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    for (const std::string& q : {std::string("fp16"), quant}) {
      v1::EnergyRun run;
      run.set_model("m-" + std::to_string(i));
      run.set_params_b(sizes[i]);
      run.set_gpu(gpu);
      run.set_quant(q);
      run.set_tokens_generated(1000);
      run.set_window_s(10);
      run.set_energy_j(1000 * sizes[i] * (q == "fp16" ? 1 : 1 + de[i] / 100));
      runs.push_back(run);
    }
  }
  return runs;
}

v1::RefitEnergyRequest RequestOf(const std::vector<v1::EnergyRun>& runs) {
  v1::RefitEnergyRequest request;
  for (const v1::EnergyRun& run : runs) *request.add_runs() = run;
  return request;
}

const v1::CurveFitSummary* SummaryOf(const v1::RefitEnergyResponse& refit,
                                     const std::string& arch,
                                     const std::string& quant) {
  for (const v1::CurveFitSummary& c : refit.curves()) {
    if (c.arch() == arch && c.quant() == quant) return &c;
  }
  return nullptr;
}

TEST(EnergyPromotionTest, HopperStopsBorrowingOnceMeasured) {
  // Before: an H200 NF4 answer borrows ampere's curve and fp16 anchors.
  v1::EstimateEnergyRequest query;
  query.set_params_b(7);
  query.set_gpu("H200");
  query.set_quant("nf4");
  absl::StatusOr<v1::EstimateEnergyResponse> before =
      EstimateEnergy(Shipped(), query);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->borrowed_from(), "ampere");

  // Hopper NF4 measured at four sizes, exactly on a curve of the form.
  const std::vector<double> sizes = {1, 3, 7, 14};
  std::vector<double> de;
  for (double n : sizes) de.push_back(CurveDe(30, 60, 5, n));
  absl::StatusOr<v1::RefitEnergyResponse> refit =
      RefitEnergy(Shipped(), RequestOf(Runs("H100", sizes, de)), "hopper runs");
  ASSERT_TRUE(refit.ok()) << refit.status();
  ASSERT_TRUE(refit->curve_set().curves().at("hopper").has_nf4());
  const v1::CurveFitSummary* hopper = SummaryOf(*refit, "hopper", "NF4");
  ASSERT_NE(hopper, nullptr);
  // Held out: the refit predicts each exact point from the other three
  // almost exactly; ampere's flat curve (about -1 %) misses them by tens of
  // points.
  ASSERT_TRUE(hopper->has_heldout_mae());
  ASSERT_TRUE(hopper->has_current_heldout_mae());
  double ampere_mae = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    ampere_mae += std::fabs(
        de[i] - DePct(Shipped().curves().at("ampere").nf4(), sizes[i]));
  }
  EXPECT_NEAR(hopper->current_heldout_mae(), ampere_mae / sizes.size(), 1e-9);
  EXPECT_LT(hopper->heldout_mae(), 0.5);
  EXPECT_GT(hopper->current_heldout_mae(), 10);
  const EnergyPromotion decision = DecideEnergyPromotion(*refit, false);
  EXPECT_TRUE(decision.promote) << decision.reason;

  // After: hopper answers from its own curve and anchors; INT8, not
  // measured, still borrows ampere's.
  absl::StatusOr<v1::EstimateEnergyResponse> after =
      EstimateEnergy(refit->curve_set(), query);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->has_borrowed_from());
  EXPECT_NEAR(after->de_pct(), CurveDe(30, 60, 5, 7), 0.5);
  EXPECT_EQ(after->fp16_basis(), "anchor");
  EXPECT_NEAR(after->fp16_j_per_1k(), 7000, 1e-6);
  query.set_quant("int8");
  absl::StatusOr<v1::EstimateEnergyResponse> int8 =
      EstimateEnergy(refit->curve_set(), query);
  ASSERT_TRUE(int8.ok()) << int8.status();
  EXPECT_EQ(int8->borrowed_from(), "ampere");
}

TEST(EnergyPromotionTest, KeepsTheCurrentCurveWhenHeldOutIsWorse) {
  // Hopper points that agree with the borrowed ampere NF4 curve (flat,
  // about -1 %) up to +/- 3 points of noise: the current curve errs by 3 on
  // them, and a three-parameter curve through four zig-zag points predicts
  // each one left out worse.
  const std::vector<double> sizes = {1, 3, 7, 14};
  const v1::EnergyCurve& ampere = Shipped().curves().at("ampere").nf4();
  std::vector<double> de;
  for (size_t i = 0; i < sizes.size(); ++i) {
    de.push_back(DePct(ampere, sizes[i]) + (i % 2 == 0 ? 3 : -3));
  }
  absl::StatusOr<v1::RefitEnergyResponse> refit = RefitEnergy(
      Shipped(), RequestOf(Runs("H100", sizes, de)), "noisy hopper runs");
  ASSERT_TRUE(refit.ok()) << refit.status();
  const v1::CurveFitSummary* hopper = SummaryOf(*refit, "hopper", "NF4");
  ASSERT_NE(hopper, nullptr);
  EXPECT_NEAR(hopper->current_heldout_mae(), 3, 1e-9);
  ASSERT_TRUE(hopper->has_heldout_mae());
  EXPECT_GT(hopper->heldout_mae(), hopper->current_heldout_mae());
  const EnergyPromotion kept = DecideEnergyPromotion(*refit, false);
  EXPECT_FALSE(kept.promote);
  EXPECT_THAT(kept.reason, HasSubstr("hopper NF4: held-out error"));
  EXPECT_THAT(kept.reason, HasSubstr("kept (force overrides)"));
  const EnergyPromotion forced = DecideEnergyPromotion(*refit, true);
  EXPECT_TRUE(forced.promote);
  EXPECT_EQ(forced.reason, "forced");
}

TEST(EnergyPromotionTest, ACurveTooSmallToHoldOutIsKeptAndANewOneIsNot) {
  // Three sizes: a curve of three parameters through three points cannot
  // hold one out, so it cannot be shown no worse than hopper's borrowed one.
  const std::vector<double> sizes = {1, 3, 7};
  std::vector<double> de;
  for (double n : sizes) de.push_back(CurveDe(30, 60, 5, n));
  absl::StatusOr<v1::RefitEnergyResponse> small =
      RefitEnergy(Shipped(), RequestOf(Runs("H100", sizes, de)), "three sizes");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_FALSE(SummaryOf(*small, "hopper", "NF4")->has_heldout_mae());
  const EnergyPromotion kept = DecideEnergyPromotion(*small, false);
  EXPECT_FALSE(kept.promote);
  EXPECT_THAT(kept.reason, HasSubstr("too few points to hold one out"));

  // Ada has no INT8 curve at all (nothing to borrow): a new curve counts
  // as no worse.
  std::vector<double> de8;
  for (double n : sizes) de8.push_back(CurveDe(120, 60, 4, n));
  absl::StatusOr<v1::RefitEnergyResponse> fresh = RefitEnergy(
      Shipped(), RequestOf(Runs("L4", sizes, de8, "int8")), "ada int8");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const v1::CurveFitSummary* ada = SummaryOf(*fresh, "ada", "INT8");
  ASSERT_NE(ada, nullptr);
  EXPECT_FALSE(ada->has_current_heldout_mae());
  EXPECT_TRUE(DecideEnergyPromotion(*fresh, false).promote);
}

TEST(EnergyPromotionTest, AnswersSayWhetherThePointsNearNWereMeasured) {
  const auto ask = [](double n_b, const std::string& target,
                      const std::string& quant) {
    v1::EstimateEnergyRequest request;
    request.set_params_b(n_b);
    if (target == "ada") {
      request.set_arch(target);
    } else {
      request.set_gpu(target);
    }
    request.set_quant(quant);
    absl::StatusOr<v1::EstimateEnergyResponse> answer =
        EstimateEnergy(Shipped(), request);
    EXPECT_TRUE(answer.ok()) << answer.status();
    return answer.ok() ? *answer : v1::EstimateEnergyResponse();
  };
  // ada NF4 anchors: 0.5, 1.1, 1.5, 3.0 B.
  EXPECT_EQ(ask(1.1, "ada", "nf4").points_near_n(), "measured");
  EXPECT_DOUBLE_EQ(ask(1.1, "ada", "nf4").nearest_anchor_b(), 1.1);
  EXPECT_EQ(ask(5.5, "ada", "nf4").points_near_n(), "measured");  // x1.83
  const v1::EstimateEnergyResponse far = ask(10, "ada", "nf4");
  EXPECT_EQ(far.points_near_n(), "extrapolated");  // x3.33 from 3.0
  EXPECT_DOUBLE_EQ(far.nearest_anchor_b(), 3.0);
  // Borrowed: the anchors of the curve that answered (ampere, 7 .. 14 B).
  EXPECT_EQ(ask(7, "H200", "nf4").points_near_n(), "measured");
  EXPECT_EQ(ask(1, "H200", "nf4").points_near_n(), "extrapolated");
  // fp16: the fp16 anchors (ada from 0.5 B).
  EXPECT_EQ(ask(0.3, "ada", "fp16").points_near_n(), "measured");
  EXPECT_EQ(ask(0.2, "ada", "fp16").points_near_n(), "extrapolated");
  // The version of the set that answered.
  EXPECT_EQ(ask(1.1, "ada", "nf4").curves_version(), Shipped().version());
}

TEST(GpuPowerTest, EveryCardHasADatasheetTdpAboveItsIdle) {
  absl::StatusOr<GpuInfo> l4 = FindGpu("L4");
  ASSERT_TRUE(l4.ok());
  EXPECT_DOUBLE_EQ(l4->tdp_w, 72);  // NVIDIA L4 datasheet
  EXPECT_DOUBLE_EQ(FindGpu("H100")->tdp_w, 700);
  EXPECT_DOUBLE_EQ(FindGpu("T4")->tdp_w, 70);
  for (const GpuInfo& gpu : GpuCatalog()) {
    EXPECT_GT(gpu.idle_w, 0) << gpu.name;
    EXPECT_LT(gpu.idle_w, 0.25 * gpu.tdp_w) << gpu.name;
    EXPECT_LE(gpu.tdp_w, kMaxCardWatts) << gpu.name;
  }
}

}  // namespace
}  // namespace headroom
