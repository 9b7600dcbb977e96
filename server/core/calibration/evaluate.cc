#include "server/core/calibration/evaluate.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "server/core/calibration/calibrate.h"
#include "server/core/common/status_macros.h"
#include "server/core/memory/fit_verdict.h"
#include "server/core/memory/memory_profile.h"

namespace headroom {
absl::StatusOr<v1::EvalReport> EvaluateOn(
    const v1::FactorSet& set, const std::vector<v1::MeasuredRun>& test,
    const ModelCatalog& catalog, double coverage, const PageRules& rules) {
  const std::optional<double> calibrated_k =
      KAtCoverage(set.k90(), set.k95(), coverage);
  if (!calibrated_k.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coverage = ", coverage, " is not calibrated; allowed 0.9, 0.95"));
  }
  const double k = *calibrated_k;
  const ComponentArray factors = FactorArray(set.factors());
  const VerdictRule rule{rules.headroom, k};
  const v1::TrainingSetup setup = CalibrationSetup();
  v1::EvalReport report;
  *report.mutable_factors() = set.factors();
  Predictions predictions;
  predictions.reserve(test.size());
  for (size_t i = 0; i < test.size(); ++i) {
    const v1::MeasuredRun& run = test[i];
    absl::StatusOr<const v1::ModelSpec*> spec = catalog.Find(run.template_());
    if (!spec.ok()) {
      return absl::Status(
          spec.status().code(),
          absl::StrCat("test row ", i + 1, ": ", spec.status().message()));
    }
    if (run.batch() == 0 || run.batch() > kMaxBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("test row ", i + 1, ": batch = ", run.batch(),
                       " is out of range; allowed 1..", kMaxBatch));
    }
    ASSIGN_OR_RETURN(MemoryProfile profile, BuildProfile(**spec, setup));
    const double peak = PeakAt(profile, factors, run.batch());
    predictions.push_back(peak);
    v1::EvalRow* row = report.add_rows();
    row->set_template_(run.template_());
    row->set_gpu(run.gpu());
    row->set_batch(static_cast<uint32_t>(run.batch()));
    row->set_predicted_gb(peak);
    row->set_upper_gb(peak * k);
    for (double card : rules.cards_gb) {
      (*row->mutable_verdicts())[absl::StrCat(card)] =
          v1::Verdict_Name(ToApiVerdict(Verdict(peak, card, rule)));
    }
  }
  const v1::ColumnSummary page = SummarizeColumn(test, predictions, rules);
  v1::EvalSummary& ours = (*report.mutable_summary())["ours"];
  ours.set_runs(page.runs());
  ours.set_median_abs_err(page.median_abs_err());
  ours.set_within25(page.within25());
  ours.set_under(page.under());
  ours.set_said_fits_but_oom(page.said_fits_but_oom());
  ours.set_said_no_but_fits(page.said_no_but_fits());
  ours.set_agree(page.agree());
  ours.set_k(k);
  ours.set_coverage(coverage);
  const v1::UpperBound b = CountVerdicts(test, predictions, coverage, k, rules);
  ours.set_no_fit(b.no_fit_fits() + b.no_fit_borderline() +
                  b.no_fit_does_not());
  ours.set_flagged(b.no_fit_borderline() + b.no_fit_does_not());
  ours.set_false_no(b.fit_borderline() + b.fit_does_not());
  return report;
}

}  // namespace headroom
