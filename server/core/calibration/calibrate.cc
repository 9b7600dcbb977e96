#include "server/core/calibration/calibrate.h"

#include "absl/strings/str_cat.h"
#include "server/core/calibration/regimes.h"
#include "server/core/common/status_macros.h"
#include "server/core/memory/memory_profile.h"

namespace headroom {

v1::TrainingSetup CalibrationSetup() {
  v1::TrainingSetup setup;
  setup.set_precision(v1::TrainingSetup::FP32);
  setup.set_optimizer(v1::TrainingSetup::ADAMW);
  return setup;
}

absl::StatusOr<std::vector<FitSample>> SamplesFor(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog) {
  std::vector<FitSample> samples;
  const v1::TrainingSetup setup = CalibrationSetup();
  for (const v1::MeasuredRun& run : runs) {
    if (!IsUsable(run)) continue;
    ASSIGN_OR_RETURN(const v1::ModelSpec* spec, catalog.Find(run.template_()));
    ASSIGN_OR_RETURN(MemoryProfile profile, BuildProfile(*spec, setup));
    FitSample sample;
    sample.template_name = run.template_();
    const ComponentArray bytes = profile.BytesAt(run.batch());
    for (int c = 0; c < kNumComponents; ++c) {
      sample.component_gb[c] = bytes[c] / 1e9;
    }
    if (run.has_measured_peak_gb()) sample.measured_gb = run.measured_peak_gb();
    if (run.has_oom_on_gb()) sample.oom_gb = run.oom_on_gb();
    samples.push_back(sample);
  }
  return samples;
}

Predictions PredictRuns(const std::vector<v1::MeasuredRun>& runs,
                        const ModelCatalog& catalog,
                        const v1::Factors& factors) {
  const v1::TrainingSetup setup = CalibrationSetup();
  const ComponentArray f = FactorArray(factors);
  Predictions out;
  out.reserve(runs.size());
  for (const v1::MeasuredRun& run : runs) {
    absl::StatusOr<const v1::ModelSpec*> spec = catalog.Find(run.template_());
    if (!IsUsable(run) || !spec.ok()) {
      out.push_back(std::nullopt);
      continue;
    }
    absl::StatusOr<MemoryProfile> profile = BuildProfile(**spec, setup);
    if (!profile.ok()) {
      out.push_back(std::nullopt);
      continue;
    }
    out.push_back(PeakGb(profile->BytesAt(run.batch()), f));
  }
  return out;
}

absl::StatusOr<CalibrationResult> Calibrate(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    const FitOptions& options, const std::string& trained_on) {
  ASSIGN_OR_RETURN(std::vector<FitSample> samples, SamplesFor(runs, catalog));
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        "no usable run to fit: every run is excluded or the file is empty");
  }
  const FitResult fit = FitFactors(samples, options);
  const std::vector<double> heldout = HeldOutPredictions(samples, options);

  CalibrationResult result;
  size_t next = 0;
  for (const v1::MeasuredRun& run : runs) {
    if (!IsUsable(run)) {
      result.ours.push_back(std::nullopt);
      result.ours_heldout.push_back(std::nullopt);
      continue;
    }
    double in_sample = 0;
    for (int c = 0; c < kNumComponents; ++c) {
      in_sample += samples[next].component_gb[c] * fit.factors[c];
    }
    result.ours.push_back(in_sample);
    result.ours_heldout.push_back(heldout[next]);
    ++next;
  }

  PageRules rules;
  rules.headroom = options.headroom;
  v1::FactorSet& set = result.factor_set;
  *set.mutable_factors() = FactorsFromArray(fit.factors);
  set.set_headroom(options.headroom);
  set.set_oom_penalty(options.oom_penalty);
  set.set_trained_on(trained_on);
  auto& summary = *set.mutable_page()->mutable_summary();
  summary["ours"] = SummarizeColumn(runs, result.ours, rules);
  summary["ours_heldout"] = SummarizeColumn(runs, result.ours_heldout, rules);
  for (const char* column : {"reference_shipped", "reference_heldout",
                             "accelerate_fp32", "accelerate_bf16"}) {
    ASSIGN_OR_RETURN(Predictions predictions, ColumnOf(runs, column));
    bool any = false;
    for (const auto& p : predictions) any = any || p.has_value();
    if (any) summary[column] = SummarizeColumn(runs, predictions, rules);
  }
  ASSIGN_OR_RETURN(
      *set.mutable_page()->mutable_upper_bound(),
      SummarizeUpperBound(runs, result.ours_heldout, {0.9, 0.95}, rules));
  set.mutable_page()->mutable_upper_bound()->set_prediction("ours_heldout");
  set.set_k90(set.page().upper_bound().bounds(0).k());
  set.set_k95(set.page().upper_bound().bounds(1).k());
  RETURN_IF_ERROR(
      AddRegimes(runs, samples, result.ours_heldout, options, rules, &set));
  return result;
}

}  // namespace headroom
