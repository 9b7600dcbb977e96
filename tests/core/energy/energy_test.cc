#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/json_io.h"
#include "core/energy/energy_curves.h"
#include "core/energy/energy_refit.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "io/files.h"
#include "tests/support/shipped_energy_curves.h"

namespace headroom {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::AllOf;
using ::testing::HasSubstr;

const v1::EnergyCurveSet& Shipped() { return testing::ShippedEnergyCurves(); }

struct CurveRef {
  std::string arch;
  Quant quant;
  const v1::EnergyCurve* curve;
};

std::vector<CurveRef> ShippedCurves() {
  std::vector<CurveRef> curves;
  for (const auto& [arch, quants] : Shipped().curves()) {
    if (quants.has_nf4()) curves.push_back({arch, Quant::kNf4, &quants.nf4()});
    if (quants.has_int8()) {
      curves.push_back({arch, Quant::kInt8, &quants.int8()});
    }
  }
  return curves;
}

v1::EstimateEnergyRequest ByArch(const std::string& arch, double n_b,
                                 const std::string& quant) {
  v1::EstimateEnergyRequest request;
  request.set_arch(arch);
  request.set_params_b(n_b);
  request.set_quant(quant);
  return request;
}

v1::EstimateEnergyRequest ByGpu(const std::string& gpu, double n_b,
                                const std::string& quant) {
  v1::EstimateEnergyRequest request;
  request.set_gpu(gpu);
  request.set_params_b(n_b);
  request.set_quant(quant);
  return request;
}

TEST(EnergyCurvesTest, ShippedFileParsesWithItsNulls) {
  const v1::EnergyCurveSet& set = Shipped();
  EXPECT_EQ(set.version(), "shipped");
  EXPECT_EQ(ShippedCurves().size(), 5u);
  EXPECT_EQ(set.s_cap().at("NF4"), 75.0);
  EXPECT_EQ(set.s_cap().at("INT8"), 50.0);
  EXPECT_EQ(set.borrow().at("hopper"), "ampere");
  const v1::EnergyCurve& ada = set.curves().at("ada").nf4();
  EXPECT_EQ(ada.a(), 106.0936);
  EXPECT_EQ(ada.nstar(), 0.381);
  EXPECT_FALSE(ada.has_crossover_b());
  EXPECT_TRUE(ada.has_loo_mae());
  EXPECT_EQ(ada.loo_mae(), 8.724);
  EXPECT_FALSE(set.curves().at("ampere").int8().has_loo_mae());
  EXPECT_EQ(set.curves().at("blackwell").nf4().crossover_b(), 4.751);
  EXPECT_EQ(set.fp16_energy().at("turing").anchors(2).e_j1k(), 11267.69);
  EXPECT_EQ(set.hardware().at("ampere").mem_bw_gbps(), 2039.0);
}

// s_cap bounds the saving S - A, not S: four shipped curves have S > s_cap,
// and every one has S - A <= s_cap.
TEST(EnergyCurvesTest, SCapBoundsTheSavingNotS) {
  int s_above_cap = 0;
  for (const CurveRef& ref : ShippedCurves()) {
    const double cap = Shipped().s_cap().at(QuantKey(ref.quant));
    EXPECT_LE(ref.curve->s() - ref.curve->a(), cap) << ref.arch;
    if (ref.curve->s() > cap) ++s_above_cap;
  }
  EXPECT_EQ(s_above_cap, 4);
}

TEST(EnergyCurvesTest, ExactAtEveryAnchor) {
  for (const CurveRef& ref : ShippedCurves()) {
    const v1::EnergyCurve& c = *ref.curve;
    for (const v1::EnergyAnchor& anchor : c.anchors()) {
      absl::StatusOr<v1::EstimateEnergyResponse> answer = EstimateEnergy(
          Shipped(), ByArch(ref.arch, anchor.n(), QuantName(ref.quant)));
      ASSERT_TRUE(answer.ok()) << answer.status();
      const double x = anchor.n() / c.nstar();
      EXPECT_DOUBLE_EQ(answer->de_pct(), c.a() - c.s() * x / (1 + x))
          << ref.arch << " " << anchor.model();
      EXPECT_FALSE(answer->extrapolated());
      EXPECT_EQ(answer->resid_std(), c.resid_std());
      EXPECT_DOUBLE_EQ(answer->de_low_pct(), answer->de_pct() - c.resid_std());
      EXPECT_DOUBLE_EQ(answer->quant_j_per_1k(),
                       answer->fp16_j_per_1k() * (1 + answer->de_pct() / 100));
    }
  }
}

TEST(EnergyCurvesTest, CrossoverMatchesTheFileToThreeDecimals) {
  int with_crossover = 0;
  for (const CurveRef& ref : ShippedCurves()) {
    const std::optional<double> crossover = CrossoverB(*ref.curve);
    ASSERT_EQ(crossover.has_value(), ref.curve->has_crossover_b()) << ref.arch;
    absl::StatusOr<v1::EstimateEnergyResponse> answer =
        EstimateEnergy(Shipped(), ByArch(ref.arch, 5, QuantName(ref.quant)));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->has_crossover_b(), crossover.has_value());
    if (!crossover) continue;
    ++with_crossover;
    EXPECT_EQ(std::round(*crossover * 1000) / 1000, ref.curve->crossover_b());
    EXPECT_NEAR(DePct(*ref.curve, *crossover), 0.0, 1e-9);
  }
  EXPECT_EQ(with_crossover, 2);
  EXPECT_NEAR(*CrossoverB(Shipped().curves().at("blackwell").nf4()), 4.751,
              5e-4);
  EXPECT_NEAR(*CrossoverB(Shipped().curves().at("turing").nf4()), 2.126, 5e-4);
}

