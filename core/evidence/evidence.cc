#include "core/evidence/evidence.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>

#include "base/status_macros.h"
#include "core/calibration/calibrate.h"
#include "core/calibration/calibration_page.h"
#include "core/memory/device_memory.h"
#include "core/memory/memory_profile.h"

namespace headroom {

std::vector<Prior> PriorsOf(const v1::FactorSet& set) {
  std::vector<Prior> priors;
  Prior global;
  global.source = v1::REFERENCE;
  global.factors = FactorArray(set.factors());
  global.k90 = set.k90();
  global.k95 = set.k95();
  global.collectives = set.collectives();
  priors.push_back(global);
  for (const v1::SourceFit& fit : set.page().sources()) {
    if (!fit.usable_as_prior()) continue;
    for (v1::MeasurementSource source :
         {v1::TORCH_HARNESS, v1::TORCH_COMPILE, v1::CUDA_PROBE, v1::SIM}) {
      if (fit.source() != SourceName(source)) continue;
      Prior prior;
      prior.source = source;
      prior.factors = FactorArray(fit.factors());
      prior.k90 = fit.k90();
      prior.k95 = fit.k95();
      prior.constant_gb = fit.constant_gb();
      prior.collectives = set.collectives();
      priors.push_back(prior);
    }
  }
  return priors;
}

Prior ChoosePrior(const std::vector<Prior>& priors,
                  v1::MeasurementSource wanted) {
  for (v1::MeasurementSource source : {wanted, v1::TORCH_HARNESS}) {
    for (const Prior& prior : priors) {
      if (prior.source == source) return prior;
    }
  }
  return priors.front();
}

void StampRuns(const ModelCatalog& catalog,
               std::vector<v1::MeasuredRun>* runs) {
  std::map<std::string, std::string> template_keys;
  for (v1::MeasuredRun& run : *runs) {
    if (run.measured_by() == v1::MEASUREMENT_SOURCE_UNSPECIFIED) {
      run.set_measured_by(MeasuredBy(run));
    }
    if (!run.model_key().empty()) continue;
    const bool cacheable = !run.has_spec() && !run.has_setup();
    if (cacheable) {
      auto cached = template_keys.find(run.template_());
      if (cached != template_keys.end()) {
        run.set_model_key(cached->second);
        continue;
      }
    }
    absl::StatusOr<std::pair<v1::ModelSpec, v1::TrainingSetup>> model =
        MeasuredModel(run, catalog);
    if (!model.ok()) continue;
    run.set_model_key(ModelKeyOf(model->first, model->second).id);
    if (cacheable) template_keys[run.template_()] = run.model_key();
  }
}

namespace {

// The runs with every published figure of another metric turned into the
// allocator peak it corresponds to on its card; without device costs such
// runs are excluded (their figure is not an allocator peak).
std::vector<v1::MeasuredRun> AllocatorFigures(
    const std::vector<v1::MeasuredRun>& runs,
    const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>* costs) {
  std::vector<v1::MeasuredRun> out = runs;
  for (v1::MeasuredRun& run : out) {
    if (MeasuredBy(run) != v1::PUBLISHED || !run.has_measured_peak_gb() ||
        run.metric() == v1::ALLOCATED ||
        run.metric() == v1::MEMORY_METRIC_UNSPECIFIED) {
      continue;
    }
    if (costs == nullptr) {
      run.set_excluded(
          "a published figure of another metric, and no device costs to read "
          "it by");
      continue;
    }
    const DeviceCosts device = DeviceCostsFor(*costs, SourceName(v1::PUBLISHED),
                                              run.gpu(), run.setup());
    run.set_measured_peak_gb(
        device.AllocatedFrom(run.measured_peak_gb(), run.metric()));
  }
  return out;
}

// Keys runs as the evidence groups them: a run's model is its spec, or its
// template's with the run's setup. Templates, and their keys per setup, are
// computed once.
class RunKeyer {
 public:
  explicit RunKeyer(const ModelCatalog& catalog) : catalog_(catalog) {}

