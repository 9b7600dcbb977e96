#include "core/memory/fit_verdict.h"

#include <algorithm>
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

namespace {

// The peak as a closed form in the batch b under fixed factors, in GB:
// max(update, fixed + b * slope). Only to solve for the max batch: the peak
// itself is PeakAt, the one definition the verdicts use too.
struct PeakLine {
  double update = 0;
  double fixed = 0;
  double slope = 0;

  PeakLine(const MemoryProfile& profile, const ComponentArray& factors) {
    for (int c = 0; c < kNumComponents; ++c) {
      update += factors[c] * profile.update_bytes[c];
      fixed += factors[c] * profile.fixed_bytes[c];
      slope += factors[c] * profile.per_sample_bytes[c];
    }
    update /= 1e9;
    fixed /= 1e9;
    slope /= 1e9;
  }

  // Largest b (in reals, at most `cap`) with At(b) <= limit.
  double Solve(double limit, double cap) const {
    if (update > limit || fixed > limit) return 0;
    return slope > 0 ? std::min(cap, (limit - fixed) / slope) : cap;
  }
};

}  // namespace

double PeakAt(const MemoryProfile& profile, const ComponentArray& factors,
              uint64_t batch) {
  return PeakGb(profile.PeakBytesAt(batch, factors), factors);
}

uint64_t MaxBatch(const MemoryProfile& profile, const ComponentArray& factors,
                  double card_gb, const VerdictRule& rule, bool fits_only) {
  const double multiplier = fits_only ? rule.k * rule.headroom : 1.0;
  const PeakLine line(profile, factors);
  auto ok = [&](uint64_t batch) {
    return PeakAt(profile, factors, batch) * multiplier <= card_gb;
  };
  // Solved in closed form (the peak is piecewise linear and non-decreasing
  // in the batch), then checked against the verdict rule itself: rounding
  // can put the real solution a step off.
  uint64_t b = static_cast<uint64_t>(std::floor(
      line.Solve(card_gb / multiplier, static_cast<double>(kMaxBatch))));
  for (int step = 0; step < 3 && b > 0 && !ok(b); ++step) --b;
  for (int step = 0; step < 3 && b < kMaxBatch && ok(b + 1); ++step) ++b;
  if ((b == 0 || ok(b)) && (b == kMaxBatch || !ok(b + 1))) return b;
  // Not settled by the steps above: bisection over 1..kMaxBatch.
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