TEST(EnergyCurvesTest, Fp16AnchorsReproducedAndInterpolatedInLogLog) {
  for (const auto& [arch, fp16] : Shipped().fp16_energy()) {
    for (const v1::Fp16Anchor& anchor : fp16.anchors()) {
      absl::StatusOr<v1::EstimateEnergyResponse> answer =
          EstimateEnergy(Shipped(), ByArch(arch, anchor.n(), "fp16"));
      ASSERT_TRUE(answer.ok()) << answer.status();
      EXPECT_EQ(answer->fp16_j_per_1k(), anchor.e_j1k()) << arch;
      EXPECT_EQ(answer->quant_j_per_1k(), anchor.e_j1k());
      EXPECT_EQ(answer->de_pct(), 0);
      EXPECT_EQ(answer->fp16_basis(), "anchor");
      EXPECT_EQ(answer->fp16_rel_uncertainty(), 0);
    }
  }
  // Between Mistral-7B (4402.43) and Yi-1.5-9B (5445.12): the geometric
  // mean at the geometric mean of N.
  absl::StatusOr<Fp16Estimate> mid =
      Fp16JPer1k(Shipped(), "ampere", std::sqrt(7.0 * 9.0));
  ASSERT_TRUE(mid.ok());
  EXPECT_NEAR(mid->j_per_1k, std::sqrt(4402.43 * 5445.12), 1e-6);
  EXPECT_EQ(mid->basis, "interpolated");
  EXPECT_GT(mid->rel_uncertainty, 0.01);  // ampere's log-log spread: 1.2 %
  EXPECT_LT(mid->rel_uncertainty, 0.02);
  // Beyond: continuous at the end anchor, growing with the distance.
  absl::StatusOr<Fp16Estimate> far = Fp16JPer1k(Shipped(), "ampere", 140);
  ASSERT_TRUE(far.ok());
  EXPECT_EQ(far->basis, "extrapolated");
  EXPECT_NEAR(far->rel_uncertainty, 2 * mid->rel_uncertainty, 1e-12);
  EXPECT_GT(far->j_per_1k, 7359.98);
  absl::StatusOr<Fp16Estimate> near_end =
      Fp16JPer1k(Shipped(), "ampere", 14.000001);
  EXPECT_NEAR(near_end->j_per_1k, 7359.98, 1e-2);
}

