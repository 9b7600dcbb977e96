#include "server/core/calibration/calibrate.h"

#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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

namespace {

// How far a spec's parameter count may be from the measured model's before
// the spec is taken to describe a different model.
constexpr double kParamTolerance = 5e-4;

std::string Gb(double gb) { return absl::StrFormat("%.2f GB", gb); }

}  // namespace

absl::StatusOr<std::vector<FitSample>> SamplesFor(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    std::vector<std::string>* left_out) {
  std::vector<FitSample> samples;
  // Template -> why its runs must not move the factors (first reason found).
  std::map<std::string, std::string> unfit;
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
      sample.update_gb[c] = profile.update_bytes[c] / 1e9;
    }
    if (run.has_measured_peak_gb()) sample.measured_gb = run.measured_peak_gb();
    if (run.has_oom_on_gb()) sample.oom_gb = run.oom_on_gb();
    samples.push_back(sample);
    if (unfit.count(run.template_()) != 0) continue;
    // A spec that is not the measured model (a different parameter count),
    // or whose own weights and largest tensor exceed what was measured,
    // cannot be fitted to that model's runs.
    const double measured_params = static_cast<double>(run.params());
    const double spec_params = static_cast<double>(profile.params);
    if (measured_params > 0 && std::abs(spec_params - measured_params) >
                                   kParamTolerance * measured_params) {
      unfit[run.template_()] = absl::StrFormat(
          "the spec has %.0f parameters, the measured model %.0f (%+.2f%%)",
          spec_params, measured_params,
          100.0 * (spec_params - measured_params) / measured_params);
      continue;
    }
    if (run.has_measured_peak_gb()) {
      const double floor_gb =
          (spec_params * 4.0 + static_cast<double>(run.batch()) *
                                   profile.largest_tensor_per_sample) /
          1e9;
      if (floor_gb > run.measured_peak_gb()) {
        unfit[run.template_()] = absl::StrCat(
            "at batch ", run.batch(), " on ", run.gpu(),
            " the spec's fp32 weights and largest tensor alone are ",
            Gb(floor_gb), ", more than the measured ",
            Gb(run.measured_peak_gb()));
      }
    }
  }
  for (FitSample& sample : samples) {
    sample.fit = unfit.count(sample.template_name) == 0;
  }
  if (left_out != nullptr) {
    for (const auto& [name, why] : unfit) {
      left_out->push_back(absl::StrCat(name, ": ", why));
    }
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
    out.push_back(PeakGb(profile->PeakBytesAt(run.batch(), f), f));
  }
  return out;
}

absl::StatusOr<CalibrationResult> Calibrate(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    const FitOptions& options, const std::string& trained_on) {
  std::vector<std::string> left_out;
  ASSIGN_OR_RETURN(std::vector<FitSample> samples,
                   SamplesFor(runs, catalog, &left_out));
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
    result.ours.push_back(PredictGb(samples[next], fit.factors));
    result.ours_heldout.push_back(heldout[next]);
    ++next;
  }

  PageRules rules;
  rules.headroom = options.headroom;
  v1::FactorSet& set = result.factor_set;
  *set.mutable_factors() = FactorsFromArray(fit.factors);
  set.set_headroom(options.headroom);
  set.set_oom_penalty(options.oom_penalty);
  set.set_prior_weight(options.prior_weight);
  set.set_trained_on(trained_on);
  for (std::string& line : left_out) {
    set.mutable_page()->add_left_out_of_fit(std::move(line));
  }
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
  result.samples = std::move(samples);
  return result;
}

}  // namespace headroom
