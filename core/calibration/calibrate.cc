#include "core/calibration/calibrate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/units.h"
#include "core/calibration/kind_bounds.h"
#include "core/calibration/regimes.h"
#include "core/evidence/anchor.h"
#include "core/evidence/evidence.h"
#include "core/evidence/model_key.h"
#include "core/memory/device_memory.h"
#include "core/memory/memory_profile.h"
#include "core/memory/parallel.h"

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

}  // namespace

std::string ModelName(const v1::MeasuredRun& run) {
  if (!run.template_().empty()) return run.template_();
  return run.model_key().empty() ? run.spec().name() : run.model_key();
}

absl::StatusOr<std::pair<v1::ModelSpec, v1::TrainingSetup>> MeasuredModel(
    const v1::MeasuredRun& run, const ModelCatalog& catalog) {
  if (run.has_spec()) return std::make_pair(run.spec(), run.setup());
  ASSIGN_OR_RETURN(const v1::ModelSpec* spec, catalog.Find(run.template_()));
  return std::make_pair(*spec,
                        run.has_setup() ? run.setup() : CalibrationSetup());
}

absl::StatusOr<std::vector<FitSample>> SamplesFor(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    std::vector<std::string>* left_out) {
  std::vector<FitSample> samples;
  // Template -> why its runs must not move the factors (first reason found).
  std::map<std::string, std::string> unfit;
  for (const v1::MeasuredRun& run : runs) {
    if (!IsUsable(run)) continue;
    ASSIGN_OR_RETURN(auto model, MeasuredModel(run, catalog));
    ASSIGN_OR_RETURN(MemoryProfile profile,
                     BuildProfile(model.first, model.second));
    FitSample sample;
    sample.template_name = ModelName(run);
    const ComponentArray bytes = profile.BytesAt(run.batch());
    for (int c = 0; c < kNumComponents; ++c) {
      sample.component_gb[c] = bytes[c] / 1e9;
      sample.update_gb[c] = profile.update_bytes[c] / 1e9;
    }
    if (run.has_measured_peak_gb()) sample.measured_gb = run.measured_peak_gb();
    if (run.has_oom_on_gb()) sample.oom_gb = run.oom_on_gb();
    samples.push_back(sample);
    if (unfit.count(sample.template_name) != 0) continue;
    // A spec that is not the measured model (a different parameter count),
    // or whose own weights and largest tensor exceed what was measured,
    // cannot be fitted to that model's runs.
    const double measured_params = static_cast<double>(run.params());
    const double spec_params = static_cast<double>(profile.params);
    if (measured_params > 0 && std::abs(spec_params - measured_params) >
                                   kParamTolerance * measured_params) {
      unfit[sample.template_name] = absl::StrFormat(
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
        unfit[sample.template_name] = absl::StrCat(
            "at batch ", run.batch(), " on ", run.gpu(),
            " the spec's fp32 weights and largest tensor alone are ",
            FormatGb(floor_gb, 2), ", more than the measured ",
            FormatGb(run.measured_peak_gb(), 2));
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
                        const ModelCatalog& catalog, const v1::Factors& factors,
                        double constant_gb) {
  const ComponentArray f = FactorArray(factors);
  Predictions out;
  out.reserve(runs.size());
  for (const v1::MeasuredRun& run : runs) {
    auto model = MeasuredModel(run, catalog);
    if (!IsUsable(run) || !model.ok()) {
      out.push_back(std::nullopt);
      continue;
    }
    absl::StatusOr<MemoryProfile> profile =
        BuildProfile(model->first, model->second);
    if (!profile.ok()) {
      out.push_back(std::nullopt);
      continue;
    }
    out.push_back(PeakGb(profile->PeakBytesAt(run.batch(), f), f) +
                  constant_gb);
  }
  return out;
}

namespace {

// The global factors are fitted on the reference file's runs (and on
// simulated ones when the caller passed them); every other source gets its
// own fit on the page (SourceFit).
bool InGlobalFit(const v1::MeasuredRun& run) {
  const v1::MeasurementSource source = MeasuredBy(run);
  return source == v1::REFERENCE || source == v1::SIM;
}

// Usable runs of at least 1 GB a source needs before its factors answer as
// a prior.
constexpr int kMinPriorRuns = 30;

// Candidates of a source's fit, chosen held out: constants 0 and
// kConstantSteps steps of kConstantStepGb (0.02 .. 0.2 GB); Huber's loss
// off or beyond a relative error of 5 % or 10 %.
constexpr double kConstantStepGb = 0.02;
constexpr int kConstantSteps = 10;
constexpr double kHuberDeltas[] = {0, 0.05, 0.1};
// Past this many usable runs, a source's candidates are compared on every
// k-th of them (k = ceil(runs / this), the runs in their stored order, so
// every template keeps its share): 33 candidates held out by template on
// a million runs took 23 minutes (bench/million_runs.cc). The chosen
// candidate is then fitted, and held out, on every run.
constexpr size_t kMaxChoiceRuns = 20000;

template <typename T>
std::vector<T> Subset(const std::vector<T>& all,
                      const std::vector<size_t>& index) {
  std::vector<T> out;
  out.reserve(index.size());
  for (size_t i : index) out.push_back(all[i]);
  return out;
}

Predictions Expand(const Predictions& subset, const std::vector<size_t>& index,
                   size_t size) {
  Predictions out(size);
  for (size_t i = 0; i < index.size(); ++i) out[index[i]] = subset[i];
  return out;
}

// The page's ours_anchored column: each run predicted from the other runs
// of its template (leave one run out), shaped by the factors fitted without
// that template, with GPU constants fitted without it.
absl::StatusOr<Predictions> AnchoredColumn(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    const std::map<std::string, FitResult>& heldout_factors,
    const FitOptions& options, const PageRules& rules, v1::FactorSet* set) {
  std::map<std::string, size_t> group_of;
  std::vector<AnchorGroup> groups;
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run)) continue;
    const std::string name = ModelName(run);
    auto factors = heldout_factors.find(name);
    if (factors == heldout_factors.end()) continue;
    auto [it, inserted] = group_of.emplace(name, groups.size());
    if (inserted) {
      ASSIGN_OR_RETURN(auto model, MeasuredModel(run, catalog));
      ASSIGN_OR_RETURN(MemoryProfile profile,
                       BuildProfile(model.first, model.second));
      AnchorGroup group;
      group.key_id = name;
      group.name = name;
      group.shape = ShapeOf(profile, factors->second.factors,
                            factors->second.constant_gb);
      groups.push_back(std::move(group));
    }
    groups[it->second].runs.push_back(i);
  }
  AnchorOptions anchor;
  anchor.headroom = options.headroom;
  anchor.oom_penalty = options.oom_penalty;
  anchor.min_gb = rules.min_gb;
  const AnchorCalibration calibration =
      CalibrateAnchors(runs, groups, set->k90(), set->k95(), anchor);
  const v1::ColumnSummary loo = SummarizeColumn(runs, calibration.loo, rules);
  (*set->mutable_page()->mutable_summary())["ours_anchored"] = loo;
  *set->mutable_page()->mutable_anchored() =
      AnchoredBoundOf(calibration, loo, anchor);
  return calibration.loo;
}

// Each run of `runs` predicted held out by template (nullopt for the runs
// that are not usable), `of` being the usable runs' samples.
Predictions HeldOutAt(const std::vector<v1::MeasuredRun>& runs,
                      const std::vector<FitSample>& of,
                      const FitOptions& global_options, double huber,
                      double constant) {
  FitOptions options = global_options;
  options.huber_delta = huber;
  options.constant_gb = constant;
  const std::vector<double> heldout = HeldOutPredictions(of, options);
  Predictions out;
  size_t next = 0;
  for (const v1::MeasuredRun& run : runs) {
    out.push_back(IsUsable(run) ? std::optional<double>(heldout[next++])
                                : std::nullopt);
  }
  return out;
}

// A source's chosen constant and Huber delta, with its runs' held-out
// predictions under them.
struct SourceChoice {
  double constant = 0;
  double huber = 0;
  Predictions heldout;
};

// A source measured with today's framework carries its own allocations
// (workspaces from the caching allocator), and a few of its runs may be of
// models the spec describes badly: a constant, and Huber's loss beyond a
// relative error, both chosen held out by template. The choice is the
// least biased one (under-predicted runs closest to half), then the most
// accurate (median abs error), then the simplest (first tried).
SourceChoice ChooseSourceFit(const std::vector<v1::MeasuredRun>& source_runs,
                             const std::vector<FitSample>& samples,
                             const FitOptions& global_options,
                             const PageRules& rules) {
  // The runs (and their samples) the candidates are compared on.
  const bool sampled = samples.size() > kMaxChoiceRuns;
  std::vector<v1::MeasuredRun> choice_runs;
  std::vector<FitSample> choice_samples;
  if (sampled) {
    const size_t every = (samples.size() + kMaxChoiceRuns - 1) / kMaxChoiceRuns;
    size_t usable = 0;
    for (const v1::MeasuredRun& run : source_runs) {
      if (!IsUsable(run)) continue;
      if (usable % every == 0) {
        choice_runs.push_back(run);
        choice_samples.push_back(samples[usable]);
      }
      ++usable;
    }
  }
  const std::vector<v1::MeasuredRun>& compared =
      sampled ? choice_runs : source_runs;
  const std::vector<FitSample>& compared_samples =
      sampled ? choice_samples : samples;
  SourceChoice choice;
  std::pair<int, double> best = {-1, 0};
  for (double delta : kHuberDeltas) {
    for (int step = 0; step <= kConstantSteps; ++step) {
      const double candidate = step * kConstantStepGb;
      Predictions predictions = HeldOutAt(compared, compared_samples,
                                          global_options, delta, candidate);
      const v1::ColumnSummary summary =
          SummarizeColumn(compared, predictions, rules);
      const std::pair<int, double> score = {
          std::abs(2 * summary.under() - summary.runs()),
          summary.median_abs_err()};
      if (best.first < 0 || score < best) {
        best = score;
        choice.constant = candidate;
        choice.huber = delta;
        choice.heldout = std::move(predictions);
      }
    }
  }
  if (sampled) {
    choice.heldout = HeldOutAt(source_runs, samples, global_options,
                               choice.huber, choice.constant);
  }
  return choice;
}

// One source's own global fit, held out by template, and how each of the
// global and this source's factors predicts the other's runs.
absl::Status AddSourceFit(const std::vector<v1::MeasuredRun>& global_runs,
                          const std::vector<v1::MeasuredRun>& source_runs,
                          v1::MeasurementSource source,
                          const ModelCatalog& catalog,
                          const FitOptions& global_options,
                          const PageRules& rules, v1::FactorSet* set) {
  ASSIGN_OR_RETURN(std::vector<FitSample> samples,
                   SamplesFor(source_runs, catalog));
  if (samples.empty()) return absl::OkStatus();
  const SourceChoice choice =
      ChooseSourceFit(source_runs, samples, global_options, rules);
  FitOptions options = global_options;
  options.constant_gb = choice.constant;
  options.huber_delta = choice.huber;
  const FitResult fit = FitFactors(samples, options);
  int big = 0;
  for (const v1::MeasuredRun& run : source_runs) {
    if (IsUsable(run) && run.has_measured_peak_gb() &&
        run.measured_peak_gb() >= rules.min_gb) {
      ++big;
    }
  }
  v1::SourceFit* out = set->mutable_page()->add_sources();
  out->set_source(SourceName(source));
  *out->mutable_factors() = FactorsFromArray(fit.factors);
  out->set_constant_gb(fit.constant_gb);
  out->set_huber_delta(choice.huber);
  out->set_runs(static_cast<int>(samples.size()));
  *out->mutable_heldout() = SummarizeColumn(source_runs, choice.heldout, rules);
  absl::StatusOr<double> k90 =
      UpperBoundK(source_runs, choice.heldout, 0.9, rules);
  absl::StatusOr<double> k95 =
      UpperBoundK(source_runs, choice.heldout, 0.95, rules);
  out->set_k90(k90.ok() ? *k90 : set->k90());
  out->set_k95(k95.ok() ? *k95 : set->k95());
  out->set_usable_as_prior(big >= kMinPriorRuns && k90.ok() && k95.ok());
  (*out->mutable_predicts())["reference"] = SummarizeColumn(
      global_runs,
      PredictRuns(global_runs, catalog, out->factors(), out->constant_gb()),
      rules);
  // The global fit's entry, predicting this source's runs.
  v1::SourceFit* global = nullptr;
  for (v1::SourceFit& fit_entry : *set->mutable_page()->mutable_sources()) {
    if (fit_entry.source() == "reference") global = &fit_entry;
  }
  if (global == nullptr) {
    global = set->mutable_page()->add_sources();
    global->set_source("reference");
    *global->mutable_factors() = set->factors();
    global->set_k90(set->k90());
    global->set_k95(set->k95());
    global->set_runs(set->page().summary().at("ours_heldout").runs());
    *global->mutable_heldout() = set->page().summary().at("ours_heldout");
    global->set_usable_as_prior(true);
  }
  (*global->mutable_predicts())[SourceName(source)] = SummarizeColumn(
      source_runs, PredictRuns(source_runs, catalog, set->factors()), rules);
  return absl::OkStatus();
}

// Multi-GPU runs (and one-GPU runs under a parallel strategy) do not move
// the factors: what they hold beyond the counted bytes is their strategy's
// collective constant. Each is predicted by the prior its source answers
// with (the factors just fitted); the constant is the median residual of
// its strategy's runs (FitCollectiveConstant), and the page's multi_gpu
// columns hold the in-sample and leave-one-run-out predictions.
absl::Status AddCollectives(const std::vector<v1::MeasuredRun>& runs,
                            const ModelCatalog& catalog, const PageRules& rules,
                            v1::FactorSet* set, Predictions* in_sample,
                            Predictions* heldout) {
  in_sample->assign(runs.size(), std::nullopt);
  heldout->assign(runs.size(), std::nullopt);
  if (runs.empty()) return absl::OkStatus();
  const std::vector<Prior> priors = PriorsOf(*set);
  // strategy -> (run index, prediction without the constant)
  std::map<std::string, std::vector<std::pair<size_t, double>>> by_strategy;
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run) || !run.has_measured_peak_gb()) continue;
    absl::StatusOr<std::pair<v1::ModelSpec, v1::TrainingSetup>> model =
        MeasuredModel(run, catalog);
    if (!model.ok()) continue;
    absl::StatusOr<MemoryProfile> profile =
        BuildProfile(model->first, model->second);
    if (!profile.ok()) continue;
    const Prior prior = ChoosePrior(priors, MeasuredBy(run));
    const double predicted =
        PeakGb(profile->PeakBytesAt(run.batch(), prior.factors),
               prior.factors) +
        prior.constant_gb;
    by_strategy[StrategyName(LayoutOf(model->second).strategy)].push_back(
        {i, predicted});
  }
  for (const auto& [strategy, members] : by_strategy) {
    std::vector<double> measured, predicted;
    for (const auto& [i, p] : members) {
      measured.push_back(runs[i].measured_peak_gb());
      predicted.push_back(p);
    }
    const CollectiveFit fit = FitCollectiveConstant(measured, predicted);
    // Held out: the constant fitted on the strategy's other runs.
    const std::vector<double> loo =
        LeaveOneOutCollectiveConstants(measured, predicted);
    std::vector<double> abs_residuals;
    for (size_t m = 0; m < members.size(); ++m) {
      (*in_sample)[members[m].first] = predicted[m] + fit.constant_gb;
      abs_residuals.push_back(
          std::abs(measured[m] - predicted[m] - fit.constant_gb));
      (*heldout)[members[m].first] = predicted[m] + loo[m];
    }
    std::sort(abs_residuals.begin(), abs_residuals.end());
    v1::CollectiveConstant* out = set->add_collectives();
    out->set_strategy(strategy);
    out->set_constant_gb(fit.constant_gb);
    out->set_runs(fit.runs);
    out->set_residual_gb(abs_residuals[abs_residuals.size() / 2]);
  }
  if (!by_strategy.empty()) {
    auto& summary = *set->mutable_page()->mutable_summary();
    summary["ours_multi_gpu"] = SummarizeColumn(runs, *in_sample, rules);
    summary["ours_multi_gpu_heldout"] = SummarizeColumn(runs, *heldout, rules);
  }
  return absl::OkStatus();
}