TEST(EnergyCurvesTest, GpuNamesMapThroughTheCatalog) {
  const std::map<std::string, std::string> expected = {
      {"T4", "turing"},          {"A100-80GB", "ampere"},
      {"A800", "ampere"},        {"RTX 4090", "ada"},
      {"RTX 4090D", "ada"},      {"L4", "ada"},
      {"H100", "hopper"},        {"H200", "hopper"},
      {"RTX 5090", "blackwell"}, {"RTX PRO 6000", "blackwell"},
      {"B200", "blackwell"}};
  for (const auto& [gpu, arch] : expected) {
    absl::StatusOr<v1::EstimateEnergyResponse> answer =
        EstimateEnergy(Shipped(), ByGpu(gpu, 7, "nf4"));
    ASSERT_TRUE(answer.ok()) << gpu << ": " << answer.status();
    EXPECT_EQ(answer->arch(), arch) << gpu;
    EXPECT_GT(answer->mem_bw_gb_s(), 0) << gpu;
    EXPECT_GT(answer->fp16_tflops(), 0) << gpu;
  }
  absl::StatusOr<v1::EstimateEnergyResponse> a800 =
      EstimateEnergy(Shipped(), ByGpu("a800", 9, "int8"));
  ASSERT_TRUE(a800.ok());
  EXPECT_EQ(a800->gpu(), "A800");
  EXPECT_EQ(a800->mem_bw_gb_s(), 2039);
  EXPECT_FALSE(a800->has_borrowed_from());
}

TEST(EnergyCurvesTest, HopperBorrowsAmpereAndSaysSo) {
  for (const std::string quant : {"nf4", "int8", "fp16"}) {
    absl::StatusOr<v1::EstimateEnergyResponse> hopper =
        EstimateEnergy(Shipped(), ByGpu("H100", 9, quant));
    absl::StatusOr<v1::EstimateEnergyResponse> ampere =
        EstimateEnergy(Shipped(), ByArch("ampere", 9, quant));
    ASSERT_TRUE(hopper.ok()) << hopper.status();
    ASSERT_TRUE(ampere.ok());
    EXPECT_EQ(hopper->arch(), "hopper");
    ASSERT_TRUE(hopper->has_borrowed_from()) << quant;
    EXPECT_EQ(hopper->borrowed_from(), "ampere");
    EXPECT_EQ(hopper->de_pct(), ampere->de_pct());
    EXPECT_EQ(hopper->fp16_j_per_1k(), 5445.12);
    EXPECT_EQ(hopper->fp16_basis(), "anchor (anchors of ampere)");
    EXPECT_FALSE(ampere->has_borrowed_from());
  }
}

TEST(EnergyCurvesTest, ExtrapolationIsFlaggedWithItsDistance) {
  absl::StatusOr<v1::EstimateEnergyResponse> inside =
      EstimateEnergy(Shipped(), ByArch("ada", 1, "nf4"));
  ASSERT_TRUE(inside.ok());
  EXPECT_FALSE(inside->extrapolated());
  EXPECT_EQ(inside->extrapolation_b(), 0);
  EXPECT_EQ(inside->extrapolation_ratio(), 1);
  absl::StatusOr<v1::EstimateEnergyResponse> above =
      EstimateEnergy(Shipped(), ByArch("ada", 7, "nf4"));
  ASSERT_TRUE(above.ok());
  EXPECT_TRUE(above->extrapolated());
  EXPECT_DOUBLE_EQ(above->extrapolation_b(), 4.0);
  EXPECT_DOUBLE_EQ(above->extrapolation_ratio(), 7.0 / 3.0);
  EXPECT_EQ(above->fp16_basis(), "extrapolated");
  absl::StatusOr<v1::EstimateEnergyResponse> below =
      EstimateEnergy(Shipped(), ByArch("ampere", 1.75, "int8"));
  ASSERT_TRUE(below.ok());
  EXPECT_TRUE(below->extrapolated());
  EXPECT_DOUBLE_EQ(below->extrapolation_b(), 5.25);
  EXPECT_DOUBLE_EQ(below->extrapolation_ratio(), 4.0);
}

