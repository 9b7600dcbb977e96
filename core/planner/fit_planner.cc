#include "core/planner/fit_planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/memory/fit_verdict.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/memory/parallel.h"
#include "core/memory/training_setup.h"

namespace headroom {
namespace {

struct ResolvedTarget {
  std::string name;
  double memory_gb;
  bool is_gpu = false;
};

absl::StatusOr<ResolvedTarget> Resolve(const v1::Target& target, int index) {
  switch (target.kind_case()) {
    case v1::Target::kGpu: {
      ASSIGN_OR_RETURN(GpuInfo gpu, FindGpu(target.gpu()));
      return ResolvedTarget{gpu.name, gpu.memory_gb, true};
    }
    case v1::Target::kMemoryGb: {
      const double gb = target.memory_gb();
      RETURN_IF_ERROR(
          CheckCardGb(gb, absl::StrCat("targets[", index, "].memory_gb")));
      return ResolvedTarget{absl::StrCat(gb, " GB"), gb};
    }
    case v1::Target::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "targets[", index, "] is empty; set gpu (a catalog name) or memory_gb"));
}

// Adds `gb` to both moments, in the optimizer component (the bytes that do
// not depend on the batch).
void AddConstant(double gb, const ComponentArray& factors,
                 MemoryProfile* profile) {
  if (gb == 0 || factors[kOptimizer] <= 0) return;
  const double bytes = gb * 1e9 / factors[kOptimizer];
  profile->fixed_bytes[kOptimizer] =
      std::max(0.0, profile->fixed_bytes[kOptimizer] + bytes);
  profile->update_bytes[kOptimizer] =
      std::max(0.0, profile->update_bytes[kOptimizer] + bytes);
}

// The profile an answer peaks by under its prior's factors: the prior's
// constant joins the batch-independent bytes; an anchored answer scales
// those by fixed_scale and the per-sample bytes by batch_scale; the card's
// constant comes last.
MemoryProfile AnchoredProfile(const MemoryProfile& profile,
                              const Correction& correction,
                              const ComponentArray& factors,
                              double prior_constant_gb, double constant_gb) {
  MemoryProfile out = profile;
  AddConstant(prior_constant_gb, factors, &out);
  for (int c = 0; c < kNumComponents; ++c) {
    out.fixed_bytes[c] *= correction.fixed_scale;
    out.per_sample_bytes[c] *= correction.batch_scale;
    out.update_bytes[c] *= correction.fixed_scale;
  }
  AddConstant(constant_gb, factors, &out);
  return out;
}

// The largest batch whose verdict is FITS (or not DOES_NOT_FIT) when k
// depends on the batch's extrapolation bucket: within each bucket's batch
// range the closed-form answer under that bucket's k; the peak and k are
// both non-decreasing in the batch, so the last bucket that admits a batch
// holds the answer.
uint64_t AnchoredMaxBatch(const MemoryProfile& profile,
                          const ComponentArray& factors, double card_gb,
                          double headroom,
                          const std::vector<v1::ExtrapolationBucket>& buckets,
                          double coverage, uint64_t largest_batch,
                          bool fits_only) {
  // Each bucket covers the batches (lo, hi].
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  uint64_t lo = 0;
  for (const v1::ExtrapolationBucket& bucket : buckets) {
    const uint64_t hi =
        bucket.max_ratio() == 0
            ? kMaxBatch
            : std::min<uint64_t>(
                  kMaxBatch,
                  static_cast<uint64_t>(std::floor(
                      bucket.max_ratio() * static_cast<double>(largest_batch) +
                      1e-9)));
    ranges.emplace_back(lo, std::max(lo, hi));
    lo = std::max(lo, hi);
  }
  // From the furthest bucket in: the first that admits a batch holds the
  // answer (nearer buckets only admit smaller ones).
  for (size_t b = buckets.size(); b-- > 0;) {
    const auto [from, to] = ranges[b];
    if (to <= from) continue;
    const VerdictRule rule{headroom, BucketK(buckets[b], coverage)};
    const uint64_t m = MaxBatch(profile, factors, card_gb, rule, fits_only);
    if (m > from) return std::min(to, m);
  }
  return 0;
}

absl::Status AnswerMinGpus(
    const v1::ModelSpec& spec, const v1::TrainingSetup& setup, uint64_t batch,
    const std::vector<ResolvedTarget>& targets, const ComponentArray& factors,
    const VerdictRule& rule, double constant_gb,
    const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>&
        collectives,
    const Correction& correction, v1::CheckFitResponse* response) {
  std::vector<v1::TrainingSetup::Parallel> strategies;
  if (setup.parallel() != v1::TrainingSetup::PARALLEL_UNSPECIFIED) {
    strategies.push_back(setup.parallel());
  } else {
    strategies = AllStrategies();
  }
  const uint32_t step = std::max<uint32_t>(1, setup.tensor_parallel());
  const auto setup_at = [&](v1::TrainingSetup::Parallel strategy, uint32_t n) {
    v1::TrainingSetup at = setup;
    at.set_gpus(n);
    at.set_nodes(0);
    at.set_parallel(strategy);
    return at;
  };
  // Each (strategy, N) profile is built once: the two solves, their
  // verification and the breakdown ask for the same counts, and every
  // target asks for the same profiles.
  std::map<std::pair<int, uint32_t>, absl::StatusOr<MemoryProfile>> built;
  for (const ResolvedTarget& target : targets) {
    v1::MinGpusTarget* out = response->add_min_gpus();
    out->set_target(target.name);
    out->set_memory_gb(target.memory_gb);
    const v1::MinGpusStrategy* cheapest = nullptr;
    for (v1::TrainingSetup::Parallel strategy : strategies) {
      absl::Status failed = absl::OkStatus();
      const auto profile_at = [&](uint32_t n) {
        auto [it, inserted] = built.try_emplace({strategy, n}, MemoryProfile());
        if (inserted) {
          const v1::TrainingSetup at = setup_at(strategy, n);
          it->second = BuildProfile(spec, at);
          if (it->second.ok()) {
            const CollectiveFit collective = CollectiveOf(collectives, at);
            SetCollective(collective, &*it->second);
            it->second =
                AnchoredProfile(*it->second, correction, factors,
                                constant_gb + collective.constant_gb, 0);
          }
        }
        if (!it->second.ok()) {
          if (failed.ok()) failed = it->second.status();
          return MemoryProfile();
        }
        return *it->second;
      };
      const auto peak = [&](uint32_t n) {
        return PeakAt(profile_at(n), factors, batch);
      };
      const auto verdict = [&](uint32_t n) {
        return Verdict(peak(n), target.memory_gb, rule);
      };
      v1::MinGpusStrategy* row = out->add_strategies();
      row->set_strategy(StrategyName(strategy));
      const uint32_t fits = SolveMinGpus(
          peak, [&](uint32_t n) { return verdict(n) == FitVerdict::kFits; },
          target.memory_gb / (rule.k * rule.headroom), step, step);
      const uint32_t not_dnf = SolveMinGpus(
          peak,
          [&](uint32_t n) { return verdict(n) != FitVerdict::kDoesNotFit; },
          target.memory_gb, step, step);
      if (!failed.ok()) {
        // An unusable combination (offload with DDP, ...): no answer for
        // this strategy, said in the row.
        out->mutable_strategies()->RemoveLast();
        continue;
      }
      row->set_gpus_fits(fits);
      row->set_gpus_not_does_not_fit(not_dnf);
      const uint32_t at = fits != 0 ? fits : not_dnf;
      if (at == 0) continue;
      const MemoryProfile p = profile_at(at);
      const ParallelLayout layout = LayoutOf(setup_at(strategy, at));
      row->set_gpus(at);
      row->set_nodes(layout.nodes);
      row->set_peak_gb(PeakAt(p, factors, batch));
      row->set_upper_gb(row->peak_gb() * rule.k);
      // The breakdown of the moment that peaks: at backward start the
      // states, gathered units, buffers and activations; at the update
      // the states and buckets. The optimizer component's rest (a prior's
      // constant) counts with the states.
      Moment moment = Moment::kBackward;
      const ComponentArray bytes = p.PeakBytesAt(batch, factors, &moment);
      const double f = factors[kOptimizer] / 1e9;
      const bool backward = moment == Moment::kBackward;
      const double gathered = backward ? p.parallel.gathered_units : 0;
      const double buffers =
          p.parallel.buckets + (backward ? p.parallel.reduce_scatter : 0);
      // The collective constant rides in the optimizer component too; it is
      // its own column.
      row->set_sharded_states_gb(
          std::max(0.0, (bytes[kOptimizer] - gathered - buffers) * f -
                            p.parallel.collective_gb));
      row->set_gathered_units_gb(gathered * f);
      row->set_buffers_gb(buffers * f);
      double activations = 0;
      for (int c = 1; c < kNumComponents; ++c) {
        activations += bytes[c] * factors[c];
      }
      row->set_activations_gb(activations / 1e9);
      row->set_host_gb_per_node(p.parallel.host_bytes_per_node / 1e9);
      row->set_collective_gb(p.parallel.collective_gb);
      row->set_collective_fitted(p.parallel.collective_fitted);
      if (fits != 0 && (cheapest == nullptr || fits < cheapest->gpus_fits() ||
                        (fits == cheapest->gpus_fits() &&
                         row->peak_gb() < cheapest->peak_gb()))) {
        cheapest = row;
      }
    }
    if (cheapest != nullptr) out->set_cheapest(cheapest->strategy());
  }
  return absl::OkStatus();
}

}  // namespace

