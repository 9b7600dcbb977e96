#ifndef HEADROOM_CORE_MEMORY_FIT_VERDICT_H_
#define HEADROOM_CORE_MEMORY_FIT_VERDICT_H_

// The three-way verdict (docs/verdicts.md) and the largest batch per verdict,
// solved in closed form on the piecewise-linear peak (bisection only where
// the closed form is not settled), never scanned.

#include <cstdint>
#include <optional>

#include "base/value_bounds.h"
#include "core/memory/memory_profile.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

enum class FitVerdict { kFits, kBorderline, kDoesNotFit };

// Margins a verdict is taken with: fits when peak * k * headroom <= card.
struct VerdictRule {
  double headroom = 1.15;
  double k = 1.0;
};

// FITS if peak*k*headroom <= card; BORDERLINE if peak <= card; else
// DOES_NOT_FIT.
FitVerdict Verdict(double peak_gb, double card_gb, const VerdictRule& rule);

// The verdict as the API spells it.
v1::Verdict ToApiVerdict(FitVerdict verdict);

// The k calibrated for `coverage` (0.9 -> k90, 0.95 -> k95); nullopt for
// any other coverage, which has no calibrated k.
std::optional<double> KAtCoverage(double k90, double k95, double coverage);

// Peak in GB at `batch` for a profile and factors: the larger moment
// (MemoryProfile::PeakBytesAt), exactly as CheckFit's estimates compute it.
double PeakAt(const MemoryProfile& profile, const ComponentArray& factors,
              uint64_t batch);

// Largest batch in 1..kMaxBatch whose verdict is FITS (when `fits_only`) or
// not DOES_NOT_FIT; 0 when batch 1 already fails. Solved, not scanned: the
// peak is piecewise linear in the batch.
uint64_t MaxBatch(const MemoryProfile& profile, const ComponentArray& factors,
                  double card_gb, const VerdictRule& rule, bool fits_only);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_FIT_VERDICT_H_
