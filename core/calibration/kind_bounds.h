#ifndef HEADROOM_CORE_CALIBRATION_KIND_BOUNDS_H_
#define HEADROOM_CORE_CALIBRATION_KIND_BOUNDS_H_

// The upper bound per kind of setup (issue 30 item 5). One k calibrated on
// single-GPU full fine-tuning runs says nothing of an FSDP LoRA job; so k
// comes from held-out ratios measured / predicted per kind of setup and per
// metric, every prediction made without its own publication's rows (leave
// one publication out, never one row). A kind with too few held-out
// measurements takes the widest k of all kinds and says so; a kind nothing
// measured is "untested", and an answer on it is never FITS.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// "1gpu" or "multi/<strategy>", then "/full", "/lora" or "/qlora", then
// "+offload" when anything is offloaded: "1gpu/qlora",
// "multi/fsdp-full/lora+offload".
std::string SetupKind(const v1::TrainingSetup& setup);

// The kind of a setup run by a named framework profile: "1gpu/lora@litgpt"
// (framework_profile.h names); the kind itself for generic.
std::string FrameworkKind(const std::string& kind,
                          v1::TrainingSetup::Framework framework);

// One published measurement predicted without its publication.
struct KindObservation {
  std::string kind;
  std::string publication;
  v1::MemoryMetric metric = v1::ALLOCATED;
  // The answer's figure in the row's metric (UNSTATED: the device figure)
  // and its device figure.
  double predicted_gb = 0;
  double device_gb = 0;
  // Unset for an OOM row; then card_gb is the card it ran out on.
  std::optional<double> measured_gb;
  double card_gb = 0;
};

struct KindBoundOptions {
  // 1: k is the largest held-out ratio of the kind (a bound that lets no
  // measured row through), not a quantile.
  double coverage = 1.0;
  // Fewer held-out measurements than this (of a metric, then of the kind
  // pooled over metrics): the widest k.
  int min_measurements = 5;
  double headroom = 1.15;
};

// The bound of every kind with observations, and of every kind in
// `measured_kinds` (the kinds of the usable measured runs, whose held-out k
// is the prior's: k 0 = the prior's), sorted by kind. The page figures
// (covered, said_fits_but_oom, median_abs_err) judge each publication's rows
// with the k computed without that publication.
std::vector<v1::SetupKindBound> KindBounds(
    const std::vector<KindObservation>& observations,
    const std::vector<std::string>& measured_kinds,
    const KindBoundOptions& options = {});

// The bound an answer of `kind` uses. With no bounds at all (a factor set
// fitted before kinds existed) nullopt: the prior's k alone. A kind not
// listed is untested and takes the widest k.
std::optional<v1::SetupKindBound> BoundFor(
    const google::protobuf::RepeatedPtrField<v1::SetupKindBound>& bounds,
    const std::string& kind);

// The bound an answer under `setup` (the plan's effective setup) uses: a
// named framework's own kind (FrameworkKind) where its publications
// calibrated one on enough measurements, else the kind's pooled bound
// (BoundFor). A generic answer (no framework named) takes the pooled bound
// widened to the largest k of the kind's framework bounds: the framework
// that will run it is unknown.
std::optional<v1::SetupKindBound> BoundForSetup(
    const google::protobuf::RepeatedPtrField<v1::SetupKindBound>& bounds,
    const v1::TrainingSetup& setup);

// The k of `metric` in a bound (RESERVED, DEVICE; anything else allocated).
double KOf(const v1::SetupKindBound& bound, v1::MemoryMetric metric);

// Calibrates the kind bounds of `set` (its factors and device costs fitted)
// on `runs`: every published run is predicted by a planner of `set` on
// evidence without its publication's rows. Measured kinds are those of the
// usable real runs of other sources.
absl::StatusOr<std::vector<v1::SetupKindBound>> CalibrateKindBounds(
    const v1::FactorSet& set, const std::vector<v1::MeasuredRun>& runs,
    const ModelCatalog& catalog, const KindBoundOptions& options = {});

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_KIND_BOUNDS_H_
