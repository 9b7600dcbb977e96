#include "server/core/memory/fit_verdict.h"

#include <cmath>

namespace headroom {

FitVerdict Verdict(double peak_gb, double card_gb, const VerdictRule& rule) {
  if (peak_gb * rule.k * rule.headroom <= card_gb) return FitVerdict::kFits;
  if (peak_gb <= card_gb) return FitVerdict::kBorderline;
  return FitVerdict::kDoesNotFit;
}

v1::Verdict ToApiVerdict(FitVerdict verdict) {
  switch (verdict) {
    case FitVerdict::kFits:
      return v1::FITS;
    case FitVerdict::kBorderline:
      return v1::BORDERLINE;
    case FitVerdict::kDoesNotFit:
      return v1::DOES_NOT_FIT;
  }
  return v1::VERDICT_UNSPECIFIED;
}

std::optional<double> KAtCoverage(double k90, double k95, double coverage) {
  if (std::abs(coverage - 0.9) < 1e-9) return k90;
  if (std::abs(coverage - 0.95) < 1e-9) return k95;
  return std::nullopt;
}

double PeakAt(const MemoryProfile& profile, const ComponentArray& factors,
              uint64_t batch) {
  return PeakGb(profile.PeakBytesAt(batch, factors), factors);
}

uint64_t MaxBatch(const MemoryProfile& profile, const ComponentArray& factors,
                  double card_gb, const VerdictRule& rule, bool fits_only) {
  const double multiplier = fits_only ? rule.k * rule.headroom : 1.0;
  auto ok = [&](uint64_t batch) {
    return PeakAt(profile, factors, batch) * multiplier <= card_gb;
  };
  // The peak is non-decreasing in the batch, so the largest passing batch is
  // found by bisection: about 20 evaluations for 1..2^20.
  if (!ok(1)) return 0;
  if (ok(kMaxBatch)) return kMaxBatch;
  uint64_t good = 1, bad = kMaxBatch;
  while (bad - good > 1) {
    const uint64_t mid = good + (bad - good) / 2;
    (ok(mid) ? good : bad) = mid;
  }
  return good;
}

}  // namespace headroom