TEST(EnergyCurvesTest, BadInputIsRejectedWithTheAllowedValues) {
  for (double n_b : {0.0, -1.0, 10000.5, std::nan("")}) {
    absl::StatusOr<v1::EstimateEnergyResponse> answer =
        EstimateEnergy(Shipped(), ByArch("ada", n_b, "nf4"));
    ASSERT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument)
        << n_b;
    EXPECT_THAT(answer.status().message(),
                HasSubstr("params_b must be in (0, 10000]"));
  }
  EXPECT_TRUE(EstimateEnergy(Shipped(), ByArch("ada", 10000, "nf4")).ok());

  absl::StatusOr<v1::EstimateEnergyResponse> gpu =
      EstimateEnergy(Shipped(), ByGpu("Voodoo5", 7, "nf4"));
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gpu.status().message(), HasSubstr("not in the catalog"));

  absl::StatusOr<v1::EstimateEnergyResponse> arch =
      EstimateEnergy(Shipped(), ByArch("kepler", 7, "nf4"));
  EXPECT_EQ(arch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(arch.status().message(),
            "arch 'kepler' is not known; allowed: ada, ampere, blackwell, "
            "hopper, turing");

  absl::StatusOr<v1::EstimateEnergyResponse> quant =
      EstimateEnergy(Shipped(), ByArch("ada", 7, "fp8"));
  EXPECT_EQ(quant.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(quant.status().message(),
            "quant 'fp8' is not known; allowed: fp16, nf4, int8");

  absl::StatusOr<v1::EstimateEnergyResponse> no_curve =
      EstimateEnergy(Shipped(), ByGpu("T4", 7, "int8"));
  EXPECT_EQ(no_curve.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(no_curve.status().message(),
            "quant 'int8' has no curve for arch 'turing'; allowed for "
            "turing: fp16, nf4");

  v1::EstimateEnergyRequest no_target;
  no_target.set_params_b(7);
  no_target.set_quant("nf4");
  EXPECT_THAT(EstimateEnergy(Shipped(), no_target).status().message(),
              HasSubstr("one of gpu"));
}

TEST(EnergyCurvesTest, ValidationCatchesAWrongCrossoverAndAnExcessSaving) {
  v1::EnergyCurveSet set = Shipped();
  (*set.mutable_curves())["blackwell"].mutable_nf4()->set_crossover_b(5.0);
  absl::Status status = ValidateCurveSet(set);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("curves.blackwell.NF4.crossover_b"));

  set = Shipped();
  (*set.mutable_curves())["ada"].mutable_nf4()->set_crossover_b(1.0);
  EXPECT_THAT(ValidateCurveSet(set).message(), HasSubstr("never crosses zero"));

  set = Shipped();
  v1::EnergyCurve* turing = (*set.mutable_curves())["turing"].mutable_nf4();
  turing->set_s(90);  // saving S - A = 82 > 75
  turing->clear_crossover_b();
  EXPECT_THAT(ValidateCurveSet(set).message(), HasSubstr("exceeds s_cap 75"));
}

TEST(EnergyCurvesTest, CurveSetRoundTripsThroughJson) {
  const std::string json = ToJson(Shipped(), /*pretty=*/false);
  EXPECT_THAT(json, HasSubstr("\"resid_std\":3.6947"));
  EXPECT_THAT(json, HasSubstr("\"Nstar\":0.381"));
  EXPECT_THAT(json, HasSubstr("\"e_j1k\":1474.16"));
  absl::StatusOr<v1::EnergyCurveSet> back = ParseCurveSet(json, "round trip");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*back, Shipped()));
}

// --- Refit ---

std::vector<EnergyPoint> PointsOf(const v1::EnergyCurve& curve) {
  std::vector<EnergyPoint> points;
  for (const v1::EnergyAnchor& a : curve.anchors()) {
    points.push_back({a.n(), a.de(), a.model(), a.gpu()});
  }
  return points;
}

double RmsOf(const v1::EnergyCurve& curve,
             const std::vector<EnergyPoint>& points) {
  double ssr = 0;
  for (const EnergyPoint& p : points) {
    ssr += std::pow(p.de_pct - DePct(curve, p.n_b), 2);
  }
  return std::sqrt(ssr / points.size());
}

