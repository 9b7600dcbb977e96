#include "core/calibration/evaluate.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/calibration/calibrate.h"
#include "core/catalog/gpu_catalog.h"
#include "core/memory/fit_verdict.h"
#include "core/memory/memory_profile.h"
#include "core/planner/fit_planner.h"

namespace headroom {
v1::CheckFitRequest RequestForRun(const v1::MeasuredRun& run,
                                  double unknown_card_gb) {
  v1::CheckFitRequest request;
  if (run.has_spec()) {
    *request.mutable_model()->mutable_spec() = run.spec();
  } else {
    request.mutable_model()->set_template_(run.template_());
  }
  *request.mutable_setup() = run.has_setup() ? run.setup() : CalibrationSetup();
  request.add_batches(static_cast<uint32_t>(run.batch()));
  request.set_include_simulated(run.simulated());
  absl::StatusOr<GpuInfo> gpu = FindGpu(run.gpu());
  if (gpu.ok()) {
    request.add_targets()->set_gpu(gpu->name);
  } else {
    request.add_targets()->set_memory_gb(unknown_card_gb);
  }
  return request;
}

absl::StatusOr<v1::EvalReport> EvaluateOn(
    const v1::FactorSet& set, const std::vector<v1::MeasuredRun>& test,
    const ModelCatalog& catalog, double coverage, const PageRules& rules,
    const Evidence* evidence) {
  if (!KAtCoverage(set.k90(), set.k95(), coverage).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coverage = ", coverage, " is not calibrated; allowed 0.9, 0.95"));
  }
  // The service's own answer for each row: the planner over this factor
  // set, anchored on `evidence` when it holds the row's key.
  const FitPlanner planner(
      std::shared_ptr<const ModelCatalog>(&catalog, [](const ModelCatalog*) {}),
      set, coverage);
  v1::EvalReport report;
  *report.mutable_factors() = set.factors();
  Predictions predictions;
  predictions.reserve(test.size());
  std::vector<double> ks;
  for (size_t i = 0; i < test.size(); ++i) {
    const v1::MeasuredRun& run = test[i];
    if (run.batch() == 0 || run.batch() > kMaxBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("test row ", i + 1, ": batch = ", run.batch(),
                       " is out of range; allowed 1..", kMaxBatch));
    }
    absl::StatusOr<v1::CheckFitResponse> answer =
        planner.CheckFit(RequestForRun(run, rules.cards_gb.front()), evidence);
    if (!answer.ok()) {
      return absl::Status(
          answer.status().code(),
          absl::StrCat("test row ", i + 1, ": ", answer.status().message()));
    }
    const v1::BatchEstimate& estimate = answer->estimates(0);
    // On the row's own card (its GPU constant) when the catalog knows it.
    const double peak = FindGpu(run.gpu()).ok() ? answer->targets(0).peaks_gb(0)
                                                : estimate.peak_gb();
    const double k = estimate.k();
    predictions.push_back(peak);
    ks.push_back(k);
    v1::EvalRow* row = report.add_rows();
    row->set_template_(run.template_().empty() ? run.spec().name()
                                               : run.template_());
    row->set_gpu(run.gpu());
    row->set_batch(static_cast<uint32_t>(run.batch()));
    row->set_predicted_gb(peak);
    row->set_upper_gb(peak * k);
    row->set_basis(
        estimate.basis().kind() == v1::Basis::ANCHORED
            ? absl::StrCat("anchored on ", estimate.basis().runs(), " runs")
            : "prior only");
    for (double card : rules.cards_gb) {
      (*row->mutable_verdicts())[absl::StrCat(card)] = v1::Verdict_Name(
          ToApiVerdict(Verdict(peak, card, {rules.headroom, k})));
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
  ours.set_k(*KAtCoverage(planner.prior().k90, planner.prior().k95, coverage));
  ours.set_coverage(coverage);
  // Three-way counts with each row's own k (anchored rows take their
  // extrapolation bucket's).
  int no_fit = 0, flagged = 0, false_no = 0;
  for (size_t i = 0; i < test.size(); ++i) {
    const std::vector<v1::MeasuredRun> one = {test[i]};
    const v1::UpperBound b =
        CountVerdicts(one, {predictions[i]}, coverage, ks[i], rules);
    no_fit += b.no_fit_fits() + b.no_fit_borderline() + b.no_fit_does_not();
    flagged += b.no_fit_borderline() + b.no_fit_does_not();
    false_no += b.fit_borderline() + b.fit_does_not();
  }
  ours.set_no_fit(no_fit);
  ours.set_flagged(flagged);
  ours.set_false_no(false_no);
  return report;
}

}  // namespace headroom
