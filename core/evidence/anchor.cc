#include "core/evidence/anchor.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/calibration/factor_fit.h"

namespace headroom {
namespace {

// Rounds of alternation between the cells' levels and the GPU constants.
constexpr int kConstantRounds = 50;

double ConstantOn(const GpuConstants& constants, const std::string& gpu) {
  auto it = constants.find(gpu);
  return it == constants.end() ? 0.0 : it->second;
}

bool Completed(const v1::MeasuredRun& run) {
  return run.has_measured_peak_gb() && run.measured_peak_gb() > 0;
}

// The positions in `group` whose runs are left out one at a time: all of
// them, or for a model with more than `cap` runs, `cap` of them spread
// evenly over its batches (the smallest and the largest included), so the
// cost stays linear in the runs.
std::vector<size_t> LeftOut(const std::vector<v1::MeasuredRun>& runs,
                            const AnchorGroup& group, size_t cap) {
  std::vector<size_t> positions(group.runs.size());
  for (size_t i = 0; i < positions.size(); ++i) positions[i] = i;
  if (positions.size() <= cap || cap < 2) return positions;
  std::stable_sort(positions.begin(), positions.end(), [&](size_t a, size_t b) {
    return runs[group.runs[a]].batch() < runs[group.runs[b]].batch();
  });
  std::vector<size_t> chosen;
  const double step =
      static_cast<double>(positions.size() - 1) / static_cast<double>(cap - 1);
  for (size_t k = 0; k < cap; ++k) {
    const size_t at = positions[static_cast<size_t>(
        std::lround(step * static_cast<double>(k)))];
    if (chosen.empty() || chosen.back() != at) chosen.push_back(at);
  }
  return chosen;
}

// Writes the leave-one-run-out predictions of `group` (its LeftOut
// positions) into `loo`, which holds one entry per run.
void LeaveGroupRunsOut(const std::vector<v1::MeasuredRun>& runs,
                       const AnchorGroup& group, const GpuConstants& constants,
                       const Shrinkage& shrinkage, const AnchorOptions& options,
                       Predictions* loo) {
  if (group.runs.size() < 2) return;
  for (size_t i : LeftOut(runs, group, options.max_left_out_per_model)) {
    std::vector<size_t> others;
    for (size_t j = 0; j < group.runs.size(); ++j) {
      if (j != i) others.push_back(group.runs[j]);
    }
    const Correction correction =
        FitCorrection(group.shape, runs, others, constants, shrinkage, options);
    const v1::MeasuredRun& run = runs[group.runs[i]];
    (*loo)[group.runs[i]] = AnchoredPeakGb(group.shape, correction, run.batch(),
                                           ConstantOn(constants, run.gpu()));
  }
}

// Leave-one-run-out predictions over every group of at least 2 runs (the
// LeftOut positions of a large one).
Predictions LeaveOneRunOut(const std::vector<v1::MeasuredRun>& runs,
                           const std::vector<AnchorGroup>& groups,
                           const GpuConstants& constants,
                           const Shrinkage& shrinkage,
                           const AnchorOptions& options) {
  Predictions loo(runs.size());
  for (const AnchorGroup& group : groups) {
    LeaveGroupRunsOut(runs, group, constants, shrinkage, options, &loo);
  }
  return loo;
}

// Asked batch / largest other measured batch of the left-out run.
double LooExtrapolation(const std::vector<v1::MeasuredRun>& runs,
                        const AnchorGroup& group, size_t left_out) {
  std::vector<size_t> others;
  for (size_t j = 0; j < group.runs.size(); ++j) {
    if (j != left_out) others.push_back(group.runs[j]);
  }
  const uint64_t largest = LargestMeasuredBatch(runs, others);
  return largest == 0
             ? 1.0
             : static_cast<double>(runs[group.runs[left_out]].batch()) /
                   static_cast<double>(largest);
}

}  // namespace

ModelShape ShapeOf(const MemoryProfile& profile, const ComponentArray& factors,
                   double constant_gb) {
  ModelShape shape;
  shape.fixed_gb = constant_gb;
  shape.update_gb = constant_gb;
  for (int c = 0; c < kNumComponents; ++c) {
    shape.fixed_gb += factors[c] * profile.fixed_bytes[c] / 1e9;
    shape.per_sample_gb += factors[c] * profile.per_sample_bytes[c] / 1e9;
    shape.update_gb += factors[c] * profile.update_bytes[c] / 1e9;
  }
  return shape;
}

double AnchoredPeakGb(const ModelShape& shape, const Correction& correction,
                      uint64_t batch, double gpu_constant_gb) {
  const double backward =
      correction.fixed_scale * shape.fixed_gb +
      correction.batch_scale * shape.per_sample_gb * static_cast<double>(batch);
  const double update = correction.fixed_scale * shape.update_gb;
  return std::max(backward, update) + gpu_constant_gb;
}

Correction FitCorrection(const ModelShape& shape,
                         const std::vector<v1::MeasuredRun>& runs,
                         const std::vector<size_t>& run_indices,
                         const GpuConstants& constants,
                         const Shrinkage& shrinkage,
                         const AnchorOptions& options) {
  std::vector<const v1::MeasuredRun*> of;
  of.reserve(run_indices.size());
  for (size_t index : run_indices) of.push_back(&runs[index]);
  return FitCorrection(shape, of, constants, shrinkage, options);
}

Correction FitCorrection(const ModelShape& shape,
                         const std::vector<const v1::MeasuredRun*>& runs,
                         const GpuConstants& constants,
                         const Shrinkage& shrinkage,
                         const AnchorOptions& options) {
  // The two scales are the first two "factors" of the global fit's loss:
  // the same relative error, OOM hinge and prior toward 1.
  std::vector<FitSample> samples;
  samples.reserve(runs.size());
  for (const v1::MeasuredRun* run_ptr : runs) {
    const v1::MeasuredRun& run = *run_ptr;
    const double constant = ConstantOn(constants, run.gpu());
    FitSample sample;
    sample.component_gb[0] = shape.fixed_gb;
    sample.component_gb[1] =
        shape.per_sample_gb * static_cast<double>(run.batch());
    sample.update_gb[0] = shape.update_gb;
    if (Completed(run)) {
      if (run.measured_peak_gb() - constant <= 0) continue;
      sample.measured_gb = run.measured_peak_gb() - constant;
    } else if (run.has_oom_on_gb()) {
      if (run.oom_on_gb() - constant <= 0) continue;
      sample.oom_gb = run.oom_on_gb() - constant;
    } else {
      continue;
    }
    samples.push_back(sample);
  }
  FitOptions fit;
  fit.headroom = options.headroom;
  fit.oom_penalty = options.oom_penalty;
  fit.min_fit_gb = 0;
  fit.prior_weight = shrinkage.prior_weight;
  fit.prior_scale[0] = shrinkage.fixed_hold;
  const FitResult result = FitFactors(samples, fit);
  Correction correction;
  // A scale with nothing to scale stays at the prior's 1.
  correction.fixed_scale =
      shape.fixed_gb > 0 || shape.update_gb > 0 ? result.factors[0] : 1.0;
  correction.batch_scale = shape.per_sample_gb > 0 ? result.factors[1] : 1.0;
  return correction;
}

uint64_t LargestMeasuredBatch(const std::vector<v1::MeasuredRun>& runs,
                              const std::vector<size_t>& run_indices) {
  std::vector<const v1::MeasuredRun*> of;
  of.reserve(run_indices.size());
  for (size_t index : run_indices) of.push_back(&runs[index]);
  return LargestMeasuredBatch(of);
}

uint64_t LargestMeasuredBatch(const std::vector<const v1::MeasuredRun*>& runs) {
  uint64_t completed = 0, any = 0;
  for (const v1::MeasuredRun* run : runs) {
    any = std::max<uint64_t>(any, run->batch());
    if (Completed(*run))
      completed = std::max<uint64_t>(completed, run->batch());
  }
  return completed != 0 ? completed : any;
}

bool AddsGpuCell(const std::vector<const v1::MeasuredRun*>& runs,
                 const v1::MeasuredRun& added) {
  if (!Completed(added)) return false;
  for (const v1::MeasuredRun* run : runs) {
    if (run != &added && Completed(*run) && run->batch() == added.batch() &&
        run->gpu() != added.gpu()) {
      return true;
    }
  }
  return false;
}

GpuConstants FitGpuConstants(const std::vector<v1::MeasuredRun>& runs,
                             const std::vector<AnchorGroup>& groups,
                             const AnchorOptions& options) {
  // Cells: one model at one batch measured on at least two GPUs. Within a
  // cell only the card differs, so m = level(cell) + constant(gpu); least
  // squares over the cells with the constants shrunk toward 0 (which also
  // fixes their common offset), by alternating the two. GPUs are numbered
  // once, so the rounds compare no names.
  struct Cell {
    std::vector<std::pair<size_t, double>> peaks;  // gpu number, GB
    double level = 0;
  };
  std::map<std::string, size_t> numbers;
  std::vector<Cell> cells;
  for (const AnchorGroup& group : groups) {
    std::map<uint64_t, std::vector<const v1::MeasuredRun*>> by_batch;
    for (size_t index : group.runs) {
      const v1::MeasuredRun& run = runs[index];
      if (Completed(run)) by_batch[run.batch()].push_back(&run);
    }
    for (const auto& [batch, batch_runs] : by_batch) {
      std::set<std::string> gpus;
      for (const v1::MeasuredRun* run : batch_runs) gpus.insert(run->gpu());
      if (gpus.size() < 2) continue;
      Cell cell;
      for (const v1::MeasuredRun* run : batch_runs) {
        const size_t number =
            numbers.emplace(run->gpu(), numbers.size()).first->second;
        cell.peaks.emplace_back(number, run->measured_peak_gb());
      }
      cells.push_back(std::move(cell));
    }
  }
  std::vector<double> constant(numbers.size(), 0.0);
  std::vector<std::pair<double, int>> residuals(numbers.size());
  for (int round = 0; round < kConstantRounds && !cells.empty(); ++round) {
    for (Cell& cell : cells) {
      double sum = 0;
      for (const auto& [gpu, gb] : cell.peaks) sum += gb - constant[gpu];
      cell.level = sum / static_cast<double>(cell.peaks.size());
    }
    std::fill(residuals.begin(), residuals.end(), std::make_pair(0.0, 0));
    for (const Cell& cell : cells) {
      for (const auto& [gpu, gb] : cell.peaks) {
        residuals[gpu].first += gb - cell.level;
        ++residuals[gpu].second;
      }
    }
    for (size_t gpu = 0; gpu < constant.size(); ++gpu) {
      constant[gpu] = residuals[gpu].first /
                      (residuals[gpu].second + options.gpu_shrink_runs);
    }
  }
  GpuConstants constants;
  for (const auto& [gpu, number] : numbers) {
    if (residuals[number].second > 0) constants[gpu] = constant[number];
  }
  return constants;
}

namespace {

// The shrinkage: fewest OOM runs the leave-one-run-out predictions call a
// fit (the page's saidFitsButOom), then the lowest median error (the first
// tried on a tie), with constants fitted on every group. Sets the
// calibration's shrinkage and candidates.
void ChooseShrinkage(const std::vector<v1::MeasuredRun>& runs,
                     const std::vector<AnchorGroup>& groups,
                     const GpuConstants& all_constants,
                     const AnchorOptions& options,
                     AnchorCalibration* calibration) {
  PageRules rules;
  rules.headroom = options.headroom;
  rules.min_gb = options.min_gb;
  std::pair<int, double> best = {-1, 0};
  for (double weight : options.prior_weights) {
    for (double hold : options.fixed_hold) {
      const Shrinkage shrinkage{weight, hold};
      const v1::ColumnSummary page = SummarizeColumn(
          runs, LeaveOneRunOut(runs, groups, all_constants, shrinkage, options),
          rules);
      calibration->candidates[absl::StrCat(weight, " x ", hold)] =
          page.median_abs_err();
      const std::pair<int, double> score = {page.said_fits_but_oom(),
                                            page.median_abs_err()};
      if (best.first < 0 || score < best) {
        best = score;
        calibration->shrinkage = shrinkage;
      }
    }
  }
}

// Honest leave-one-out: the left-out run's group does not move the GPU
// constants it is predicted with. Sets the calibration's loo, models and
// runs; returns measured / predicted per extrapolation bucket.
std::vector<std::vector<double>> LooRatiosByBucket(
    const std::vector<v1::MeasuredRun>& runs,
    const std::vector<AnchorGroup>& groups, const Shrinkage& shrinkage,
    const GpuConstants* shared_constants, const AnchorOptions& options,
    AnchorCalibration* calibration) {
  calibration->loo.assign(runs.size(), std::nullopt);
  std::vector<std::vector<double>> ratios(options.bucket_edges.size() + 1);
  for (size_t g = 0; g < groups.size(); ++g) {
    const AnchorGroup& group = groups[g];
    if (group.runs.size() < 2) continue;
    ++calibration->models;
    GpuConstants constants;
    if (shared_constants != nullptr) {
      constants = *shared_constants;
    } else {
      std::vector<AnchorGroup> others;
      others.reserve(groups.size());
      for (size_t o = 0; o < groups.size(); ++o) {
        if (o != g) others.push_back(groups[o]);
      }
      constants = FitGpuConstants(runs, others, options);
    }
    LeaveGroupRunsOut(runs, group, constants, shrinkage, options,
                      &calibration->loo);
    for (size_t i = 0; i < group.runs.size(); ++i) {
      const size_t index = group.runs[i];
      const std::optional<double>& loo = calibration->loo[index];
      if (!loo.has_value()) continue;  // not among LeftOut
      ++calibration->runs;
      const v1::MeasuredRun& run = runs[index];
      if (!Completed(run) || run.measured_peak_gb() < options.min_gb ||
          *loo <= 0) {
        continue;
      }
      const double extrapolation = LooExtrapolation(runs, group, i);
      size_t bucket = 0;
      while (bucket < options.bucket_edges.size() &&
             extrapolation > options.bucket_edges[bucket] + 1e-9) {
        ++bucket;
      }
      ratios[bucket].push_back(run.measured_peak_gb() / *loo);
    }
  }
  return ratios;
}

// At most options.max_calibration_groups of `groups`, chosen by a hash of
// their key ids (the same groups whatever order they come in): all of them
// when there are no more.
std::vector<AnchorGroup> CalibrationSample(
    const std::vector<AnchorGroup>& groups, const AnchorOptions& options) {
  if (groups.size() <= options.max_calibration_groups) return groups;
  std::vector<std::pair<uint64_t, size_t>> order;
  order.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    uint64_t hash = 1469598103934665603ULL;  // FNV-1a
    for (char c : groups[g].key_id) {
      hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    }
    order.emplace_back(hash, g);
  }
  std::sort(order.begin(), order.end());
  std::vector<AnchorGroup> sample;
  sample.reserve(options.max_calibration_groups);
  for (size_t i = 0; i < options.max_calibration_groups; ++i) {
    sample.push_back(groups[order[i].second]);
  }
  return sample;
}

// k per bucket by the page's rule; a bucket with too few ratios takes the
// larger of the nearer bucket's k and the prior's, and no bucket's k is
// below a nearer one's.
std::vector<v1::ExtrapolationBucket> BucketsOf(
    const std::vector<std::vector<double>>& ratios, double prior_k90,
    double prior_k95, const AnchorOptions& options) {
  std::vector<v1::ExtrapolationBucket> buckets;
  const auto k_of = [](std::vector<double> values, double coverage) {
    std::sort(values.begin(), values.end());
    const size_t index = static_cast<size_t>(
        std::ceil(coverage * static_cast<double>(values.size() - 1) - 1e-9));
    const double k = values[std::min(index, values.size() - 1)];
    return std::ceil(k * 100.0 - 1e-9) / 100.0;
  };
  double previous90 = 0, previous95 = 0;
  const size_t min_runs = static_cast<size_t>(options.min_bucket_runs);
  for (size_t b = 0; b < ratios.size(); ++b) {
    v1::ExtrapolationBucket bucket;
    bucket.set_max_ratio(
        b < options.bucket_edges.size() ? options.bucket_edges[b] : 0.0);
    bucket.set_runs(static_cast<int>(ratios[b].size()));
    std::vector<double> pooled = ratios[b];
    for (size_t further = b + 1;
         pooled.size() < min_runs && further < ratios.size(); ++further) {
      pooled.insert(pooled.end(), ratios[further].begin(),
                    ratios[further].end());
    }
    double k90 = prior_k90, k95 = prior_k95;
    if (pooled.size() >= min_runs) {
      bucket.set_own(ratios[b].size() >= min_runs);
      bucket.set_pooled_runs(static_cast<int>(pooled.size()));
      k90 = k_of(pooled, 0.9);
      k95 = k_of(pooled, 0.95);
    }
    k90 = std::max(k90, previous90);
    k95 = std::max(k95, previous95);
    bucket.set_k90(k90);
    bucket.set_k95(k95);
    previous90 = k90;
    previous95 = k95;
    buckets.push_back(bucket);
  }
  return buckets;
}

}  // namespace

