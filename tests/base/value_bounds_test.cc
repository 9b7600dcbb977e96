#include "base/value_bounds.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// A bound names the field, the value and the range with its unit; the
// edges are as the table says (open below for a step time, closed for
// energy).
TEST(ValueBoundsTest, CheckBoundNamesTheFieldAndTheRange) {
  EXPECT_TRUE(CheckBound(0.25, "step_seconds", kStepSecondsBound).ok());
  EXPECT_TRUE(CheckBound(86400, "step_seconds", kStepSecondsBound).ok());
  EXPECT_EQ(CheckBound(1e9, "result.step_seconds", kStepSecondsBound).message(),
            "result.step_seconds = 1e+09 is out of range; allowed (0, 86400] "
            "s");
  EXPECT_THAT(CheckBound(0, "step_seconds", kStepSecondsBound).message(),
              HasSubstr("step_seconds = 0 is out of range"));
  EXPECT_TRUE(CheckBound(0, "energy_j", kMeasuredRunEnergyBound).ok());
  EXPECT_EQ(CheckBound(1e300, "energy_j", kMeasuredRunEnergyBound).message(),
            "energy_j = 1e+300 is out of range; allowed [0, 6.3072e+10] J");
  EXPECT_THAT(CheckBound(std::numeric_limits<double>::quiet_NaN(), "idle_w",
                         kIdleWattsBound)
                  .message(),
              HasSubstr("idle_w = nan is out of range; allowed [0, 2000] W"));
  EXPECT_FALSE(CheckBound(std::numeric_limits<double>::infinity(), "x",
                          kPredictedGbBound)
                   .ok());
}

// A peak may pass the catalog's card size by the GiB-as-GB factor only.
TEST(ValueBoundsTest, CardPeakBoundIsTheCardReadAsGib) {
  const ValueBound h100 = CardPeakBound(80);
  EXPECT_DOUBLE_EQ(h100.max, 80 * 1.0737);
  EXPECT_TRUE(CheckBound(85.5, "peak", h100).ok());  // an H100's 79.6 GiB
  EXPECT_THAT(CheckBound(900, "peak", CardPeakBound(24)).message(),
              HasSubstr("peak = 900 is out of range; allowed [0, 25.7688] GB"));
}

TEST(ValueBoundsTest, CountsAndParams) {
  EXPECT_TRUE(CheckCountRange(kMaxParams, "params", 1, kMaxParams).ok());
  EXPECT_EQ(CheckCountRange(4294967295u, "setup.gpus", 0, kMaxGpus).message(),
            "setup.gpus = 4294967295 is out of range; allowed 0..512");
  EXPECT_EQ(kMaxParams, uint64_t{100'000'000'000'000});
}

// Energy over the steps it covers is at most 2 kW per GPU: 1e300 J over 10
// steps of 0.5 s once answered 3.3e299 J per step.
TEST(ValueBoundsTest, MeanPowerIsAtMostACardsDraw) {
  EXPECT_TRUE(CheckMeanPower(700 * 10 * 0.5, 10, 0.5, 1, "energy_j").ok());
  EXPECT_TRUE(CheckMeanPower(8 * 1000 * 10, 10, 1, 8, "energy_j").ok());
  EXPECT_EQ(CheckMeanPower(1e6, 10, 0.5, 1, "runs[0].energy_j").message(),
            "runs[0].energy_j = 1e+06 J over 10 steps of 0.5 s on 1 GPU(s) "
            "is a mean 200000 W per GPU; allowed up to 2000 W (no card draws "
            "more)");
  // Nothing to divide by: the total bound alone applies.
  EXPECT_TRUE(CheckMeanPower(1e6, 0, 0.5, 1, "energy_j").ok());
  EXPECT_TRUE(CheckMeanPower(1e6, 10, 0, 1, "energy_j").ok());
}

}  // namespace
}  // namespace headroom