void SetComponentsGb(const ComponentArray& bytes, v1::ComponentsGb* out) {
  out->set_optimizer(bytes[kOptimizer] / 1e9);
  out->set_outputs(bytes[kOutputs] / 1e9);
  out->set_attention(bytes[kAttention] / 1e9);
  out->set_internal(bytes[kInternal] / 1e9);
  out->set_recurrent(bytes[kRecurrent] / 1e9);
  out->set_transient(bytes[kTransient] / 1e9);
}

FitPlanner::FitPlanner(std::shared_ptr<const ModelCatalog> catalog,
                       v1::FactorSet factor_set, double default_coverage)
    : catalog_(std::move(catalog)),
      factor_set_(std::move(factor_set)),
      default_coverage_(default_coverage) {
  for (const v1::Regime& regime : factor_set_.regimes()) {
    if (regime.adopted()) regimes_[regime.gpu()] = &regime;
  }
  priors_ = PriorsOf(factor_set_);
  prior_ = ChoosePrior(priors_);
  compile_prior_ = ChoosePrior(priors_, v1::TORCH_COMPILE);
  for (const std::string& name : catalog_->Names()) {
    absl::StatusOr<const v1::ModelSpec*> spec = catalog_->Find(name);
    if (spec.ok()) template_architecture_[name] = CanonicalArchitecture(**spec);
  }
}

