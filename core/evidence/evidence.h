#ifndef HEADROOM_CORE_EVIDENCE_EVIDENCE_H_
#define HEADROOM_CORE_EVIDENCE_EVIDENCE_H_

// What the measured runs say about each model and setup, ready to anchor
// answers: runs grouped by key and measurement source, each group's shape
// under its source's prior factors and its fitted correction, and the
// calibration of anchored answers (anchor.h). Immutable once built, so one
// instance is shared by every request until runs or factors change.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/catalog/model_catalog.h"
#include "core/evidence/anchor.h"
#include "core/evidence/model_key.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// The prior factors of one measurement source and their held-out k.
struct Prior {
  v1::MeasurementSource source = v1::REFERENCE;
  ComponentArray factors{};
  double k90 = 1;
  double k95 = 1;
  // GB added to every peak (SourceFit.constant_gb; 0 for the global).
  double constant_gb = 0;
  // The set's collective constants per parallel strategy (one set for
  // every source: they are the multi-GPU runtime's, not the source's).
  google::protobuf::RepeatedPtrField<v1::CollectiveConstant> collectives;
};

// The factor set's priors: the global (reference) factors, then each
// source fitted with enough runs to be usable as a prior.
std::vector<Prior> PriorsOf(const v1::FactorSet& set);

// The prior answers for a question use: `wanted` when the set has it, else
// the torch harness's when usable (what users' jobs run), else the global.
Prior ChoosePrior(
    const std::vector<Prior>& priors,
    v1::MeasurementSource wanted = v1::MEASUREMENT_SOURCE_UNSPECIFIED);

// Fills each run's model_key and measured_by where unset (imported files
// carry neither), so every stored run says what it measured and how; a run
// whose template the catalog lacks keeps an empty key.
void StampRuns(const ModelCatalog& catalog, std::vector<v1::MeasuredRun>* runs);

// One key's evidence from one source.
struct Anchor {
  ModelKey key;
  v1::MeasurementSource source = v1::REFERENCE;
  Prior prior;  // the factors its shape was taken under
  AnchorGroup group;
  Correction correction;
  uint64_t largest_batch = 0;
  // For the answer's basis.
  int oom_runs = 0;
  uint64_t min_batch = 0;
  uint64_t max_batch = 0;
  std::vector<std::string> gpus;
};

class Evidence {
 public:
  // Groups the usable runs of `runs` by key and source (runs whose template
  // the catalog lacks are skipped), fits each group's correction and
  // calibrates anchored answers on the real (not simulated) groups.
  static std::shared_ptr<const Evidence> Build(
      const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
      const std::vector<Prior>& priors, const AnchorOptions& options = {});

  Evidence(const Evidence&) = delete;
  Evidence& operator=(const Evidence&) = delete;

  // The evidence an answer for `key` rests on: runs of `preferred` source
  // first, else of another real source (most runs), else, only with
  // `include_simulated`, simulated runs. nullptr when no run has this key.
  const Anchor* Find(const ModelKey& key, v1::MeasurementSource preferred,
                     bool include_simulated) const;

  // Every source's evidence for `key` (empty when no run has it), for
  // answers that need runs of one kind (energy on one GPU) whatever source
  // has the most.
  std::vector<const Anchor*> FindAll(const ModelKey& key) const;

  const AnchorCalibration& calibration() const { return calibration_; }
  const std::vector<v1::MeasuredRun>& runs() const { return runs_; }
  size_t groups() const { return anchors_.size(); }

 private:
  Evidence() = default;

  std::vector<v1::MeasuredRun> runs_;
  std::vector<Anchor> anchors_;
  std::multimap<std::string, size_t> by_key_;  // canonical -> anchors_
  AnchorCalibration calibration_;
};

}  // namespace headroom

#endif  // HEADROOM_CORE_EVIDENCE_EVIDENCE_H_
