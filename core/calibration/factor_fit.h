#ifndef HEADROOM_CORE_CALIBRATION_FACTOR_FIT_H_
#define HEADROOM_CORE_CALIBRATION_FACTOR_FIT_H_

// Fitting the six non-negative factors to measured runs (README.md, "Refits and
// factor sets").

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/memory/memory_profile.h"

namespace headroom {

// One run as the fit sees it: its component sizes in GB (before factors) at
// the step's two moments, and what was measured.
struct FitSample {
  std::string template_name;
  // At backward start and at the optimizer update (MemoryProfile).
  ComponentArray component_gb{};
  ComponentArray update_gb{};
  // False when the run must not move the factors (calibrate.h says when);
  // it is still predicted.
  bool fit = true;
  // Allocator peak in GB; nullopt for an OOM run.
  std::optional<double> measured_gb;
  // Card size the run went OOM on; nullopt when it completed.
  std::optional<double> oom_gb;
};

struct FitOptions {
  double headroom = 1.15;
  double oom_penalty = 4.0;
  // Completed runs below this peak do not move the factors: the calibration
  // page measures error from the same size up, and below it the framework's
  // own buffers outweigh the model.
  double min_fit_gb = 1.0;
  // Weight of the prior that each factor is 1, i.e. that the counted bytes
  // are what the framework allocates: the loss gains
  // prior_weight * sum_c (f_c - 1)^2. At 1 a factor's deviation from 1
  // weighs as much as one run's relative error, so the data decides once a
  // handful of runs exercise a component, and a component that few or no
  // runs exercise keeps its counted size instead of whatever a collinear
  // neighbour leaves it (outputs and internal move together in most
  // models). 0 turns the prior off.
  double prior_weight = 1.0;
  // Per component, a multiplier of prior_weight (all 1: one weight for
  // every factor). Anchoring holds the exactly counted bytes closer to 1
  // than the activations.
  ComponentArray prior_scale = {1, 1, 1, 1, 1, 1};
  // GB added to every peak before the factors (the framework's own
  // allocations, e.g. cuBLAS workspaces from the caching allocator): the
  // factors fit what is left of each measured peak. 0 for the reference
  // fit, which reproduces its page; a source's is chosen by held-out error
  // (calibrate.cc).
  double constant_gb = 0;
  // Huber's loss on each completed run's relative error beyond this (0:
  // plain squares): a few runs the spec cannot describe pull the factors
  // less. Off for the reference fit, which reproduces its page.
  double huber_delta = 0;
};

// Predicted peak in GB of `sample` under `factors`: the larger moment.
double PredictGb(const FitSample& sample, const ComponentArray& factors);

struct FitResult {
  ComponentArray factors{};
  // FitOptions.constant_gb: GB added to every prediction.
  double constant_gb = 0;
  // Final loss: relative squared error plus the weighted OOM penalty and
  // the prior.
  double loss = 0;
  int iterations = 0;
};

// Minimizes, over the samples with `fit` set, the sum over measured runs of
// ((p - m)/m)^2 plus, for each OOM run on O GB with p * headroom < O,
// oom_penalty * ((O - headroom p)/O)^2, plus the prior
// prior_weight * sum_c (f_c - 1)^2, over f >= 0, where p = PredictGb (the
// larger of the two moments' f.x). Deterministic; a component no sample
// exercises gets 1 under the prior (0 without it).
FitResult FitFactors(const std::vector<FitSample>& samples,
                     const FitOptions& options);

// The loss above at `factors`.
double FitLoss(const std::vector<FitSample>& samples,
               const ComponentArray& factors, const FitOptions& options);

// Per template, the fit (factors and constant) on every other template's
// samples (those with `fit` set).
std::map<std::string, FitResult> HeldOutFactors(
    const std::vector<FitSample>& samples, const FitOptions& options);

// Held out by template: for each template, fits on every other template's
// samples (those with `fit` set) and predicts this one's. Returns one
// prediction (GB) per sample.
std::vector<double> HeldOutPredictions(const std::vector<FitSample>& samples,
                                       const FitOptions& options);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_FACTOR_FIT_H_
