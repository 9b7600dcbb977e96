#include "core/calibration/regimes.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace headroom {

absl::Status AddRegimes(const std::vector<v1::MeasuredRun>& runs,
                        const std::vector<FitSample>& samples,
                        const Predictions& global_heldout,
                        const FitOptions& options, const PageRules& rules,
                        v1::FactorSet* set) {
  // Usable run index -> sample index, grouped by GPU.
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> by_gpu;
  size_t next = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (!IsUsable(runs[i])) continue;
    by_gpu[runs[i].gpu()].push_back({i, next++});
  }
  if (next != samples.size()) {
    return absl::InternalError("regimes: samples do not match usable runs");
  }
  for (const auto& [gpu, members] : by_gpu) {
    std::vector<v1::MeasuredRun> gpu_runs;
    std::vector<FitSample> gpu_samples;
    Predictions global;
    std::set<std::string> templates;
    int large = 0;
    for (const auto& [run_index, sample_index] : members) {
      const v1::MeasuredRun& run = runs[run_index];
      gpu_runs.push_back(run);
      gpu_samples.push_back(samples[sample_index]);
      global.push_back(global_heldout[run_index]);
      templates.insert(run.template_());
      if (run.has_measured_peak_gb() &&
          run.measured_peak_gb() >= rules.min_gb) {
        ++large;
      }
    }
    if (static_cast<int>(gpu_runs.size()) < kMinRegimeRuns ||
        static_cast<int>(templates.size()) < kMinRegimeTemplates ||
        large < kMinRegimeLarge) {
      continue;
    }
    const FitResult fit = FitFactors(gpu_samples, options);
    const std::vector<double> heldout =
        HeldOutPredictions(gpu_samples, options);
    const Predictions mine(heldout.begin(), heldout.end());

    v1::Regime* regime = set->add_regimes();
    regime->set_gpu(gpu);
    regime->set_runs(static_cast<int32_t>(gpu_runs.size()));
    *regime->mutable_factors() = FactorsFromArray(fit.factors);
    auto& summary = *regime->mutable_page()->mutable_summary();
    summary["ours_heldout"] = SummarizeColumn(gpu_runs, mine, rules);
    summary["global_heldout"] = SummarizeColumn(gpu_runs, global, rules);
    for (const char* column : {"reference_shipped", "reference_heldout"}) {
      ASSIGN_OR_RETURN(Predictions predictions, ColumnOf(gpu_runs, column));
      bool any = false;
      for (const auto& p : predictions) any = any || p.has_value();
      if (any) summary[column] = SummarizeColumn(gpu_runs, predictions, rules);
    }
    ASSIGN_OR_RETURN(*regime->mutable_page()->mutable_upper_bound(),
                     SummarizeUpperBound(gpu_runs, mine, {0.9, 0.95}, rules));
    regime->mutable_page()->mutable_upper_bound()->set_prediction(
        "ours_heldout");
    regime->set_k90(regime->page().upper_bound().bounds(0).k());
    regime->set_k95(regime->page().upper_bound().bounds(1).k());

    // The checks of runs that did not fit which each would call FITS, each
    // with the k it would answer with (the regime's own, or the global
    // set's), at the highest coverage the set calibrates.
    const v1::UpperBound& own_bound = regime->page().upper_bound().bounds(1);
    const v1::UpperBound global_bound = CountVerdicts(
        gpu_runs, global, own_bound.coverage(), set->k95(), rules);

    const v1::ColumnSummary& a = summary["ours_heldout"];
    const v1::ColumnSummary& b = summary["global_heldout"];
    const bool better = a.median_abs_err() < b.median_abs_err() &&
                        a.said_fits_but_oom() <= b.said_fits_but_oom() &&
                        own_bound.no_fit_fits() <= global_bound.no_fit_fits();
    regime->set_adopted(better);
    regime->set_reason(absl::StrCat(
        better ? "adopted" : "not adopted", ": held-out median abs error on ",
        gpu, "'s ", gpu_runs.size(), " runs ", a.median_abs_err(), " vs ",
        b.median_abs_err(), " global; saidFitsButOom ", a.said_fits_but_oom(),
        " vs ", b.said_fits_but_oom(), "; not fitting but FITS at coverage ",
        own_bound.coverage(), " ", own_bound.no_fit_fits(), " vs ",
        global_bound.no_fit_fits()));
  }
  return absl::OkStatus();
}

}  // namespace headroom