ModelKey FitPlanner::KeyFor(ResolvedModel& model,
                            const v1::TrainingSetup& setup,
                            bool with_id) const {
  if (model.catalog_spec != nullptr) {
    auto it = template_architecture_.find(model.template_name);
    if (it != template_architecture_.end()) {
      return ModelKeyOf(it->second, model.spec().positions(), setup, with_id);
    }
    return ModelKeyOf(CanonicalArchitecture(*model.catalog_spec),
                      model.spec().positions(), setup, with_id);
  }
  const uint64_t positions = model.owned_spec.positions();
  return ModelKeyOf(CanonicalArchitectureInPlace(&model.owned_spec), positions,
                    setup, with_id);
}

absl::Status CheckBatches(
    const google::protobuf::RepeatedField<uint32_t>& batches, int max_entries) {
  if (batches.empty() || batches.size() > max_entries) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batches has ", batches.size(), " entries; allowed 1..", max_entries));
  }
  for (int i = 0; i < batches.size(); ++i) {
    if (batches[i] == 0 || batches[i] > kMaxBatch) {
      return absl::InvalidArgumentError(
          absl::StrCat("batches[", i, "] = ", batches[i],
                       " is out of range; allowed 1..", kMaxBatch));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelKey> FitPlanner::KeyOf(
    const v1::CheckFitRequest& request) const {
  ASSIGN_OR_RETURN(
      ResolvedModel model,
      ResolveModelRef(request.model(), request.setup(), *catalog_));
  return KeyFor(model, ProfileSetup(request.model(), request.setup()));
}

absl::StatusOr<v1::CheckFitResponse> FitPlanner::CheckFit(
    const v1::CheckFitRequest& request, const Evidence* evidence) const {
  // The model.
  ASSIGN_OR_RETURN(
      ResolvedModel model,
      ResolveModelRef(request.model(), request.setup(), *catalog_));
  const v1::ModelSpec* spec = &model.spec();
  std::vector<std::string>& assumptions = model.assumptions;

  // Batches and targets.
  RETURN_IF_ERROR(CheckBatches(request.batches(), kMaxBatchesPerRequest));
  if (request.targets().empty() ||
      request.targets_size() > kMaxTargetsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("targets has ", request.targets_size(),
                     " entries; allowed 1..", kMaxTargetsPerRequest));
  }
  std::vector<ResolvedTarget> targets;
  targets.reserve(request.targets_size());
  for (int i = 0; i < request.targets_size(); ++i) {
    ASSIGN_OR_RETURN(ResolvedTarget target, Resolve(request.targets(i), i));
    targets.push_back(std::move(target));
  }

  // Coverage picks k of the calibrated upper bound.
  double coverage =
      request.coverage() == 0 ? default_coverage_ : request.coverage();
  if (!KAtCoverage(1, 1, coverage).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coverage = ", request.coverage(),
        " is not calibrated; allowed 0 (server default), 0.9, 0.95"));
  }

  // A conversion that bound setup.positions (an ONNX graph's symbolic
  // lengths) is not rescaled again.
  const v1::TrainingSetup setup =
      ProfileSetup(request.model(), request.setup());
  ASSIGN_OR_RETURN(MemoryProfile profile, BuildProfile(*spec, setup));
  // Under gradient accumulation a batch is grad_accum microbatches: it must
  // divide, and a largest batch is a whole number of microbatches.
  const uint64_t accum = std::max<uint32_t>(1, setup.grad_accum());
  for (int i = 0; i < request.batches_size(); ++i) {
    if (request.batches(i) % accum != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batches[", i, "] = ", request.batches(i),
                       " is not a multiple of setup.grad_accum = ", accum,
                       "; allowed multiples of ", accum));
    }
  }
  const auto whole_steps = [accum](uint64_t batch) {
    return static_cast<uint32_t>(batch / accum * accum);
  };
  for (std::string& assumption :
       SetupAssumptions(*spec, setup, profile.states)) {
    assumptions.push_back(std::move(assumption));
  }
  // A parallel setup's per-GPU collective constant, fitted from its
  // strategy's multi-GPU runs (0 while none was measured, said).
  const CollectiveFit collective =
      CollectiveOf(factor_set_.collectives(), setup);
  SetCollective(collective, &profile);
  for (std::string& assumption : ParallelAssumptions(profile.parallel)) {
    assumptions.push_back(std::move(assumption));
  }
  // The evidence: the model's own runs when there are any, else the prior.
  // Without evidence (offline, tests) no key is needed.
  ModelKey key = evidence == nullptr ? ModelKey{}
                                     : KeyFor(model, setup, /*with_id=*/false);
  const Anchor* anchor =
      evidence == nullptr
          ? nullptr
          : evidence->Find(key, prior_.source, request.include_simulated());
  if (evidence != nullptr) {
    key.id = anchor != nullptr ? anchor->key.id : KeyId(key.canonical);
  }
  // A compiled step is answered by the compiled runs' prior when the set
  // has one.
  const bool compiled_prior =
      setup.compile() && compile_prior_.source == v1::TORCH_COMPILE;
  if (setup.compile() && anchor == nullptr) {
    assumptions.push_back(
        compiled_prior
            ? "torch.compile: factors fitted to compiled measurements "
              "(torch-compile)"
            : "torch.compile: no compiled measurements in this factor set "
              "yet; answered with the eager prior (compiled steps usually "
              "save fewer activations)");
  }
  const Prior& prior = anchor != nullptr ? anchor->prior
                       : compiled_prior  ? compile_prior_
                                         : prior_;
  const ComponentArray factors = prior.factors;
  const double k = *KAtCoverage(prior.k90, prior.k95, coverage);
  const VerdictRule rule{factor_set_.headroom(), k};
  const bool global_prior = anchor == nullptr && prior.source == v1::REFERENCE;
  const double prior_constant_gb = prior.constant_gb + collective.constant_gb;
  const MemoryProfile anchored = AnchoredProfile(
      profile, anchor != nullptr ? anchor->correction : Correction{}, factors,
      prior_constant_gb, 0);
  const auto& buckets = evidence != nullptr
                            ? evidence->calibration().buckets
                            : std::vector<v1::ExtrapolationBucket>{};
  const auto k_at = [&](uint64_t batch) {
    if (anchor == nullptr || buckets.empty()) return k;
    const double ratio =
        static_cast<double>(batch) /
        static_cast<double>(std::max<uint64_t>(1, anchor->largest_batch));
    return BucketK(BucketFor(buckets, ratio), coverage);
  };

  v1::Basis basis;
  basis.set_model_key(key.id);
  basis.set_source(SourceName(prior.source));
  if (anchor != nullptr) {
    basis.set_kind(v1::Basis::ANCHORED);
    basis.set_source(SourceName(anchor->source));
    basis.set_runs(static_cast<int>(anchor->group.runs.size()));
    basis.set_oom_runs(anchor->oom_runs);
    basis.set_min_batch(static_cast<uint32_t>(anchor->min_batch));
    basis.set_max_batch(static_cast<uint32_t>(anchor->max_batch));
    for (const std::string& gpu : anchor->gpus) basis.add_gpus(gpu);
    basis.set_fixed_scale(anchor->correction.fixed_scale);
    basis.set_batch_scale(anchor->correction.batch_scale);
  } else {
    basis.set_kind(v1::Basis::PRIOR);
    basis.set_why(absl::StrCat(
        "no measured run of this model and setup (key ", key.id, ")",
        request.include_simulated() ? ""
                                    : "; simulated runs are not asked for"));
  }

  v1::CheckFitResponse response;
  response.set_model(spec->name());
  response.set_params(profile.params);
  response.set_factor_set_version(factor_set_.version());
  response.set_headroom(rule.headroom);
  response.set_coverage(coverage);
  response.set_k(k_at(request.batches(0)));
  for (std::string& assumption : assumptions) {
    response.add_assumptions(std::move(assumption));
  }
  std::vector<double> peaks;
  peaks.reserve(request.batches_size());
  for (uint64_t batch : request.batches()) {
    Moment moment = Moment::kBackward;
    const ComponentArray bytes = anchored.PeakBytesAt(batch, factors, &moment);
    const double peak = PeakGb(bytes, factors);
    peaks.push_back(peak);
    v1::BatchEstimate* estimate = response.add_estimates();
    estimate->set_batch(batch);
    estimate->set_peak_gb(peak);
    estimate->set_k(k_at(batch));
    estimate->set_upper_gb(peak * estimate->k());
    ComponentArray factored;
    for (int c = 0; c < kNumComponents; ++c) {
      factored[c] = bytes[c] * factors[c];
    }
    SetComponentsGb(factored, estimate->mutable_components());
    estimate->set_moment(MomentName(moment));
    *estimate->mutable_basis() = basis;
    if (anchor != nullptr) {
      estimate->mutable_basis()->set_extrapolation(
          static_cast<double>(batch) /
          static_cast<double>(std::max<uint64_t>(1, anchor->largest_batch)));
    }
  }
  for (const ResolvedTarget& target : targets) {
    v1::TargetResult* result = response.add_targets();
    result->set_name(target.name);
    result->set_memory_gb(target.memory_gb);
    if (anchor != nullptr) {
      // The card's constant; a bare size takes the largest (never a
      // smaller peak than any known card would give).
      double constant = 0;
      const GpuConstants& constants = evidence->calibration().gpu_constant_gb;
      if (target.is_gpu) {
        auto it = constants.find(target.name);
        if (it != constants.end()) constant = it->second;
      } else {
        for (const auto& [gpu, gb] : constants) {
          constant = std::max(constant, gb);
        }
      }
      const MemoryProfile on_card = AnchoredProfile(
          profile, anchor->correction, factors, prior_constant_gb, constant);
      result->set_regime("anchored");
      result->set_gpu_constant_gb(constant);
      result->set_k(k_at(request.batches(0)));
      for (int i = 0; i < request.batches_size(); ++i) {
        const double peak = PeakAt(on_card, factors, request.batches(i));
        result->add_peaks_gb(peak);
        result->add_verdicts(
            ToApiVerdict(Verdict(peak, target.memory_gb,
                                 {rule.headroom, k_at(request.batches(i))})));
      }
      for (bool fits_only : {true, false}) {
        const uint64_t max = AnchoredMaxBatch(
            on_card, factors, target.memory_gb, rule.headroom, buckets,
            coverage, std::max<uint64_t>(1, anchor->largest_batch), fits_only);
        if (fits_only) {
          result->set_max_batch_fits(whole_steps(max));
        } else {
          result->set_max_batch_not_does_not_fit(whole_steps(max));
        }
      }
      continue;
    }
    auto regime = target.is_gpu && global_prior ? regimes_.find(target.name)
                                                : regimes_.end();
    ComponentArray target_factors = factors;
    VerdictRule target_rule = rule;
    if (regime != regimes_.end()) {
      target_factors = FactorArray(regime->second->factors());
      // The coverage was checked above, so the regime has a k for it.
      target_rule.k =
          KAtCoverage(regime->second->k90(), regime->second->k95(), coverage)
              .value_or(k);
      result->set_regime(regime->second->gpu());
    } else {
      result->set_regime("global");
    }
    result->set_k(target_rule.k);
    for (size_t i = 0; i < peaks.size(); ++i) {
      const double peak =
          regime == regimes_.end()
              ? peaks[i]
              : PeakAt(anchored, target_factors, request.batches(i));
      result->add_peaks_gb(peak);
      result->add_verdicts(
          ToApiVerdict(Verdict(peak, target.memory_gb, target_rule)));
    }
    result->set_max_batch_fits(
        whole_steps(MaxBatch(anchored, target_factors, target.memory_gb,
                             target_rule, /*fits_only=*/true)));
    result->set_max_batch_not_does_not_fit(
        whole_steps(MaxBatch(anchored, target_factors, target.memory_gb,
                             target_rule, /*fits_only=*/false)));
  }
  if (request.min_gpus()) {
    RETURN_IF_ERROR(AnswerMinGpus(
        *spec, setup, request.batches(0), targets, factors, rule,
        prior.constant_gb, factor_set_.collectives(),
        anchor != nullptr ? anchor->correction : Correction{}, &response));
  }
  return response;
}

}  // namespace headroom
