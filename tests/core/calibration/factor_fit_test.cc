#include "core/calibration/factor_fit.h"

#include <random>

#include "gtest/gtest.h"

namespace headroom {
namespace {

// The fit without its prior: the tests of the mechanics below recover
// factors from the data alone.
FitOptions NoPrior() {
  FitOptions options;
  options.prior_weight = 0;
  return options;
}

// Exact measurements from known factors: the fit recovers them.
TEST(FactorFitTest, RecoversKnownFactorsFromExactData) {
  const ComponentArray truth = {1.2, 0.9, 3.5, 1.3, 5.0, 2.0};
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> size(0.0, 3.0);
  std::vector<FitSample> samples;
  for (int i = 0; i < 60; ++i) {
    FitSample s;
    s.template_name = "t" + std::to_string(i % 12);
    double measured = 0;
    for (int c = 0; c < kNumComponents; ++c) {
      s.component_gb[c] = size(rng);
      measured += s.component_gb[c] * truth[c];
    }
    s.measured_gb = measured;
    samples.push_back(s);
  }
  const FitResult fit = FitFactors(samples, NoPrior());
  for (int c = 0; c < kNumComponents; ++c) {
    EXPECT_NEAR(fit.factors[c], truth[c], 1e-6) << c;
  }
  EXPECT_NEAR(fit.loss, 0.0, 1e-10);
}

// Runs that peak at either moment: the fit finds each run's moment and
// recovers the factors that made the measurements.
TEST(FactorFitTest, RecoversKnownFactorsWhenRunsPeakAtEitherMoment) {
  const ComponentArray truth = {1.05, 0.9, 1.4, 1.2, 2.0, 1.1};
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> size(0.0, 3.0);
  std::vector<FitSample> samples;
  int at_update = 0;
  for (int i = 0; i < 80; ++i) {
    FitSample s;
    s.template_name = "t" + std::to_string(i % 16);
    for (int c = 0; c < kNumComponents; ++c) s.component_gb[c] = size(rng);
    s.update_gb[kOptimizer] = 4.0 * size(rng);
    s.measured_gb = PredictGb(s, truth);
    at_update +=
        PeakMoment(s.component_gb, s.update_gb, truth) == Moment::kUpdate;
    samples.push_back(s);
  }
  ASSERT_GT(at_update, 5);
  ASSERT_LT(at_update, 75);
  const FitResult fit = FitFactors(samples, NoPrior());
  for (int c = 0; c < kNumComponents; ++c) {
    EXPECT_NEAR(fit.factors[c], truth[c], 1e-6) << c;
  }
  EXPECT_NEAR(fit.loss, 0.0, 1e-10);
}

// Samples marked not to fit, and completed runs under min_fit_gb, are
// predicted but do not move the factors.
TEST(FactorFitTest, SamplesOutOfTheFitDoNotMoveIt) {
  FitSample a;
  a.template_name = "a";
  a.component_gb[kOutputs] = 2;
  a.measured_gb = 2;  // factor 1
  FitSample wrong = a;
  wrong.template_name = "wrong";
  wrong.measured_gb = 6;  // factor 3, but its spec is not the model
  wrong.fit = false;
  FitSample small = a;
  small.template_name = "small";
  small.component_gb[kOutputs] = 0.2;
  small.measured_gb = 0.6;  // factor 3, under 1 GB
  const FitResult fit = FitFactors({a, wrong, small}, NoPrior());
  EXPECT_NEAR(fit.factors[kOutputs], 1.0, 1e-9);
  // Without the size threshold "small" counts: (f - 1)^2 + (f/3 - 1)^2 is
  // least at f = 1.2; "wrong" still does not.
  FitOptions all = NoPrior();
  all.min_fit_gb = 0;
  EXPECT_NEAR(FitFactors({a, wrong, small}, all).factors[kOutputs], 1.2, 1e-9);
  // Held out, each is still predicted.
  const std::vector<double> heldout =
      HeldOutPredictions({a, wrong, small}, NoPrior());
  EXPECT_NEAR(heldout[1], 2.0, 1e-9);
  EXPECT_NEAR(heldout[2], 0.2, 1e-9);
}

// A component that would need a negative factor is held at zero.
TEST(FactorFitTest, FactorsStayNonNegative) {
  std::vector<FitSample> samples;
  for (int i = 1; i <= 10; ++i) {
    FitSample s;
    s.template_name = "t";
    s.component_gb[kOptimizer] = i;
    s.component_gb[kOutputs] = 1.0;
    s.measured_gb = i - 0.5;  // would need outputs factor < 0
    samples.push_back(s);
  }
  const FitResult fit = FitFactors(samples, NoPrior());
  for (double f : fit.factors) EXPECT_GE(f, 0.0);
  EXPECT_EQ(fit.factors[kOutputs], 0.0);
}

// An OOM run on a 24 GB card pushes the factor up until
// peak * headroom >= 24.
TEST(FactorFitTest, OomRunPenalizedBelowItsCard) {
  FitSample measured;
  measured.template_name = "a";
  measured.component_gb[kOutputs] = 10;
  measured.measured_gb = 10;  // alone: factor 1
  FitSample oom;
  oom.template_name = "b";
  oom.component_gb[kOutputs] = 18;
  oom.oom_gb = 24;  // needs factor >= 24 / (18 * 1.15) = 1.159
  const FitResult alone = FitFactors({measured}, FitOptions{});
  EXPECT_NEAR(alone.factors[kOutputs], 1.0, 1e-9);
  const FitResult both = FitFactors({measured, oom}, FitOptions{});
  EXPECT_GT(both.factors[kOutputs], 1.0);
  EXPECT_LT(both.factors[kOutputs], 24.0 / (18 * 1.15));
  // Loss with the penalty is lower at the fitted point than at factor 1.
  ComponentArray one{};
  one[kOutputs] = 1.0;
  EXPECT_LT(both.loss, FitLoss({measured, oom}, one, FitOptions{}));
}

TEST(FactorFitTest, HeldOutLeavesTheTemplateOut) {
  // Template "a" says factor 1, template "b" says factor 2: each held-out
  // prediction uses the other's factor.
  FitSample a, b;
  a.template_name = "a";
  a.component_gb[kOutputs] = 1;
  a.measured_gb = 1;
  b.template_name = "b";
  b.component_gb[kOutputs] = 1;
  b.measured_gb = 2;
  const std::vector<double> heldout = HeldOutPredictions({a, b}, NoPrior());
  EXPECT_NEAR(heldout[0], 2.0, 1e-9);
  EXPECT_NEAR(heldout[1], 1.0, 1e-9);
}

// The prior that each factor is 1: a component no run exercises keeps its
// counted bytes, and one the runs exercise moves towards what they say as
// they accumulate. One component, runs measuring twice its size: the loss
// n (f/2 - 1)^2 + w (f - 1)^2 is least at f = (n/2 + w) / (n/4 + w).
TEST(FactorFitTest, PriorYieldsToTheRuns) {
  FitSample run;
  run.template_name = "a";
  run.component_gb[kOutputs] = 1;
  run.measured_gb = 2;
  const FitResult one = FitFactors({run}, FitOptions{});
  EXPECT_NEAR(one.factors[kOutputs], 1.5 / 1.25, 1e-9);
  for (int c = 0; c < kNumComponents; ++c) {
    if (c == kOutputs) continue;
    EXPECT_NEAR(one.factors[c], 1.0, 1e-12) << c;
  }
  EXPECT_NEAR(one.loss, FitLoss({run}, one.factors, FitOptions{}), 1e-12);
  const std::vector<FitSample> many(100, run);
  EXPECT_NEAR(FitFactors(many, FitOptions{}).factors[kOutputs], 51.0 / 26.0,
              1e-9);
  EXPECT_NEAR(FitFactors(many, NoPrior()).factors[kOutputs], 2.0, 1e-9);
  // The loss counts the prior: at the factors the runs alone want it is
  // the prior's term only.
  ComponentArray two{};
  two.fill(1.0);
  two[kOutputs] = 2.0;
  EXPECT_NEAR(FitLoss(many, two, FitOptions{}), 1.0, 1e-12);
  EXPECT_NEAR(FitLoss(many, two, NoPrior()), 0.0, 1e-12);
}

}  // namespace
}  // namespace headroom