AnchorCalibration CalibrateAnchors(const std::vector<v1::MeasuredRun>& runs,
                                   const std::vector<AnchorGroup>& groups,
                                   double prior_k90, double prior_k95,
                                   const AnchorOptions& options) {
  AnchorCalibration calibration;
  const GpuConstants all_constants = FitGpuConstants(runs, groups, options);
  const bool sampled = groups.size() > options.max_calibration_groups;
  const std::vector<AnchorGroup> sample = CalibrationSample(groups, options);
  ChooseShrinkage(runs, sample, all_constants, options, &calibration);
  calibration.gpu_constant_gb = all_constants;
  calibration.sampled_groups = sampled ? sample.size() : 0;
  const bool shared = groups.size() > options.max_groups_refitting_constants;
  const std::vector<std::vector<double>> ratios = LooRatiosByBucket(
      runs, sample, calibration.shrinkage, shared ? &all_constants : nullptr,
      options, &calibration);
  calibration.buckets = BucketsOf(ratios, prior_k90, prior_k95, options);
  return calibration;
}

const v1::ExtrapolationBucket& BucketFor(
    const std::vector<v1::ExtrapolationBucket>& buckets, double extrapolation) {
  for (const v1::ExtrapolationBucket& bucket : buckets) {
    if (bucket.max_ratio() == 0 || extrapolation <= bucket.max_ratio() + 1e-9) {
      return bucket;
    }
  }
  return buckets.back();
}

double BucketK(const v1::ExtrapolationBucket& bucket, double coverage) {
  return coverage <= 0.9 + 1e-9 ? bucket.k90() : bucket.k95();
}

v1::AnchoredBound AnchoredBoundOf(const AnchorCalibration& calibration,
                                  const v1::ColumnSummary& loo,
                                  const AnchorOptions& options) {
  v1::AnchoredBound bound;
  bound.set_runs(calibration.runs);
  bound.set_models(calibration.models);
  bound.set_prior_weight(calibration.shrinkage.prior_weight);
  bound.set_fixed_hold(calibration.shrinkage.fixed_hold);
  for (const auto& [candidate, error] : calibration.candidates) {
    (*bound.mutable_candidates())[candidate] = error;
  }
  for (const v1::ExtrapolationBucket& bucket : calibration.buckets) {
    *bound.add_buckets() = bucket;
  }
  for (const auto& [gpu, gb] : calibration.gpu_constant_gb) {
    (*bound.mutable_gpu_constant_gb())[gpu] = gb;
  }
  *bound.mutable_loo() = loo;
  bound.set_min_gb(options.min_gb);
  return bound;
}

}  // namespace headroom
