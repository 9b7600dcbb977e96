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

// What adding runs to evidence did (Evidence::WithRuns).
struct EvidenceUpdate {
  size_t runs = 0;     // runs added
  size_t anchors = 0;  // key-and-source groups re-fitted or created
  // Some added run made a cell the GPU constants are fitted on (AddsGpuCell):
  // the constants, and so every correction, may have moved; only a rebuild
  // re-fits them.
  bool constants_moved = false;
};

class Evidence {
 public:
  // Groups the usable runs of `runs` by key and source (runs whose template
  // the catalog lacks are skipped), fits each group's correction and
  // calibrates anchored answers on the real (not simulated) groups.
  static std::shared_ptr<const Evidence> Build(
      const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
      const std::vector<Prior>& priors, const AnchorOptions& options = {});

  // This evidence with `added` too: each added run joins its key's group
  // (a new group for a new key), whose correction is fitted again under
  // this evidence's calibration (shrinkage, GPU constants, buckets). Shares
  // everything else with this evidence, so the cost is that of the groups
  // the runs join, not of the runs already held: runs are held in chunks
  // of kChunkRuns and groups in kShards shards, and only the last chunk and
  // the shards touched are copied. `priors` and `options` must be the ones
  // this evidence was built with.
  std::shared_ptr<const Evidence> WithRuns(
      const std::vector<v1::MeasuredRun>& added, const ModelCatalog& catalog,
      const std::vector<Prior>& priors, const AnchorOptions& options,
      EvidenceUpdate* update = nullptr) const;

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

  const AnchorCalibration& calibration() const { return *calibration_; }
  // The run an anchor's group.runs index names (index < run_count()), as
  // the evidence holds it (a published figure of another metric read as
  // the allocator peak it corresponds to).
  const v1::MeasuredRun& run(size_t index) const {
    return (*chunks_[index / kChunkRuns])[index % kChunkRuns];
  }
  size_t run_count() const { return run_count_; }
  size_t groups() const { return groups_; }

  static constexpr size_t kChunkRuns = 1024;
  static constexpr size_t kShards = 256;

 private:
  using Chunk = std::vector<v1::MeasuredRun>;
  // canonical key -> that key's anchors (one per source).
  using Shard = std::multimap<std::string, std::shared_ptr<const Anchor>>;

  Evidence() = default;
  static size_t ShardOf(const std::string& canonical);
  void Append(v1::MeasuredRun run);
  std::vector<const v1::MeasuredRun*> RunsOf(const Anchor& anchor) const;
  // Fills the anchor's correction and basis figures from its runs.
  void Refit(const AnchorOptions& options, Anchor* anchor) const;

  std::vector<std::shared_ptr<const Chunk>> chunks_;
  // While building: the last chunk when this evidence owns it alone.
  std::shared_ptr<Chunk> tail_;
  size_t run_count_ = 0;
  std::vector<std::shared_ptr<const Shard>> shards_;
  size_t groups_ = 0;
  std::shared_ptr<const AnchorCalibration> calibration_;
};

}  // namespace headroom

#endif  // HEADROOM_CORE_EVIDENCE_EVIDENCE_H_