// Which runs calibrate what: the global fit's (single-GPU runs of the
// reference, or of every source when none is usable), each other source's
// own fit, and the multi-GPU runs' collective constants. Published runs
// calibrate none of them: their figures are in other metrics (reserved,
// device) of setups measured elsewhere; they anchor answers and the
// per-kind bounds only.
struct RunPartition {
  std::vector<size_t> global;
  std::map<int, std::vector<size_t>> by_source;
  std::vector<size_t> parallel;
};

RunPartition PartitionRuns(const std::vector<v1::MeasuredRun>& all_runs) {
  RunPartition p;
  for (size_t i = 0; i < all_runs.size(); ++i) {
    if (MeasuredBy(all_runs[i]) == v1::PUBLISHED) continue;
    if (HasParallel(all_runs[i].setup())) {
      p.parallel.push_back(i);
    } else if (InGlobalFit(all_runs[i])) {
      p.global.push_back(i);
    } else {
      p.by_source[MeasuredBy(all_runs[i])].push_back(i);
    }
  }
  bool any_usable = false;
  for (size_t i : p.global) any_usable = any_usable || IsUsable(all_runs[i]);
  if (!any_usable) {
    // No reference run: the global factors come from whatever was measured.
    p.global.clear();
    for (size_t i = 0; i < all_runs.size(); ++i) {
      if (!HasParallel(all_runs[i].setup()) &&
          MeasuredBy(all_runs[i]) != v1::PUBLISHED) {
        p.global.push_back(i);
      }
    }
    p.by_source.clear();
  }
  return p;
}

