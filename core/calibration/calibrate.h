#ifndef HEADROOM_CORE_CALIBRATION_CALIBRATE_H_
#define HEADROOM_CORE_CALIBRATION_CALIBRATE_H_

// From measured runs and the model catalog to a fitted factor set with its
// calibration page: what the planner does on first start and on refit.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/calibration/calibration_page.h"
#include "core/calibration/factor_fit.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// The training setup the calibration runs were measured with: fp32 weights
// and activations, AdamW, no checkpointing, unfused attention.
v1::TrainingSetup CalibrationSetup();

// The name a run's samples are grouped under (held out by, anchored by): its
// template, else its model key.
std::string ModelName(const v1::MeasuredRun& run);

// The spec and setup a run measured: its own when it carries a spec, else
// its catalog template's with its setup or the calibration setup. NOT_FOUND
// names a template the catalog lacks.
absl::StatusOr<std::pair<v1::ModelSpec, v1::TrainingSetup>> MeasuredModel(
    const v1::MeasuredRun& run, const ModelCatalog& catalog);

// Turns usable runs into fit samples (component GB at each run's batch, at
// both moments). A template's samples do not move the factors (`fit` false)
// when its spec is not the measured model: the spec's parameter count is
// more than 0.05% from the run's `params`, or at some measured run the
// spec's fp32 weights plus batch x its largest single tensor exceed the
// measured peak. Each such template is appended to `left_out` (when given)
// as "template: why". NOT_FOUND names a run whose template the catalog
// lacks.
absl::StatusOr<std::vector<FitSample>> SamplesFor(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    std::vector<std::string>* left_out = nullptr);

// Predicts every run with `factors` plus `constant_gb` (nullopt for
// unusable runs and runs whose template the catalog lacks).
Predictions PredictRuns(const std::vector<v1::MeasuredRun>& runs,
                        const ModelCatalog& catalog, const v1::Factors& factors,
                        double constant_gb = 0);

struct CalibrationResult {
  v1::FactorSet factor_set;  // version left empty for the store to assign
  // In-sample and held-out predictions per run (nullopt for unusable runs).
  // Runs outside the global fit (another measurement source) get nullopt.
  Predictions ours;
  Predictions ours_heldout;
  // Leave one run out within the template, with the factors held out too.
  Predictions ours_anchored;
  // The global fit's usable runs' fit samples, in run order (SamplesFor).
  std::vector<FitSample> samples;
};

// Fits the global factors to the reference runs of `runs` (with any
// simulated ones passed; to every run when none is a reference run),
// computes the page (columns ours, ours_heldout, ours_anchored and the
// reference/accelerate columns the runs carry), k at 0.9 and 0.95 from the
// held-out predictions, the anchored bound, and a SourceFit per other
// measurement source (torch harness ...).
absl::StatusOr<CalibrationResult> Calibrate(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    const FitOptions& options, const std::string& trained_on);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_CALIBRATE_H_