// The anchors are printed to 0.01, so a residual computed from them is
// within 0.005 of the one the shipped fit saw.
constexpr double kAnchorRounding = 0.005;

TEST(EnergyRefitTest, RefitFromTheFileMatchesOrBeatsEveryShippedCurve) {
  absl::StatusOr<v1::RefitEnergyResponse> refit = RefitFromAnchors(Shipped());
  ASSERT_TRUE(refit.ok()) << refit.status();
  ASSERT_EQ(refit->curves_size(), 5);
  for (const v1::CurveFitSummary& summary : refit->curves()) {
    const v1::EnergyCurve& shipped =
        summary.quant() == "NF4" ? Shipped().curves().at(summary.arch()).nf4()
                                 : Shipped().curves().at(summary.arch()).int8();
    const std::string what = summary.arch() + " " + summary.quant();
    // Never worse than the shipped curve on the same points ...
    EXPECT_LE(summary.resid_std(), RmsOf(shipped, PointsOf(shipped)) + 1e-12)
        << what;
    // ... and within the anchors' rounding of the shipped resid_std.
    EXPECT_LE(summary.resid_std(), shipped.resid_std() + kAnchorRounding)
        << what;
    EXPECT_EQ(summary.previous_resid_std(), shipped.resid_std());
    EXPECT_GE(summary.s(), 0) << what;
    EXPECT_LE(summary.s() - summary.a(),
              Shipped().s_cap().at(summary.quant()) + 1e-9)
        << what;
    EXPECT_EQ(summary.has_loo_mae(), shipped.has_loo_mae()) << what;
    EXPECT_TRUE(summary.refit());
  }
  EXPECT_TRUE(ValidateCurveSet(refit->curve_set()).ok());
}

// The figures the report quotes, pinned so a change to the fitter shows.
TEST(EnergyRefitTest, RefitFiguresOnTheShippedAnchors) {
  absl::StatusOr<v1::RefitEnergyResponse> refit = RefitFromAnchors(Shipped());
  ASSERT_TRUE(refit.ok());
  std::map<std::string, v1::CurveFitSummary> by_curve;
  for (const v1::CurveFitSummary& s : refit->curves()) {
    by_curve[s.arch() + " " + s.quant()] = s;
  }
  EXPECT_NEAR(by_curve["ada NF4"].resid_std(), 3.5394, 1e-4);
  EXPECT_TRUE(by_curve["ada NF4"].nstar_at_edge());
  EXPECT_NEAR(by_curve["ampere INT8"].resid_std(), 1.6494, 1e-4);
  EXPECT_NEAR(by_curve["ampere NF4"].resid_std(), 2.7157, 1e-4);
  EXPECT_TRUE(by_curve["ampere NF4"].s_at_zero());
  EXPECT_NEAR(by_curve["ampere NF4"].a(), -1.03, 1e-9);
  EXPECT_NEAR(by_curve["blackwell NF4"].resid_std(), 2.5929, 1e-4);
  EXPECT_TRUE(by_curve["blackwell NF4"].saving_at_cap());
  EXPECT_NEAR(by_curve["turing NF4"].resid_std(), 1.3085, 1e-4);
  EXPECT_TRUE(by_curve["turing NF4"].saving_at_cap());
  // The strict inequality holds everywhere but ampere NF4, whose best
  // S >= 0 fit on the printed anchors is their mean.
  EXPECT_LT(by_curve["ada NF4"].resid_std(), 3.6947);
  EXPECT_LT(by_curve["ampere INT8"].resid_std(), 2.4297);
  EXPECT_LT(by_curve["blackwell NF4"].resid_std(), 2.8022);
  EXPECT_LT(by_curve["turing NF4"].resid_std(), 1.316);
}

TEST(EnergyRefitTest, Deterministic) {
  absl::StatusOr<v1::RefitEnergyResponse> first = RefitFromAnchors(Shipped());
  absl::StatusOr<v1::RefitEnergyResponse> second = RefitFromAnchors(Shipped());
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_TRUE(MessageDifferencer::Equals(*first, *second));
}

