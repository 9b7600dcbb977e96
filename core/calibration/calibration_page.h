#ifndef HEADROOM_CORE_CALIBRATION_CALIBRATION_PAGE_H_
#define HEADROOM_CORE_CALIBRATION_CALIBRATION_PAGE_H_

// The calibration page (docs/calibration-page.md): how well a column of
// predictions matches measured runs, and the calibrated upper bound taken from
// it.

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// The reference rules: headroom 1.15, cards 16/24/40/80 GB, runs of at least
// 1 GB for error figures.
struct PageRules {
  double headroom = 1.15;
  std::vector<double> cards_gb = {16, 24, 40, 80};
  double min_gb = 1.0;
};

// One prediction per run (GB); nullopt where the column has none, which
// skips the run for that column.
using Predictions = std::vector<std::optional<double>>;

// The prediction column named `column` of memory-runs.jsonl
// ("reference_shipped", "reference_heldout", "accelerate_fp32",
// "accelerate_bf16"); INVALID_ARGUMENT for another name.
absl::StatusOr<Predictions> ColumnOf(const std::vector<v1::MeasuredRun>& runs,
                                     const std::string& column);

// medianAbsErr (rounded to 4 decimals), within25 and under over usable runs
// of at least min_gb; saidFitsButOom, saidNoButFits and agree over usable
// runs x cards. `predictions` must have one entry per run.
v1::ColumnSummary SummarizeColumn(const std::vector<v1::MeasuredRun>& runs,
                                  const Predictions& predictions,
                                  const PageRules& rules);

// k(coverage): the sorted measured/predicted ratio at index
// ceil(coverage*(n-1)) over usable runs of at least min_gb, rounded up to
// 0.01. INVALID_ARGUMENT when no run qualifies or coverage is outside (0,1].
absl::StatusOr<double> UpperBoundK(const std::vector<v1::MeasuredRun>& runs,
                                   const Predictions& predictions,
                                   double coverage, const PageRules& rules);

// The three-way verdict counts (FITS / BORDERLINE / DOES_NOT_FIT against
// whether each usable run fits each card) at a given k.
v1::UpperBound CountVerdicts(const std::vector<v1::MeasuredRun>& runs,
                             const Predictions& predictions, double coverage,
                             double k, const PageRules& rules);

// k and the three-way verdict counts at each coverage.
absl::StatusOr<v1::UpperBoundPage> SummarizeUpperBound(
    const std::vector<v1::MeasuredRun>& runs, const Predictions& predictions,
    const std::vector<double>& coverages, const PageRules& rules);

// True when the run may enter a calibration (no `excluded` reason).
bool IsUsable(const v1::MeasuredRun& run);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_CALIBRATION_PAGE_H_