// The fit's prediction for each usable run of `runs` (nullopt for the
// rest), in sample order, and with its template's held-out factors.
void PredictRuns(const std::vector<v1::MeasuredRun>& runs,
                 const std::vector<FitSample>& samples, const FitResult& fit,
                 const std::map<std::string, FitResult>& heldout_factors,
                 Predictions* ours, Predictions* ours_heldout) {
  size_t next = 0;
  for (const v1::MeasuredRun& run : runs) {
    if (!IsUsable(run)) {
      ours->push_back(std::nullopt);
      ours_heldout->push_back(std::nullopt);
      continue;
    }
    const FitSample& sample = samples[next++];
    ours->push_back(PredictGb(sample, fit.factors) + fit.constant_gb);
    const FitResult& heldout = heldout_factors.at(sample.template_name);
    ours_heldout->push_back(PredictGb(sample, heldout.factors) +
                            heldout.constant_gb);
  }
}

// The page's columns (ours, held out, and every other planner's the runs
// carry) and the upper bound on the held-out predictions, whose k the set
// adopts.
absl::Status SummarizeColumns(const std::vector<v1::MeasuredRun>& runs,
                              const Predictions& ours,
                              const Predictions& ours_heldout,
                              const PageRules& rules, v1::FactorSet* set) {
  auto& summary = *set->mutable_page()->mutable_summary();
  summary["ours"] = SummarizeColumn(runs, ours, rules);
  summary["ours_heldout"] = SummarizeColumn(runs, ours_heldout, rules);
  for (const char* column : {"reference_shipped", "reference_heldout",
                             "accelerate_fp32", "accelerate_bf16"}) {
    ASSIGN_OR_RETURN(Predictions predictions, ColumnOf(runs, column));
    bool any = false;
    for (const auto& p : predictions) any = any || p.has_value();
    if (any) summary[column] = SummarizeColumn(runs, predictions, rules);
  }
  ASSIGN_OR_RETURN(*set->mutable_page()->mutable_upper_bound(),
                   SummarizeUpperBound(runs, ours_heldout, {0.9, 0.95}, rules));
  set->mutable_page()->mutable_upper_bound()->set_prediction("ours_heldout");
  set->set_k90(set->page().upper_bound().bounds(0).k());
  set->set_k95(set->page().upper_bound().bounds(1).k());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CalibrationResult> Calibrate(
    const std::vector<v1::MeasuredRun>& all_runs, const ModelCatalog& catalog,
    const FitOptions& options, const std::string& trained_on) {
  const RunPartition p = PartitionRuns(all_runs);
  const std::vector<size_t>& global_index = p.global;
  const std::vector<size_t>& parallel_index = p.parallel;
  const std::vector<v1::MeasuredRun> runs = Subset(all_runs, global_index);

  std::vector<std::string> left_out;
  ASSIGN_OR_RETURN(std::vector<FitSample> samples,
                   SamplesFor(runs, catalog, &left_out));
  if (samples.empty()) {
    return absl::InvalidArgumentError(
        "no usable run to fit: every run is excluded or the file is empty");
  }
  const FitResult fit = FitFactors(samples, options);
  const std::map<std::string, FitResult> heldout_factors =
      HeldOutFactors(samples, options);

  Predictions ours, ours_heldout;
  PredictRuns(runs, samples, fit, heldout_factors, &ours, &ours_heldout);

  CalibrationResult result;
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
  RETURN_IF_ERROR(SummarizeColumns(runs, ours, ours_heldout, rules, &set));
  RETURN_IF_ERROR(
      AddRegimes(runs, samples, ours_heldout, options, rules, &set));
  ASSIGN_OR_RETURN(
      Predictions anchored,
      AnchoredColumn(runs, catalog, heldout_factors, options, rules, &set));
  for (const auto& [source, index] : p.by_source) {
    RETURN_IF_ERROR(AddSourceFit(runs, Subset(all_runs, index),
                                 static_cast<v1::MeasurementSource>(source),
                                 catalog, options, rules, &set));
  }

  Predictions multi, multi_heldout;
  RETURN_IF_ERROR(AddCollectives(Subset(all_runs, parallel_index), catalog,
                                 rules, &set, &multi, &multi_heldout));

  // What the device holds beyond the allocator, then the bound per kind
  // of setup (its predictions need the device costs).
  for (v1::DeviceCostFit& fit : FitDeviceCosts(all_runs)) {
    *set.add_device_costs() = std::move(fit);
  }
  ASSIGN_OR_RETURN(std::vector<v1::SetupKindBound> kinds,
                   CalibrateKindBounds(set, all_runs, catalog));
  for (v1::SetupKindBound& kind : kinds)
    *set.add_kind_bounds() = std::move(kind);

  result.ours = Expand(ours, global_index, all_runs.size());
  result.ours_heldout = Expand(ours_heldout, global_index, all_runs.size());
  for (size_t j = 0; j < parallel_index.size(); ++j) {
    result.ours[parallel_index[j]] = multi[j];
    result.ours_heldout[parallel_index[j]] = multi_heldout[j];
  }
  result.ours_anchored = Expand(anchored, global_index, all_runs.size());
  result.samples = std::move(samples);
  return result;
}

}  // namespace headroom