TEST(EnergyRefitTest, RecoversAKnownCurveFromExactData) {
  v1::EnergyCurve truth;
  truth.set_a(30);
  truth.set_s(80);
  truth.set_nstar(5);
  std::vector<EnergyPoint> points;
  for (double n_b : {1.0, 2.0, 4.0, 8.0, 16.0}) {
    points.push_back({n_b, DePct(truth, n_b), "m", "T4"});
  }
  absl::StatusOr<CurveFit> fit = FitCurve(points, 75, "truth");
  ASSERT_TRUE(fit.ok()) << fit.status();
  EXPECT_NEAR(fit->a, 30, 1e-4);
  EXPECT_NEAR(fit->s, 80, 1e-4);
  EXPECT_NEAR(fit->nstar, 5, 1e-5);
  EXPECT_NEAR(fit->resid_std, 0, 1e-6);
  EXPECT_DOUBLE_EQ(fit->nstar_lo, 0.1);
  EXPECT_DOUBLE_EQ(fit->nstar_hi, 160);
  EXPECT_FALSE(fit->nstar_at_edge);
  EXPECT_EQ(LeaveOneOutMae(points, 75).has_value(), true);
  EXPECT_NEAR(*LeaveOneOutMae(points, 75), 0, 1e-3);
}

TEST(EnergyRefitTest, SavingNeverExceedsTheCap) {
  // Data that would like a 90 % saving for INT8 (cap 50 %).
  std::vector<EnergyPoint> points;
  for (double n_b : {1.0, 3.0, 10.0, 30.0}) {
    points.push_back({n_b, -90 * n_b / (n_b + 2), "m", "A800"});
  }
  absl::StatusOr<CurveFit> fit = FitCurve(points, 50, "capped");
  ASSERT_TRUE(fit.ok());
  EXPECT_TRUE(fit->saving_at_cap);
  EXPECT_NEAR(fit->s - fit->a, 50, 1e-9);
  EXPECT_GE(fit->s, 0);
}

TEST(EnergyRefitTest, TooFewPointsIsAnError) {
  const std::vector<EnergyPoint> two = {{1, 5, "a", "T4"}, {3, 1, "b", "T4"}};
  absl::StatusOr<CurveFit> fit = FitCurve(two, 75, "turing NF4");
  EXPECT_EQ(fit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fit.status().message(),
            "refit of turing NF4 needs at least 3 points (A, S and Nstar "
            "are fitted); got 2");
  const std::vector<EnergyPoint> one_size = {
      {3, 5, "a", "T4"}, {3, 1, "b", "T4"}, {3, 2, "c", "T4"}};
  EXPECT_THAT(FitCurve(one_size, 75, "x").status().message(),
              HasSubstr("two or more sizes"));
  EXPECT_FALSE(
      LeaveOneOutMae(PointsOf(Shipped().curves().at("ampere").nf4()), 75)
          .has_value());
}

// The file's anchors as measured runs: an fp16 and a quantized window of
// 1,000 tokens per anchor, on the anchor's GPU.
std::vector<v1::EnergyRun> AnchorsAsRuns(const v1::EnergyCurveSet& set) {
  std::vector<v1::EnergyRun> runs;
  auto add = [&](const std::string& model, double n_b, const std::string& gpu,
                 const std::string& quant, double j_per_1k) {
    v1::EnergyRun run;
    run.set_model(model);
    run.set_params_b(n_b);
    run.set_gpu(gpu);
    run.set_quant(quant);
    run.set_tokens_generated(1000);
    run.set_energy_j(j_per_1k + 50 * 2);  // 50 W idle over 2 s
    run.set_idle_w(50);
    run.set_window_s(2);
    runs.push_back(run);
  };
  for (const auto& [arch, fp16] : set.fp16_energy()) {
    for (const v1::Fp16Anchor& a : fp16.anchors()) {
      add(a.model(), a.n(), a.gpu(), "fp16", a.e_j1k());
      const v1::QuantCurves& curves = set.curves().at(arch);
      for (const auto& [quant, curve] : {std::pair{"nf4", &curves.nf4()},
                                         std::pair{"int8", &curves.int8()}}) {
        for (const v1::EnergyAnchor& q : curve->anchors()) {
          if (q.model() == a.model()) {
            add(a.model(), a.n(), a.gpu(), quant,
                a.e_j1k() * (1 + q.de() / 100));
          }
        }
      }
    }
  }
  return runs;
}

