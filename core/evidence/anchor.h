#ifndef HEADROOM_CORE_EVIDENCE_ANCHOR_H_
#define HEADROOM_CORE_EVIDENCE_ANCHOR_H_

// Answers anchored on a model's own measured runs (README.md, "Answers anchored
// on measurements"): the component model under the global (prior) factors gives
// the shape over batch at both moments; two scales fitted on the model's runs,
// shrunk toward 1 (the prior), fix its level and slope; a constant per GPU,
// fitted across all models, covers what differs between cards. The bound of
// such answers comes from leave-one-run-out within models, per how far the
// asked batch lies beyond the measured ones.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/calibration/calibration_page.h"
#include "core/memory/memory_profile.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// A model's peak under the prior factors, in GB, split as anchoring scales
// it: at backward start fixed_gb + batch x per_sample_gb, at the optimizer
// update update_gb.
struct ModelShape {
  double fixed_gb = 0;
  double per_sample_gb = 0;
  double update_gb = 0;
};

// `constant_gb` (the prior's own allocations) joins the fixed bytes of both
// moments.
ModelShape ShapeOf(const MemoryProfile& profile, const ComponentArray& factors,
                   double constant_gb = 0);

// The per-model correction: fixed_scale on the batch-independent bytes
// (both moments), batch_scale on the batch-dependent ones. 1 and 1 is the
// prior's answer.
struct Correction {
  double fixed_scale = 1;
  double batch_scale = 1;
};

// max(fixed_scale x fixed + batch_scale x batch x per_sample,
//     fixed_scale x update) + gpu_constant_gb.
double AnchoredPeakGb(const ModelShape& shape, const Correction& correction,
                      uint64_t batch, double gpu_constant_gb);

// GB added on each catalog GPU; a GPU not in the map adds 0.
using GpuConstants = std::map<std::string, double>;