  // The run's key; nullopt when its template is unknown.
  std::optional<ModelKey> KeyOf(const v1::MeasuredRun& run) {
    if (run.has_spec()) return ModelKeyOf(run.spec(), run.setup());
    const Template* found = TemplateOf(run);
    if (found == nullptr) return std::nullopt;
    std::string cache_key = run.template_();
    cache_key.push_back('\0');
    if (run.has_setup()) cache_key += run.setup().SerializeAsString();
    auto cached = keys_.find(cache_key);
    if (cached == keys_.end()) {
      const ModelKey key =
          ModelKeyOf(found->spec, run.has_setup() ? run.setup() : found->setup);
      cached = keys_.emplace(std::move(cache_key), key).first;
    }
    return cached->second;
  }

  // The run's model (call after KeyOf found its key).
  std::pair<v1::ModelSpec, v1::TrainingSetup> ModelOf(
      const v1::MeasuredRun& run) {
    if (run.has_spec()) return {run.spec(), run.setup()};
    const Template* found = TemplateOf(run);
    return {found->spec, run.has_setup() ? run.setup() : found->setup};
  }

 private:
  struct Template {
    v1::ModelSpec spec;
    v1::TrainingSetup setup;
  };

  const Template* TemplateOf(const v1::MeasuredRun& run) {
    auto cached = templates_.find(run.template_());
    if (cached == templates_.end()) {
      // MeasuredModel's: the template's spec, and the calibration setup for
      // a run that carries none.
      absl::StatusOr<const v1::ModelSpec*> spec =
          catalog_.Find(run.template_());
      std::optional<Template> entry;
      if (spec.ok()) entry = Template{**spec, CalibrationSetup()};
      cached = templates_.emplace(run.template_(), std::move(entry)).first;
    }
    return cached->second.has_value() ? &*cached->second : nullptr;
  }