TEST(EnergyRefitTest, RunsGiveTheSameCurvesAsTheAnchors) {
  v1::RefitEnergyRequest request;
  for (const v1::EnergyRun& run : AnchorsAsRuns(Shipped())) {
    *request.add_runs() = run;
  }
  request.set_subtract_idle(true);
  absl::StatusOr<v1::RefitEnergyResponse> from_runs =
      RefitEnergy(Shipped(), request, "anchors as runs");
  ASSERT_TRUE(from_runs.ok()) << from_runs.status();
  absl::StatusOr<v1::RefitEnergyResponse> from_anchors =
      RefitFromAnchors(Shipped());
  ASSERT_TRUE(from_anchors.ok());
  EXPECT_EQ(from_runs->curve_set().trained_on(), "anchors as runs");
  EXPECT_TRUE(from_runs->curve_set().version().empty());
  std::map<std::string, v1::CurveFitSummary> expected;
  for (const v1::CurveFitSummary& s : from_anchors->curves()) {
    expected[s.arch() + s.quant()] = s;
  }
  ASSERT_EQ(from_runs->curves_size(), 5);
  for (const v1::CurveFitSummary& s : from_runs->curves()) {
    const v1::CurveFitSummary& e = expected[s.arch() + s.quant()];
    EXPECT_NEAR(s.resid_std(), e.resid_std(), 1e-6) << s.arch();
    EXPECT_NEAR(s.a(), e.a(), 1e-3 * std::max(1.0, std::fabs(e.a())))
        << s.arch();
    EXPECT_EQ(s.points(), e.points());
  }
  // fp16 anchors come back from the runs, idle subtracted.
  EXPECT_NEAR(
      from_runs->curve_set().fp16_energy().at("turing").anchors(3).e_j1k(),
      21722.65, 1e-9);
  // Raw energy instead: every J/1k is 100 J higher and dE shrinks.
  request.set_subtract_idle(false);
  absl::StatusOr<v1::RefitEnergyResponse> raw =
      RefitEnergy(Shipped(), request, "raw");
  ASSERT_TRUE(raw.ok());
  EXPECT_NEAR(raw->curve_set().fp16_energy().at("turing").anchors(3).e_j1k(),
              21822.65, 1e-9);
}

TEST(EnergyRefitTest, RunErrorsNameTheRun) {
  std::vector<v1::EnergyRun> runs = AnchorsAsRuns(Shipped());
  v1::RefitEnergyRequest request;
  for (const v1::EnergyRun& run : runs) {
    if (run.gpu() == "T4" && run.quant() == "fp16" &&
        run.model() == "Qwen2-7B") {
      continue;  // the NF4 run of Qwen2-7B on T4 loses its partner
    }
    *request.add_runs() = run;
  }
  absl::StatusOr<v1::RefitEnergyResponse> refit =
      RefitEnergy(Shipped(), request, "x");
  EXPECT_EQ(refit.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refit.status().message(),
              HasSubstr("Qwen2-7B (nf4) on T4 has no fp16 run"));

  // Two NF4 points on Blackwell: fewer points than parameters.
  v1::RefitEnergyRequest few;
  for (const v1::EnergyRun& run : runs) {
    if (run.gpu() == "RTX 5090" &&
        (run.model() == "Qwen2-7B" || run.model() == "Qwen2.5-3B")) {
      *few.add_runs() = run;
    }
  }
  EXPECT_THAT(RefitEnergy(Shipped(), few, "x").status().message(),
              HasSubstr("refit of blackwell NF4 needs at least 3 points"));
  // Merged with the existing anchors it is enough.
  few.set_merge_anchors(true);
  absl::StatusOr<v1::RefitEnergyResponse> merged =
      RefitEnergy(Shipped(), few, "x");
  ASSERT_TRUE(merged.ok()) << merged.status();
  EXPECT_EQ(merged->curve_set().curves().at("blackwell").nf4().anchors_size(),
            4);

  v1::RefitEnergyRequest bad_quant;
  *bad_quant.add_runs() = runs[0];
  bad_quant.mutable_runs(0)->set_quant("fp8");
  EXPECT_THAT(RefitEnergy(Shipped(), bad_quant, "x").status().message(),
              HasSubstr("runs[0] ("));
}