struct AnchorOptions {
  double headroom = 1.15;
  // Weight of an OOM run's hinge, as in the global fit (FitOptions).
  double oom_penalty = 4.0;
  // Candidate strengths of the shrinkage of both scales toward 1, in units
  // of one run's squared relative error; the one with the lowest
  // leave-one-run-out median error is used.
  std::vector<double> prior_weights = {1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  // Candidate multipliers of that weight on the fixed scale: the weights,
  // gradients and optimizer state are counted exactly, the activations are
  // not, so the fixed bytes may deserve a stronger hold.
  std::vector<double> fixed_hold = {1, 30, 1000};
  // A GPU constant is the sum of its residuals over (runs + this): few
  // same-batch comparisons leave it near 0.
  double gpu_shrink_runs = 3;
  // Upper ends of the extrapolation buckets (asked batch / largest measured
  // batch); a last, open bucket follows.
  std::vector<double> bucket_edges = {1.0, 2.0, 4.0};
  // A bucket with fewer leave-one-out ratios than this takes k from its
  // ratios pooled with every further bucket's, or with too few of those the
  // prior's k; no bucket's k is below a nearer one's.
  int min_bucket_runs = 8;
  // Ratios of runs below this measured peak do not enter k (PageRules).
  double min_gb = 1.0;
  // The factor set's device costs: a published run reporting reserved or
  // device memory anchors on the allocator peak they correspond to
  // (DeviceCosts::AllocatedFrom on its card). Unset: such runs are left
  // out of the evidence.
  const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>* device_costs =
      nullptr;
  // A model with more runs has this many of them, spread over its batches,
  // left out one at a time (the rest are not predicted held out).
  size_t max_left_out_per_model = 8;
  // With more groups than this, the shrinkage and the buckets' k are
  // calibrated on this many of them (chosen by a hash of their key ids).
  // Keeps a refit of a million runs over 20,000 keys linear in the runs
  // (bench/million_runs.cc).
  size_t max_calibration_groups = 2000;
  // With more groups than this, a left-out run is predicted with the GPU
  // constants fitted on every group, not without its own group: one
  // group's cells move a constant by about its share of that card's cells,
  // under 1/200 here, and refitting the constants once per group costs
  // groups x cells (400 groups of 50 runs: 40 s).
  size_t max_groups_refitting_constants = 200;
};

// One model-and-setup key's usable runs (indices into a runs vector) and
// its shape under the prior factors.
struct AnchorGroup {
  std::string key_id;
  // A template or spec name, for pages.
  std::string name;
  ModelShape shape;
  std::vector<size_t> runs;
};

// The shrinkage of the two scales toward 1: prior_weight on the batch
// scale, prior_weight x fixed_hold on the fixed one.
struct Shrinkage {
  double prior_weight = 1e-3;
  double fixed_hold = 1;
};

// Fits the correction of one model on `run_indices` of `runs` (completed
// runs by relative error, OOM runs by the hinge), with GPU constants
// subtracted from what each card measured.
Correction FitCorrection(const ModelShape& shape,
                         const std::vector<v1::MeasuredRun>& runs,
                         const std::vector<size_t>& run_indices,
                         const GpuConstants& constants,
                         const Shrinkage& shrinkage,
                         const AnchorOptions& options);
// The same on the runs themselves.
Correction FitCorrection(const ModelShape& shape,
                         const std::vector<const v1::MeasuredRun*>& runs,
                         const GpuConstants& constants,
                         const Shrinkage& shrinkage,
                         const AnchorOptions& options);

// The largest batch of `run_indices` that completed (or of any run when
// none did): what an asked batch's extrapolation is measured against.
uint64_t LargestMeasuredBatch(const std::vector<v1::MeasuredRun>& runs,
                              const std::vector<size_t>& run_indices);
uint64_t LargestMeasuredBatch(const std::vector<const v1::MeasuredRun*>& runs);

// Whether `added` (one of `runs`, a model's runs) makes a cell the GPU
// constants are fitted on: it completed at a batch another of the model's
// runs completed at on another card. Only then can storing it move them.
bool AddsGpuCell(const std::vector<const v1::MeasuredRun*>& runs,
                 const v1::MeasuredRun& added);

// GPU constants fitted across every model measured at the same batch on
// two or more GPUs (only the card differs there), shrunk toward 0.
GpuConstants FitGpuConstants(const std::vector<v1::MeasuredRun>& runs,
                             const std::vector<AnchorGroup>& groups,
                             const AnchorOptions& options);

// The calibration of anchored answers over `groups`.
struct AnchorCalibration {
  Shrinkage shrinkage;
  // "weight x hold" -> leave-one-run-out median abs error.
  std::map<std::string, double> candidates;
  GpuConstants gpu_constant_gb;
  // The chosen weight's leave-one-run-out prediction per run (nullopt for a
  // run not in a group of at least 2 runs, or not among the runs a large
  // group leaves out), with GPU constants fitted without the run's group.
  Predictions loo;
  // Per bucket (bucket_edges, then the open one).
  std::vector<v1::ExtrapolationBucket> buckets;
  int runs = 0;
  int models = 0;
  // Groups the shrinkage and k were calibrated on when sampled
  // (AnchorOptions::max_calibration_groups); 0: all of them.
  size_t sampled_groups = 0;
};

// Chooses the shrinkage, fits the GPU constants and calibrates k per
// extrapolation bucket at 0.9 and 0.95 from leave-one-run-out residuals;
// `prior_k90`/`prior_k95` (the prior's held-out k) stand in for a bucket
// without enough runs.
AnchorCalibration CalibrateAnchors(const std::vector<v1::MeasuredRun>& runs,
                                   const std::vector<AnchorGroup>& groups,
                                   double prior_k90, double prior_k95,
                                   const AnchorOptions& options);

// The bucket for `extrapolation` and its k at `coverage` (0.9 or 0.95).
const v1::ExtrapolationBucket& BucketFor(
    const std::vector<v1::ExtrapolationBucket>& buckets, double extrapolation);
double BucketK(const v1::ExtrapolationBucket& bucket, double coverage);

// The calibration as the page shows it.
v1::AnchoredBound AnchoredBoundOf(const AnchorCalibration& calibration,
                                  const v1::ColumnSummary& loo,
                                  const AnchorOptions& options);

}  // namespace headroom

#endif  // HEADROOM_CORE_EVIDENCE_ANCHOR_H_