  const ModelCatalog& catalog_;
  std::map<std::string, std::optional<Template>> templates_;
  std::map<std::string, ModelKey> keys_;
};

// Whether `run` can anchor answers at all.
bool Anchors(const v1::MeasuredRun& run) {
  return IsUsable(run) && run.batch() != 0 &&
         (run.has_measured_peak_gb() || run.has_oom_on_gb());
}

// A new group for `key` measured by `source`, its shape under the source's
// prior; nullopt when the model builds no profile.
std::optional<Anchor> NewAnchor(
    const ModelKey& key, v1::MeasurementSource source,
    const std::pair<v1::ModelSpec, v1::TrainingSetup>& model,
    const std::string& template_name, const std::vector<Prior>& priors) {
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(model.first, model.second);
  if (!profile.ok()) return std::nullopt;
  Anchor anchor;
  anchor.key = key;
  anchor.source = source;
  anchor.prior = ChoosePrior(priors, source);
  anchor.group.key_id = key.id;
  anchor.group.name =
      model.first.name().empty() ? template_name : model.first.name();
  // A multi-GPU key's shape carries its strategy's collective constant, as
  // its answers do.
  anchor.group.shape = ShapeOf(
      *profile, anchor.prior.factors,
      anchor.prior.constant_gb +
          CollectiveOf(anchor.prior.collectives, model.second).constant_gb);
  return anchor;
}

}  // namespace

size_t Evidence::ShardOf(const std::string& canonical) {
  return std::hash<std::string>{}(canonical) % kShards;
}

void Evidence::Append(v1::MeasuredRun run) {
  if (chunks_.empty() || chunks_.back()->size() == kChunkRuns) {
    tail_ = std::make_shared<Chunk>();
    tail_->reserve(kChunkRuns);
    chunks_.push_back(tail_);
  } else if (tail_ == nullptr || tail_ != chunks_.back()) {
    // The last chunk is shared with the evidence this one was made from.
    tail_ = std::make_shared<Chunk>(*chunks_.back());
    tail_->reserve(kChunkRuns);
    chunks_.back() = tail_;
  }
  tail_->push_back(std::move(run));
  ++run_count_;
}

std::vector<const v1::MeasuredRun*> Evidence::RunsOf(
    const Anchor& anchor) const {
  std::vector<const v1::MeasuredRun*> runs;
  runs.reserve(anchor.group.runs.size());
  for (size_t index : anchor.group.runs) runs.push_back(&run(index));
  return runs;
}

void Evidence::Refit(const AnchorOptions& options, Anchor* anchor) const {
  const std::vector<const v1::MeasuredRun*> runs = RunsOf(*anchor);
  anchor->correction =
      FitCorrection(anchor->group.shape, runs, calibration_->gpu_constant_gb,
                    calibration_->shrinkage, options);
  anchor->largest_batch = LargestMeasuredBatch(runs);
  std::set<std::string> gpus;
  anchor->oom_runs = 0;
  anchor->min_batch = UINT64_MAX;
  anchor->max_batch = 0;
  for (const v1::MeasuredRun* run : runs) {
    if (!run->has_measured_peak_gb()) ++anchor->oom_runs;
    anchor->min_batch = std::min<uint64_t>(anchor->min_batch, run->batch());
    anchor->max_batch = std::max<uint64_t>(anchor->max_batch, run->batch());
    gpus.insert(run->gpu());
  }
  anchor->gpus.assign(gpus.begin(), gpus.end());
}

std::shared_ptr<const Evidence> Evidence::Build(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    const std::vector<Prior>& priors, const AnchorOptions& options) {
  std::shared_ptr<Evidence> evidence(new Evidence());
  std::vector<v1::MeasuredRun> figures =
      AllocatorFigures(runs, options.device_costs);
  // (canonical key, source) -> anchors index.
  std::map<std::pair<std::string, int>, size_t> index;
  std::vector<Anchor> anchors;
  RunKeyer keyer(catalog);
  for (size_t i = 0; i < figures.size(); ++i) {
    const v1::MeasuredRun& run = figures[i];
    if (!Anchors(run)) continue;
    const std::optional<ModelKey> key = keyer.KeyOf(run);
    if (!key.has_value()) continue;
    const v1::MeasurementSource source = MeasuredBy(run);
    auto [it, inserted] =
        index.emplace(std::make_pair(key->canonical, static_cast<int>(source)),
                      anchors.size());
    if (inserted) {
      std::optional<Anchor> anchor =
          NewAnchor(*key, source, keyer.ModelOf(run), run.template_(), priors);
      if (!anchor.has_value()) {
        index.erase(it);
        continue;
      }
      anchors.push_back(*std::move(anchor));
    }
    anchors[it->second].group.runs.push_back(i);
  }

  // Calibrate on the real groups; simulated ones are answered with the
  // same bound and constants (they only anchor simulated questions).
  std::vector<AnchorGroup> real;
  for (const Anchor& anchor : anchors) {
    // Published rows anchor their own keys but calibrate nothing here:
    // they report other metrics, under setups the spec only partly says,
    // and their shrinkage and card constants are not the measured runs'.
    if (anchor.source != v1::SIM && anchor.source != v1::PUBLISHED) {
      real.push_back(anchor.group);
    }
  }
  const Prior& global = priors.front();
  evidence->calibration_ = std::make_shared<const AnchorCalibration>(
      CalibrateAnchors(figures, real, global.k90, global.k95, options));
  for (v1::MeasuredRun& run : figures) evidence->Append(std::move(run));
  evidence->tail_ = nullptr;
  std::vector<std::shared_ptr<Shard>> shards(kShards);
  for (auto& shard : shards) shard = std::make_shared<Shard>();
  for (Anchor& anchor : anchors) {
    evidence->Refit(options, &anchor);
    std::string canonical = anchor.key.canonical;
    const size_t at = ShardOf(canonical);
    shards[at]->emplace(std::move(canonical),
                        std::make_shared<const Anchor>(std::move(anchor)));
  }
  evidence->shards_.assign(shards.begin(), shards.end());
  evidence->groups_ = anchors.size();
  return evidence;
}

std::shared_ptr<const Evidence> Evidence::WithRuns(
    const std::vector<v1::MeasuredRun>& added, const ModelCatalog& catalog,
    const std::vector<Prior>& priors, const AnchorOptions& options,
    EvidenceUpdate* update) const {
  std::shared_ptr<Evidence> next(new Evidence());
  next->chunks_ = chunks_;
  next->run_count_ = run_count_;
  next->shards_ = shards_;
  next->groups_ = groups_;
  next->calibration_ = calibration_;
  EvidenceUpdate done;
  // (canonical key, source) -> the group's new version.
  std::map<std::pair<std::string, int>, Anchor> touched;
  RunKeyer keyer(catalog);
  for (v1::MeasuredRun& figure :
       AllocatorFigures(added, options.device_costs)) {
    const size_t index = next->run_count_;
    next->Append(std::move(figure));
    ++done.runs;
    const v1::MeasuredRun& run = next->run(index);
    if (!Anchors(run)) continue;
    const std::optional<ModelKey> key = keyer.KeyOf(run);
    if (!key.has_value()) continue;
    const v1::MeasurementSource source = MeasuredBy(run);
    const std::pair<std::string, int> id = {key->canonical,
                                            static_cast<int>(source)};
    auto it = touched.find(id);
    if (it == touched.end()) {
      std::optional<Anchor> anchor;
      const Shard& shard = *shards_[ShardOf(key->canonical)];
      auto [begin, end] = shard.equal_range(key->canonical);
      for (auto held = begin; held != end; ++held) {
        if (held->second->source == source) anchor = *held->second;
      }
      if (!anchor.has_value()) {
        anchor = NewAnchor(*key, source, keyer.ModelOf(run), run.template_(),
                           priors);
        if (!anchor.has_value()) continue;
      }
      it = touched.emplace(id, *std::move(anchor)).first;
    }
    it->second.group.runs.push_back(index);
  }
  next->tail_ = nullptr;
  std::map<size_t, std::shared_ptr<Shard>> copies;
  for (auto& [id, anchor] : touched) {
    next->Refit(options, &anchor);
    ++done.anchors;
    const std::vector<const v1::MeasuredRun*> runs = next->RunsOf(anchor);
    for (size_t i = 0; i < runs.size() && !done.constants_moved; ++i) {
      done.constants_moved =
          anchor.group.runs[i] >= run_count_ && AddsGpuCell(runs, *runs[i]);
    }
    const size_t at = ShardOf(id.first);
    std::shared_ptr<Shard>& copy = copies[at];
    if (copy == nullptr) copy = std::make_shared<Shard>(*shards_[at]);
    auto [begin, end] = copy->equal_range(id.first);
    const v1::MeasurementSource source = anchor.source;
    auto same = std::find_if(begin, end, [source](const auto& held) {
      return held.second->source == source;
    });
    auto fitted = std::make_shared<const Anchor>(std::move(anchor));
    if (same != end) {
      // In place, so a key's anchors keep their order (Find's ties).
      same->second = std::move(fitted);
    } else {
      copy->emplace(id.first, std::move(fitted));
      ++next->groups_;
    }
  }
  for (auto& [at, copy] : copies) next->shards_[at] = std::move(copy);
  if (update != nullptr) *update = done;
  return next;
}

const Anchor* Evidence::Find(const ModelKey& key,
                             v1::MeasurementSource preferred,
                             bool include_simulated) const {
  const Anchor* best = nullptr;
  const auto rank = [&](const Anchor& anchor) {
    if (anchor.source == preferred) return 3;
    if (anchor.source != v1::SIM) return 2;
    return include_simulated ? 1 : 0;
  };
  const Shard& shard = *shards_[ShardOf(key.canonical)];
  auto [begin, end] = shard.equal_range(key.canonical);
  for (auto it = begin; it != end; ++it) {
    const Anchor& anchor = *it->second;
    if (anchor.source == v1::SIM && !include_simulated) continue;
    if (best == nullptr || rank(anchor) > rank(*best) ||
        (rank(anchor) == rank(*best) &&
         anchor.group.runs.size() > best->group.runs.size())) {
      best = &anchor;
    }
  }
  return best;
}

std::vector<const Anchor*> Evidence::FindAll(const ModelKey& key) const {
  std::vector<const Anchor*> found;
  const Shard& shard = *shards_[ShardOf(key.canonical)];
  auto [begin, end] = shard.equal_range(key.canonical);
  for (auto it = begin; it != end; ++it) found.push_back(it->second.get());
  return found;
}

}  // namespace headroom