std::string Refused(const v1::RefitEnergyRequest& request) {
  absl::StatusOr<v1::RefitEnergyResponse> refit =
      RefitEnergy(Shipped(), request, "x");
  EXPECT_EQ(refit.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(refit.status().message());
}

// Runs no card could have produced are refused before anything is fitted,
// each naming the run, the field and the allowed range: 1e300 J once made
// answers of 1e298 J current.
TEST(EnergyRefitTest, RunsOutsidePhysicalRangesAreRefused) {
  const std::vector<v1::EnergyRun> runs = AnchorsAsRuns(Shipped());
  auto refused = [&](const std::function<void(v1::EnergyRun*)>& edit) {
    v1::RefitEnergyRequest request;
    for (const v1::EnergyRun& run : runs) *request.add_runs() = run;
    edit(request.mutable_runs(1));
    return Refused(request);
  };
  EXPECT_THAT(refused([](v1::EnergyRun* r) { r->set_energy_j(1e300); }),
              AllOf(HasSubstr("runs[1] ("),
                    HasSubstr(").energy_j = 1e+300 is out of range; allowed "
                              "(0, 1.728e+08] J")));
  EXPECT_THAT(refused([](v1::EnergyRun* r) {
                r->set_energy_j(std::numeric_limits<double>::quiet_NaN());
              }),
              HasSubstr("energy_j = nan is out of range; allowed (0, "
                        "1.728e+08] J"));
  EXPECT_THAT(refused([](v1::EnergyRun* r) {
                r->set_energy_j(1e8);
                r->set_tokens_generated(10);
              }),
              HasSubstr("per 1,000 tokens_generated is 1e+10 J; allowed "
                        "(0, 1e+06] J per 1,000 tokens"));
  EXPECT_THAT(refused([](v1::EnergyRun* r) { r->set_idle_w(1e9); }),
              HasSubstr("idle_w = 1e+09 is out of range; allowed [0, 2000] W"));
  EXPECT_THAT(
      refused([](v1::EnergyRun* r) {
        r->set_window_s(std::numeric_limits<double>::infinity());
      }),
      HasSubstr("window_s = inf is out of range; allowed [0, 86400] s"));
  EXPECT_THAT(
      refused([](v1::EnergyRun* r) { r->set_params_b(1e6); }),
      HasSubstr("params_b = 1e+06 is out of range; allowed (0, 10000]"));
  EXPECT_THAT(refused([](v1::EnergyRun* r) {
                r->set_model(std::string(1 << 20, 'm'));
              }),
              HasSubstr("runs[1].model is 1048576 bytes; allowed up to 256"));
  // Quantized runs 20 times dearer than their fp16 partners.
  v1::RefitEnergyRequest dear;
  for (const v1::EnergyRun& run : runs) *dear.add_runs() = run;
  for (v1::EnergyRun& run : *dear.mutable_runs()) {
    if (run.quant() != "fp16") run.set_energy_j(run.energy_j() * 20);
  }
  EXPECT_THAT(Refused(dear), HasSubstr("allowed dE up to 1000 %"));
}

TEST(EnergyRefitTest, RunsJsonlParses) {
  absl::StatusOr<std::vector<v1::EnergyRun>> runs = ParseEnergyRunsJsonl(
      "{\"model\":\"Qwen2-7B\",\"params_b\":7,\"gpu\":\"T4\",\"quant\":"
      "\"nf4\",\"tokens_generated\":\"512\",\"energy_j\":9000.5,"
      "\"idle_w\":30,\"window_s\":40.5}\n\n");
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].tokens_generated(), 512u);
  EXPECT_EQ((*runs)[0].window_s(), 40.5);
  EXPECT_THAT(ParseEnergyRunsJsonl("\n{\"joules\":1}").status().message(),
              HasSubstr("energy runs line 2"));
}

}  // namespace
}  // namespace headroom
