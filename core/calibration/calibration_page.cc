#include "core/calibration/calibration_page.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/ratios.h"
#include "core/memory/fit_verdict.h"

namespace headroom {
namespace {

// Ground truth for one run on one card: fits, does not fit, or unknown (an
// OOM on a smaller card says nothing about larger ones).
enum class Truth { kFits, kDoesNotFit, kUnknown };

Truth TruthOn(const v1::MeasuredRun& run, double card_gb) {
  if (run.has_measured_peak_gb()) {
    return run.measured_peak_gb() <= card_gb ? Truth::kFits
                                             : Truth::kDoesNotFit;
  }
  if (run.has_oom_on_gb() && card_gb <= run.oom_on_gb()) {
    return Truth::kDoesNotFit;
  }
  return Truth::kUnknown;
}

double RoundTo(double value, double scale) {
  return std::round(value * scale) / scale;
}

}  // namespace

bool IsUsable(const v1::MeasuredRun& run) { return run.excluded().empty(); }

absl::StatusOr<Predictions> ColumnOf(const std::vector<v1::MeasuredRun>& runs,
                                     const std::string& column) {
  Predictions out;
  out.reserve(runs.size());
  for (const v1::MeasuredRun& run : runs) {
    if (column == "reference_shipped") {
      out.push_back(run.has_reference_shipped_gb()
                        ? std::optional<double>(run.reference_shipped_gb())
                        : std::nullopt);
    } else if (column == "reference_heldout") {
      out.push_back(run.has_reference_heldout_gb()
                        ? std::optional<double>(run.reference_heldout_gb())
                        : std::nullopt);
    } else if (column == "accelerate_fp32") {
      out.push_back(run.has_accelerate_fp32_gb()
                        ? std::optional<double>(run.accelerate_fp32_gb())
                        : std::nullopt);
    } else if (column == "accelerate_bf16") {
      out.push_back(run.has_accelerate_bf16_gb()
                        ? std::optional<double>(run.accelerate_bf16_gb())
                        : std::nullopt);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "column '", column,
          "' is unknown; allowed reference_shipped, reference_heldout, "
          "accelerate_fp32, accelerate_bf16"));
    }
  }
  return out;
}

v1::ColumnSummary SummarizeColumn(const std::vector<v1::MeasuredRun>& runs,
                                  const Predictions& predictions,
                                  const PageRules& rules) {
  v1::ColumnSummary summary;
  std::vector<double> errors;
  int within25 = 0, under = 0, said_fits_but_oom = 0, said_no_but_fits = 0,
      agree = 0;
  for (size_t i = 0; i < runs.size() && i < predictions.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run) || !predictions[i].has_value()) continue;
    const double predicted = *predictions[i];
    if (run.has_measured_peak_gb() && run.measured_peak_gb() >= rules.min_gb) {
      const double measured = run.measured_peak_gb();
      const double error = std::abs(predicted - measured) / measured;
      errors.push_back(error);
      if (error <= 0.25) ++within25;
      if (predicted < measured) ++under;
    }
    for (double card : rules.cards_gb) {
      const Truth truth = TruthOn(run, card);
      if (truth == Truth::kUnknown) continue;
      const bool said_fits =
          Verdict(predicted, card, {rules.headroom, 1.0}) == FitVerdict::kFits;
      const bool fits = truth == Truth::kFits;
      if (said_fits && !fits) {
        ++said_fits_but_oom;
      } else if (!said_fits && fits) {
        ++said_no_but_fits;
      } else {
        ++agree;
      }
    }
  }
  const double median = Median(errors);
  summary.set_runs(static_cast<int>(errors.size()));
  summary.set_median_abs_err(RoundTo(median, 1e4));
  summary.set_within25(within25);
  summary.set_under(under);
  summary.set_said_fits_but_oom(said_fits_but_oom);
  summary.set_said_no_but_fits(said_no_but_fits);
  summary.set_agree(agree);
  return summary;
}

absl::StatusOr<double> UpperBoundK(const std::vector<v1::MeasuredRun>& runs,
                                   const Predictions& predictions,
                                   double coverage, const PageRules& rules) {
  if (!(coverage > 0 && coverage <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coverage = ", coverage, " is out of range; allowed (0, 1]"));
  }
  std::vector<double> ratios;
  for (size_t i = 0; i < runs.size() && i < predictions.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run) || !predictions[i].has_value() ||
        !run.has_measured_peak_gb() || run.measured_peak_gb() < rules.min_gb ||
        *predictions[i] <= 0) {
      continue;
    }
    ratios.push_back(run.measured_peak_gb() / *predictions[i]);
  }
  if (ratios.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no usable measured run of at least ", rules.min_gb,
        " GB with a prediction; the upper bound needs at least one"));
  }
  return RatioAtCoverage(std::move(ratios), coverage);
}

v1::UpperBound CountVerdicts(const std::vector<v1::MeasuredRun>& runs,
                             const Predictions& predictions, double coverage,
                             double k, const PageRules& rules) {
  v1::UpperBound bound;
  bound.set_coverage(coverage);
  bound.set_k(k);
  for (size_t i = 0; i < runs.size() && i < predictions.size(); ++i) {
    if (!IsUsable(runs[i]) || !predictions[i].has_value()) continue;
    const double p = *predictions[i];
    for (double card : rules.cards_gb) {
      const Truth truth = TruthOn(runs[i], card);
      if (truth == Truth::kUnknown) continue;
      const bool fits = truth == Truth::kFits;
      const FitVerdict verdict = Verdict(p, card, {rules.headroom, k});
      if (verdict == FitVerdict::kFits) {
        fits ? bound.set_fit_fits(bound.fit_fits() + 1)
             : bound.set_no_fit_fits(bound.no_fit_fits() + 1);
      } else if (verdict == FitVerdict::kBorderline) {
        fits ? bound.set_fit_borderline(bound.fit_borderline() + 1)
             : bound.set_no_fit_borderline(bound.no_fit_borderline() + 1);
      } else {
        fits ? bound.set_fit_does_not(bound.fit_does_not() + 1)
             : bound.set_no_fit_does_not(bound.no_fit_does_not() + 1);
      }
    }
  }
  return bound;
}

absl::StatusOr<v1::UpperBoundPage> SummarizeUpperBound(
    const std::vector<v1::MeasuredRun>& runs, const Predictions& predictions,
    const std::vector<double>& coverages, const PageRules& rules) {
  v1::UpperBoundPage page;
  page.set_min_gb(rules.min_gb);
  int n = 0;
  for (size_t i = 0; i < runs.size() && i < predictions.size(); ++i) {
    if (IsUsable(runs[i]) && predictions[i].has_value() &&
        runs[i].has_measured_peak_gb() &&
        runs[i].measured_peak_gb() >= rules.min_gb) {
      ++n;
    }
  }
  page.set_runs(n);
  for (double coverage : coverages) {
    absl::StatusOr<double> k = UpperBoundK(runs, predictions, coverage, rules);
    if (!k.ok()) return k.status();
    *page.add_bounds() = CountVerdicts(runs, predictions, coverage, *k, rules);
  }
  return page;
}

}  // namespace headroom
