#include "base/ratios.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(RatiosTest, Median) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
}

// Index ceil(0.9 x 9) = 9 of ten ratios 1.00 .. 1.09 (the largest); 0.5
// picks index 5; an exact 1.17 is not rounded up to 1.18.
TEST(RatiosTest, RatioAtCoverage) {
  std::vector<double> ratios;
  for (int i = 9; i >= 0; --i) ratios.push_back(1.0 + i / 100.0);
  EXPECT_DOUBLE_EQ(RatioAtCoverage(ratios, 0.9), 1.09);
  EXPECT_DOUBLE_EQ(RatioAtCoverage(ratios, 0.5), 1.05);
  EXPECT_DOUBLE_EQ(RatioAtCoverage({1.17}, 1.0), 1.17);
  EXPECT_DOUBLE_EQ(RatioAtCoverage({1.171}, 1.0), 1.18);
}

}  // namespace
}  // namespace headroom
