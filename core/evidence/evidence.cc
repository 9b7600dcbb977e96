#include "core/evidence/evidence.h"

#include <algorithm>
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

}  // namespace

std::shared_ptr<const Evidence> Evidence::Build(
    const std::vector<v1::MeasuredRun>& runs, const ModelCatalog& catalog,
    const std::vector<Prior>& priors, const AnchorOptions& options) {
  std::shared_ptr<Evidence> evidence(new Evidence());
  evidence->runs_ = AllocatorFigures(runs, options.device_costs);
  // (canonical key, source) -> anchors_ index.
  std::map<std::pair<std::string, int>, size_t> index;
  std::map<std::string, std::pair<v1::ModelSpec, v1::TrainingSetup>> templates;
  for (size_t i = 0; i < evidence->runs_.size(); ++i) {
    const v1::MeasuredRun& run = evidence->runs_[i];
    if (!IsUsable(run) || run.batch() == 0) continue;
    if (!run.has_measured_peak_gb() && !run.has_oom_on_gb()) continue;
    std::pair<v1::ModelSpec, v1::TrainingSetup> model;
    if (!run.has_spec()) {
      auto cached = templates.find(run.template_());
      if (cached == templates.end()) {
        absl::StatusOr<std::pair<v1::ModelSpec, v1::TrainingSetup>> found =
            MeasuredModel(run, catalog);
        if (!found.ok()) continue;
        cached = templates.emplace(run.template_(), *std::move(found)).first;
      }
      model = cached->second;
      if (run.has_setup()) model.second = run.setup();
    } else {
      model = {run.spec(), run.setup()};
    }
    const v1::MeasurementSource source = MeasuredBy(run);
    const ModelKey key = ModelKeyOf(model.first, model.second);
    auto [it, inserted] =
        index.emplace(std::make_pair(key.canonical, static_cast<int>(source)),
                      evidence->anchors_.size());
    if (inserted) {
      absl::StatusOr<MemoryProfile> profile =
          BuildProfile(model.first, model.second);
      if (!profile.ok()) {
        index.erase(it);
        continue;
      }
      Anchor anchor;
      anchor.key = key;
      anchor.source = source;
      anchor.prior = ChoosePrior(priors, source);
      anchor.group.key_id = key.id;
      anchor.group.name =
          model.first.name().empty() ? run.template_() : model.first.name();
      // A multi-GPU key's shape carries its strategy's collective
      // constant, as its answers do.
      anchor.group.shape = ShapeOf(
          *profile, anchor.prior.factors,
          anchor.prior.constant_gb +
              CollectiveOf(anchor.prior.collectives, model.second).constant_gb);
      evidence->anchors_.push_back(std::move(anchor));
    }
    evidence->anchors_[it->second].group.runs.push_back(i);
  }

  // Calibrate on the real groups; simulated ones are answered with the
  // same bound and constants (they only anchor simulated questions).
  std::vector<AnchorGroup> real;
  for (const Anchor& anchor : evidence->anchors_) {
    // Published rows anchor their own keys but calibrate nothing here:
    // they report other metrics, under setups the spec only partly says,
    // and their shrinkage and card constants are not the measured runs'.
    if (anchor.source != v1::SIM && anchor.source != v1::PUBLISHED) {
      real.push_back(anchor.group);
    }
  }
  const Prior& global = priors.front();
  evidence->calibration_ =
      CalibrateAnchors(evidence->runs_, real, global.k90, global.k95, options);
  const GpuConstants& constants = evidence->calibration_.gpu_constant_gb;
  for (size_t a = 0; a < evidence->anchors_.size(); ++a) {
    Anchor& anchor = evidence->anchors_[a];
    anchor.correction =
        FitCorrection(anchor.group.shape, evidence->runs_, anchor.group.runs,
                      constants, evidence->calibration_.shrinkage, options);
    anchor.largest_batch =
        LargestMeasuredBatch(evidence->runs_, anchor.group.runs);
    std::set<std::string> gpus;
    anchor.min_batch = UINT64_MAX;
    for (size_t i : anchor.group.runs) {
      const v1::MeasuredRun& run = evidence->runs_[i];
      if (!run.has_measured_peak_gb()) ++anchor.oom_runs;
      anchor.min_batch = std::min<uint64_t>(anchor.min_batch, run.batch());
      anchor.max_batch = std::max<uint64_t>(anchor.max_batch, run.batch());
      gpus.insert(run.gpu());
    }
    anchor.gpus.assign(gpus.begin(), gpus.end());
    evidence->by_key_.emplace(anchor.key.canonical, a);
  }
  return evidence;
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
  auto [begin, end] = by_key_.equal_range(key.canonical);
  for (auto it = begin; it != end; ++it) {
    const Anchor& anchor = anchors_[it->second];
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
  auto [begin, end] = by_key_.equal_range(key.canonical);
  for (auto it = begin; it != end; ++it) found.push_back(&anchors_[it->second]);
  return found;
}

}  // namespace headroom
