#include "core/memory/fit_verdict.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

TEST(FitVerdictTest, ThreeWayRule) {
  const VerdictRule rule{1.15, 1.43};
  // 10 * 1.43 * 1.15 = 16.445.
  EXPECT_EQ(Verdict(10, 16.445, rule), FitVerdict::kFits);
  EXPECT_EQ(Verdict(10, 16.4, rule), FitVerdict::kBorderline);
  EXPECT_EQ(Verdict(10, 10, rule), FitVerdict::kBorderline);
  EXPECT_EQ(Verdict(10.01, 10, rule), FitVerdict::kDoesNotFit);
}

MemoryProfile Profile(double fixed_gb, double per_sample_gb) {
  MemoryProfile p;
  p.fixed_bytes[kOptimizer] = fixed_gb * 1e9;
  p.per_sample_bytes[kOutputs] = per_sample_gb * 1e9;
  return p;
}

// The solved max batch equals a scan over every batch.
TEST(FitVerdictTest, SolvedMaxBatchEqualsScan) {
  const ComponentArray factors = {1.2, 0.9, 1, 1, 1, 1};
  const VerdictRule rule{1.15, 1.17};
  for (double fixed : {0.1, 2.0, 13.7}) {
    for (double slope : {0.0123, 0.25, 1.7}) {
      const MemoryProfile profile = Profile(fixed, slope);
      for (double card : {16.0, 24.0, 80.0}) {
        for (bool fits_only : {true, false}) {
          uint64_t scanned = 0;
          for (uint64_t b = 1; b <= 20000; ++b) {
            const double peak = PeakAt(profile, factors, b);
            const FitVerdict v = Verdict(peak, card, rule);
            const bool ok = fits_only ? v == FitVerdict::kFits
                                      : v != FitVerdict::kDoesNotFit;
            if (ok) scanned = b;
          }
          EXPECT_EQ(MaxBatch(profile, factors, card, rule, fits_only), scanned)
              << fixed << " " << slope << " " << card << " " << fits_only;
        }
      }
    }
  }
}

// With both moments (the update winning for small batches or everywhere),
// the solved max batch still equals a scan, and PeakAt is the larger
// moment's sum of factor * bytes.
TEST(FitVerdictTest, SolvedMaxBatchEqualsScanWithBothMoments) {
  const ComponentArray factors = {1.05, 0.9, 1.3, 0.7, 2.0, 1.1};
  const VerdictRule rule{1.15, 1.43};
  for (double update_gb : {0.5, 9.0, 30.0}) {
    for (double fixed_transient_gb : {0.0, 3.0}) {
      MemoryProfile profile = Profile(6.0, 0.0123);
      profile.per_sample_bytes[kInternal] = 0.004e9;
      profile.fixed_bytes[kTransient] = fixed_transient_gb * 1e9;
      profile.per_sample_bytes[kTransient] = 0.0377e9;
      profile.update_bytes[kOptimizer] = update_gb * 1e9;
      for (uint64_t b : {1, 50, 400}) {
        EXPECT_DOUBLE_EQ(PeakAt(profile, factors, b),
                         PeakGb(profile.PeakBytesAt(b, factors), factors));
      }
      for (double card : {16.0, 24.0, 80.0}) {
        for (bool fits_only : {true, false}) {
          uint64_t scanned = 0;
          for (uint64_t b = 1; b <= 5000; ++b) {
            const FitVerdict v =
                Verdict(PeakAt(profile, factors, b), card, rule);
            if (fits_only ? v == FitVerdict::kFits
                          : v != FitVerdict::kDoesNotFit) {
              scanned = b;
            }
          }
          EXPECT_EQ(MaxBatch(profile, factors, card, rule, fits_only), scanned)
              << update_gb << " " << fixed_transient_gb << " " << card << " "
              << fits_only;
        }
      }
    }
  }
}

TEST(FitVerdictTest, NothingFitsGivesZero) {
  const ComponentArray factors = {1, 1, 1, 1, 1, 1};
  EXPECT_EQ(MaxBatch(Profile(30, 1), factors, 24, {1.15, 1.0}, false), 0u);
}

TEST(FitVerdictTest, BatchIndependentModelCapsAtMaxBatch) {
  const ComponentArray factors = {1, 1, 1, 1, 1, 1};
  EXPECT_EQ(MaxBatch(Profile(1, 0), factors, 24, {1.15, 1.0}, true), kMaxBatch);
}

}  // namespace
}  // namespace headroom
