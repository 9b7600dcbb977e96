#include "server/core/memory/fit_verdict.h"

#include <cmath>

namespace headroom {

FitVerdict Verdict(double peak_gb, double card_gb, const VerdictRule& rule) {
  if (peak_gb * rule.k * rule.headroom <= card_gb) return FitVerdict::kFits;
  if (peak_gb <= card_gb) return FitVerdict::kBorderline;
  return FitVerdict::kDoesNotFit;
}

double PeakAt(const MemoryProfile& profile, const ComponentArray& factors,
              uint64_t batch) {
  return PeakGb(profile.BytesAt(batch), factors);
}

uint64_t MaxBatch(const MemoryProfile& profile, const ComponentArray& factors,
                  double card_gb, const VerdictRule& rule, bool fits_only) {
  const double multiplier = fits_only ? rule.k * rule.headroom : 1.0;
  auto ok = [&](uint64_t batch) {
    return PeakAt(profile, factors, batch) * multiplier <= card_gb;
  };
  if (!ok(1)) return 0;
  // peak(B) = fixed + B * slope in GB, so the bound is one division; the
  // checks around it absorb floating-point rounding at the edge.
  const double fixed_gb = PeakGb(profile.fixed_bytes, factors);
  const double slope_gb = PeakGb(profile.per_sample_bytes, factors);
  if (slope_gb <= 0) return kMaxBatch;
  const double bound = (card_gb / multiplier - fixed_gb) / slope_gb;
  if (bound >= static_cast<double>(kMaxBatch)) {
    if (ok(kMaxBatch)) return kMaxBatch;
  }
  uint64_t batch = bound < 1 ? 1
                   : bound >= static_cast<double>(kMaxBatch)
                       ? kMaxBatch
                       : static_cast<uint64_t>(std::floor(bound));
  for (int i = 0; i < 4 && batch < kMaxBatch && ok(batch + 1); ++i) ++batch;
  for (int i = 0; i < 4 && batch > 1 && !ok(batch); ++i) --batch;
  return batch;
}

}  // namespace headroom
