#include "server/core/calibration/factor_fit.h"

#include <random>

#include "gtest/gtest.h"

namespace headroom {
namespace {

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
  const FitResult fit = FitFactors(samples, FitOptions{});
  for (int c = 0; c < kNumComponents; ++c) {
    EXPECT_NEAR(fit.factors[c], truth[c], 1e-6) << c;
  }
  EXPECT_NEAR(fit.loss, 0.0, 1e-10);
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
  const FitResult fit = FitFactors(samples, FitOptions{});
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
  const std::vector<double> heldout = HeldOutPredictions({a, b}, FitOptions{});
  EXPECT_NEAR(heldout[0], 2.0, 1e-9);
  EXPECT_NEAR(heldout[1], 1.0, 1e-9);
}

}  // namespace
}  // namespace headroom
