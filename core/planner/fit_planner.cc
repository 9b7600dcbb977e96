#include "core/planner/fit_planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/calibration/kind_bounds.h"
#include "core/catalog/gpu_catalog.h"
#include "core/jobs/job_files.h"
#include "core/memory/device_memory.h"
#include "core/memory/fit_verdict.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/memory/parallel.h"
#include "core/memory/phases.h"
#include "core/memory/plan.h"
#include "core/memory/training_setup.h"
#include "core/planner/device_judge.h"
#include "core/planner/fit_request.h"

namespace headroom {
namespace {

// The setup the answer is for, resolved once (plan.h) and read by every
// later step.
struct FitPlan {
  // The request's setup (ProfileSetup's: a conversion that bound
  // setup.positions, an ONNX graph's symbolic lengths, is not rescaled
  // again) with its framework profile applied: `resolved.setup`.
  Plan resolved;
  const v1::TrainingSetup& setup = resolved.setup;
  // Microbatches per step (grad_accum, at least 1).
  uint64_t accum = 1;

  explicit FitPlan(Plan plan)
      : resolved(std::move(plan)), accum(resolved.accum) {}
  // `setup` refers into `resolved`: built in place, never copied.
  FitPlan(const FitPlan&) = delete;
  FitPlan& operator=(const FitPlan&) = delete;

  // `batch` rounded down to a whole number of microbatches.
  uint32_t WholeSteps(uint64_t batch) const {
    return static_cast<uint32_t>(batch / accum * accum);
  }
};

// Under gradient accumulation a batch is grad_accum microbatches: each
// batch must divide (INVALID_ARGUMENT naming it).
absl::Status CheckWholeSteps(
    const google::protobuf::RepeatedField<uint32_t>& batches,
    const FitPlan& plan) {
  for (int i = 0; i < batches.size(); ++i) {
    if (batches[i] % plan.accum != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("batches[", i, "] = ", batches[i],
                       " is not a multiple of setup.grad_accum = ", plan.accum,
                       "; allowed multiples of ", plan.accum));
    }
  }
  return absl::OkStatus();
}

// Records in `profile` the plan's per-GPU collective constant, fitted from
// its strategy's multi-GPU runs (0 while none was measured, said), and adds
// what the setup and its parallel layout assumed to `assumptions`: of the
// setup, what the request (`asked`) left unset.
CollectiveFit AddSetupToProfile(
    const v1::ModelSpec& spec, const v1::TrainingSetup& asked,
    const FitPlan& plan,
    const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>&
        collectives,
    MemoryProfile* profile, std::vector<std::string>* assumptions) {
  for (std::string& assumption :
       SetupAssumptions(spec, asked, plan.setup, profile->states)) {
    assumptions->push_back(std::move(assumption));
  }
  const CollectiveFit collective = CollectiveOf(collectives, plan.setup);
  SetCollective(collective, profile);
  for (std::string& assumption : ProfileAssumptions(*profile)) {
    assumptions->push_back(std::move(assumption));
  }
  for (std::string& assumption : ParallelAssumptions(profile->parallel)) {
    assumptions->push_back(std::move(assumption));
  }
  return collective;
}

// What an answer stands on: the model's own runs when the evidence holds
// any (the anchor), else a prior.
struct AnswerBasis {
  ModelKey key;
  // Null: answered from `prior` alone.
  const Anchor* anchor = nullptr;
  // The factors, k and constant the answer uses: the anchor's, else the
  // compiled runs' for a compiled step when the set has one, else the
  // global one.
  const Prior* prior = nullptr;
  // The anchor's; the identity without one.
  Correction correction;
};

// The anchor step. `key` is the request's model key (without evidence, none
// is needed and it is left empty); its id is set from the anchor's, else
// from the canonical form. A compiled step answered from a prior says which
// in `assumptions`.
AnswerBasis AnchorAnswer(ModelKey key, const Evidence* evidence,
                         bool include_simulated, const v1::TrainingSetup& setup,
                         const Prior& prior, const Prior& compile_prior,
                         std::vector<std::string>* assumptions) {
  AnswerBasis basis;
  if (evidence != nullptr) {
    basis.anchor = evidence->Find(key, prior.source, include_simulated);
    key.id =
        basis.anchor != nullptr ? basis.anchor->key.id : KeyId(key.canonical);
  }
  basis.key = std::move(key);
  const bool compiled_prior =
      setup.compile() && compile_prior.source == v1::TORCH_COMPILE;
  if (setup.compile() && basis.anchor == nullptr) {
    assumptions->push_back(
        compiled_prior
            ? "torch.compile: factors fitted to compiled measurements "
              "(torch-compile)"
            : "torch.compile: no compiled measurements in this factor set "
              "yet; answered with the eager prior (compiled steps usually "
              "save fewer activations)");
  }
  basis.prior = basis.anchor != nullptr ? &basis.anchor->prior
                : compiled_prior        ? &compile_prior
                                        : &prior;
  if (basis.anchor != nullptr) basis.correction = basis.anchor->correction;
  return basis;
}

// The basis every estimate reports.
v1::Basis BasisMessage(const AnswerBasis& basis, bool include_simulated) {
  v1::Basis out;
  out.set_model_key(basis.key.id);
  out.set_source(SourceName(basis.prior->source));
  const Anchor* anchor = basis.anchor;
  if (anchor == nullptr) {
    out.set_kind(v1::Basis::PRIOR);
    out.set_why(absl::StrCat(
        "no measured run of this model and setup (key ", basis.key.id, ")",
        include_simulated ? "" : "; simulated runs are not asked for"));
    return out;
  }
  out.set_kind(v1::Basis::ANCHORED);
  out.set_source(SourceName(anchor->source));
  out.set_runs(static_cast<int>(anchor->group.runs.size()));
  out.set_oom_runs(anchor->oom_runs);
  out.set_min_batch(static_cast<uint32_t>(anchor->min_batch));
  out.set_max_batch(static_cast<uint32_t>(anchor->max_batch));
  for (const std::string& gpu : anchor->gpus) out.add_gpus(gpu);
  out.set_fixed_scale(anchor->correction.fixed_scale);
  out.set_batch_scale(anchor->correction.batch_scale);
  return out;
}

// A batch's size relative to the anchor's largest measured batch.
double Extrapolation(const Anchor& anchor, uint64_t batch) {
  return static_cast<double>(batch) /
         static_cast<double>(std::max<uint64_t>(1, anchor.largest_batch));
}

// The calibrated upper bound: headroom and k at the coverage under the
// answer's prior; an anchored answer takes k from the extrapolation bucket
// of the batch when the evidence calibrated buckets.
struct UpperBound {
  double coverage = 0;
  VerdictRule rule;
  const Anchor* anchor = nullptr;
  // The evidence's calibration; empty without evidence.
  std::vector<v1::ExtrapolationBucket> buckets;

  double KAt(uint64_t batch) const {
    if (anchor == nullptr || buckets.empty()) return rule.k;
    return BucketK(BucketFor(buckets, Extrapolation(*anchor, batch)), coverage);
  }
};

UpperBound BoundOf(const AnswerBasis& basis, double coverage, double headroom,
                   const Evidence* evidence) {
  UpperBound bound;
  bound.coverage = coverage;
  bound.rule = {headroom,
                *KAtCoverage(basis.prior->k90, basis.prior->k95, coverage)};
  bound.anchor = basis.anchor;
  if (evidence != nullptr) bound.buckets = evidence->calibration().buckets;
  return bound;
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

// The answer's head: the model, the factor set and bound it is answered
// under, and what it assumed.
v1::CheckFitResponse ResponseHead(const v1::ModelSpec& spec,
                                  const MemoryProfile& profile,
                                  const v1::FactorSet& factor_set,
                                  const UpperBound& bound, uint64_t first_batch,
                                  std::vector<std::string> assumptions) {
  v1::CheckFitResponse response;
  response.set_model(spec.name());
  response.set_params(profile.params);
  response.set_factor_set_version(factor_set.version());
  response.set_headroom(bound.rule.headroom);
  response.set_coverage(bound.coverage);
  response.set_k(bound.KAt(first_batch));
  for (std::string& assumption : assumptions) {
    response.add_assumptions(std::move(assumption));
  }
  return response;
}

// What the phases other than the step are counted from: the built profile,
// the spec and the setup.
struct PhaseContext {
  const MemoryProfile* profile = nullptr;
  const v1::ModelSpec* spec = nullptr;
  const v1::TrainingSetup* setup = nullptr;
};

// The estimate at each of the request's batches: peak, k and upper bound,
// the factored components of the moment that peaks, and the basis (with the
// batch's extrapolation from an anchor's largest run).
void AddEstimates(const google::protobuf::RepeatedField<uint32_t>& batches,
                  const MemoryProfile& anchored, const ComponentArray& factors,
                  const UpperBound& bound, const v1::Basis& basis,
                  const PhaseContext& phases, v1::CheckFitResponse* response) {
  for (uint64_t batch : batches) {
    Moment moment = Moment::kBackward;
    const ComponentArray bytes = anchored.PeakBytesAt(batch, factors, &moment);
    const double step = PeakGb(bytes, factors);
    // The job's peak: the largest phase's allocator figure.
    double peak = step;
    std::string phase = PhaseName(v1::STEP);
    for (const PhaseBytes& p :
         PhasePeaks(*phases.profile, *phases.spec, *phases.setup, factors,
                    batch, step, /*describe=*/false)) {
      if (p.allocated_gb > peak) {
        peak = p.allocated_gb;
        phase = PhaseName(p.phase);
      }
    }
    v1::BatchEstimate* estimate = response->add_estimates();
    estimate->set_batch(batch);
    estimate->set_peak_gb(peak);
    estimate->set_phase(phase);
    estimate->set_k(bound.KAt(batch));
    estimate->set_upper_gb(peak * estimate->k());
    ComponentArray factored;
    for (int c = 0; c < kNumComponents; ++c) {
      factored[c] = bytes[c] * factors[c];
    }
    SetComponentsGb(factored, estimate->mutable_components());
    estimate->set_moment(MomentName(moment));
    *estimate->mutable_basis() = basis;
    if (bound.anchor != nullptr) {
      estimate->mutable_basis()->set_extrapolation(
          Extrapolation(*bound.anchor, batch));
    }
  }
}

// How one target is judged: the profile and factors its peaks come from and
// the rule its verdicts apply; an anchored answer's k follows the batch's
// bucket.
struct TargetJudge {
  MemoryProfile profile;
  ComponentArray factors;
  VerdictRule rule;
  // Set for an anchored answer.
  const UpperBound* anchored_bound = nullptr;

  double KAt(uint64_t batch) const {
    return anchored_bound != nullptr ? anchored_bound->KAt(batch) : rule.k;
  }
};

// An anchored answer's judge for `target`: the card's constant joins the
// profile; a bare size takes the largest (never a smaller peak than any
// known card would give). Sets the result's regime and constant.
TargetJudge JudgeOnAnchor(const ResolvedTarget& target,
                          const MemoryProfile& profile,
                          const AnswerBasis& basis, double constant_gb,
                          const UpperBound& bound,
                          const GpuConstants& constants,
                          v1::TargetResult* result) {
  double card_constant = 0;
  if (target.is_gpu) {
    auto it = constants.find(target.name);
    if (it != constants.end()) card_constant = it->second;
  } else {
    for (const auto& [gpu, gb] : constants) {
      card_constant = std::max(card_constant, gb);
    }
  }
  result->set_regime("anchored");
  result->set_gpu_constant_gb(card_constant);
  const ComponentArray& factors = basis.prior->factors;
  return TargetJudge{AnchoredProfile(profile, basis.correction, factors,
                                     constant_gb, card_constant),
                     factors, bound.rule, &bound};
}

// A prior answer's judge for `target`: a catalog GPU with an adopted regime
// of the global prior takes the regime's factors and k. Sets the result's
// regime.
TargetJudge JudgeOnPrior(
    const ResolvedTarget& target, const MemoryProfile& anchored,
    const AnswerBasis& basis, const UpperBound& bound,
    const std::map<std::string, const v1::Regime*>& regimes,
    v1::TargetResult* result) {
  TargetJudge judge{anchored, basis.prior->factors, bound.rule};
  const bool global_prior = basis.prior->source == v1::REFERENCE;
  auto regime =
      target.is_gpu && global_prior ? regimes.find(target.name) : regimes.end();
  if (regime == regimes.end()) {
    result->set_regime("global");
    return judge;
  }
  judge.factors = FactorArray(regime->second->factors());
  // The coverage was checked, so the regime has a k for it.
  judge.rule.k =
      KAtCoverage(regime->second->k90(), regime->second->k95(), bound.coverage)
          .value_or(bound.rule.k);
  result->set_regime(regime->second->gpu());
  return judge;
}

// The target's name, size and k, and its peak and verdict at each of the
// request's batches.
void AddVerdicts(const TargetJudge& judge, const DeviceJudge& device,
                 const ResolvedTarget& target,
                 const google::protobuf::RepeatedField<uint32_t>& batches,
                 v1::TargetResult* result) {
  result->set_name(target.name);
  result->set_memory_gb(target.memory_gb);
  result->set_k(judge.KAt(batches[0]));
  device.costs.ToProto(result->mutable_device());
  for (uint64_t batch : batches) {
    result->add_peaks_gb(PeakAt(judge.profile, judge.factors, batch));
    BatchJudgement judged = JudgeBatch(device, batch);
    result->add_verdicts(ToApiVerdict(judged.verdict));
    *result->add_batches() = std::move(judged.batch);
  }
}

// The device side of a target's judge: the card's device costs (the
// model's own runs correct them when the answer is anchored) and, for a
// prior answer, the kind of setup's bound. `judge` must outlive it.
DeviceJudge DeviceJudgeFor(const TargetJudge& judge,
                           const ResolvedTarget& target,
                           const AnswerBasis& basis, const Evidence* evidence,
                           const v1::FactorSet& set,
                           const std::optional<v1::SetupKindBound>& kind,
                           const PhaseContext& phases) {
  DeviceJudge device;
  device.step_profile = &judge.profile;
  device.factors = judge.factors;
  device.profile = phases.profile;
  device.spec = phases.spec;
  device.setup = phases.setup;
  device.card_gb = target.memory_gb;
  device.headroom = judge.rule.headroom;
  device.k_at = [&judge](uint64_t batch) { return judge.KAt(batch); };
  const std::string gpu = target.is_gpu ? target.name : "";
  const v1::MeasurementSource source =
      basis.anchor != nullptr ? basis.anchor->source : basis.prior->source;
  device.costs = DeviceCostsFor(set.device_costs(), SourceName(source), gpu,
                                *phases.setup);
  if (basis.anchor != nullptr && evidence != nullptr) {
    std::vector<const v1::MeasuredRun*> runs;
    for (size_t i : basis.anchor->group.runs) {
      runs.push_back(&evidence->run(i));
    }
    AnchorDeviceCosts(runs, gpu, &device.costs);
  } else if (kind.has_value()) {
    device.kind = kind;
    device.untested = kind->untested();
  }
  return device;
}

// The largest batches (whole steps) that fit and that do not fail on the
// target.
void AddMaxBatches(const TargetJudge& judge, const DeviceJudge& device,
                   const ResolvedTarget& target, const FitPlan& plan,
                   v1::TargetResult* result) {
  for (bool fits_only : {true, false}) {
    // The step's answer bounds the job's (no phase is below the step, no
    // device figure below the allocator's), then every phase decides.
    uint64_t max = 0;
    if (judge.anchored_bound != nullptr) {
      const UpperBound& bound = *judge.anchored_bound;
      max = AnchoredMaxBatch(judge.profile, judge.factors, target.memory_gb,
                             judge.rule.headroom, bound.buckets, bound.coverage,
                             std::max<uint64_t>(1, bound.anchor->largest_batch),
                             fits_only);
    } else {
      max = StepMaxBatchOnDevice(device, fits_only);
    }
    max = DeviceMaxBatch(device, max, fits_only);
    if (fits_only) {
      result->set_max_batch_fits(plan.WholeSteps(max));
    } else {
      result->set_max_batch_not_does_not_fit(plan.WholeSteps(max));
    }
  }
}

// The setup's per-GPU profiles at other GPU counts and strategies, each
// (strategy, N) built once: the two solves, their verification and the
// breakdown ask for the same counts, and every target asks for the same
// profiles. Each is anchored like the answer, with its own collective
// constant.
class StrategyProfiles {
 public:
  StrategyProfiles(
      const v1::ModelSpec& spec, const v1::TrainingSetup& setup,
      const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>&
          collectives,
      const Correction& correction, const ComponentArray& factors,
      double constant_gb)
      : spec_(spec),
        setup_(setup),
        collectives_(collectives),
        correction_(correction),
        factors_(factors),
        constant_gb_(constant_gb) {}

  // The setup on `n` GPUs under `strategy` (nodes derived).
  v1::TrainingSetup SetupAt(v1::TrainingSetup::Parallel strategy,
                            uint32_t n) const {
    v1::TrainingSetup at = setup_;
    at.set_gpus(n);
    at.set_nodes(0);
    at.set_parallel(strategy);
    return at;
  }

  // The profile at (strategy, n); for an unusable combination an empty
  // profile, with the first such error kept in `failed`.
  MemoryProfile At(v1::TrainingSetup::Parallel strategy, uint32_t n,
                   absl::Status* failed) {
    auto [it, inserted] = built_.try_emplace({strategy, n}, MemoryProfile());
    if (inserted) {
      const v1::TrainingSetup at = SetupAt(strategy, n);
      it->second = BuildProfile(spec_, at);
      if (it->second.ok()) {
        const CollectiveFit collective = CollectiveOf(collectives_, at);
        SetCollective(collective, &*it->second);
        it->second = AnchoredProfile(*it->second, correction_, factors_,
                                     constant_gb_ + collective.constant_gb, 0);
      }
    }
    if (!it->second.ok()) {
      if (failed->ok()) *failed = it->second.status();
      return MemoryProfile();
    }
    return *it->second;
  }

 private:
  const v1::ModelSpec& spec_;
  const v1::TrainingSetup& setup_;
  const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>&
      collectives_;
  const Correction correction_;
  const ComponentArray factors_;
  const double constant_gb_;
  std::map<std::pair<int, uint32_t>, absl::StatusOr<MemoryProfile>> built_;
};

// The breakdown of the moment that peaks at `batch`: at backward start the
// states, gathered units, buffers and activations; at the update the states
// and buckets. The optimizer component's rest (a prior's constant) counts
// with the states.
void SetBreakdown(const MemoryProfile& p, const ComponentArray& factors,
                  uint64_t batch, v1::MinGpusStrategy* row) {
  Moment moment = Moment::kBackward;
  const ComponentArray bytes = p.PeakBytesAt(batch, factors, &moment);
  const double f = factors[kOptimizer] / 1e9;
  const bool backward = moment == Moment::kBackward;
  const double gathered = backward ? p.parallel.gathered_units : 0;
  const double buffers =
      p.parallel.buckets + (backward ? p.parallel.reduce_scatter : 0);
  // The collective constant rides in the optimizer component too; it is
  // its own column.
  row->set_sharded_states_gb(std::max(
      0.0,
      (bytes[kOptimizer] - gathered - buffers) * f - p.parallel.collective_gb));
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
}

// One strategy's row for `target`: the fewest GPUs (in steps of `step`) that
// fit and that do not fail at `batch`, and at the first of those that is
// not 0 its nodes, peak and breakdown. False when the strategy cannot run
// the setup (offload with DDP, ...): no row for it.
// The device side of the fewest-GPUs answer: the device costs and the
// kind's k at each count and strategy (one GPU and several are different
// kinds, and NCCL's cost is the strategy's).
struct MinGpusDevice {
  const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>* fits = nullptr;
  const google::protobuf::RepeatedPtrField<v1::SetupKindBound>* kinds = nullptr;
  std::string source;
  // An anchored answer stands on its own k (no kind's).
  bool anchored = false;

  DeviceCosts CostsAt(const ResolvedTarget& target,
                      const v1::TrainingSetup& setup) const {
    return DeviceCostsFor(*fits, source, target.is_gpu ? target.name : "",
                          setup);
  }
  // k of the device figure, and whether the kind is untested.
  std::pair<double, bool> KAt(const v1::TrainingSetup& setup, double k) const {
    if (anchored) return {k, false};
    const std::optional<v1::SetupKindBound> kind = BoundForSetup(*kinds, setup);
    if (!kind.has_value()) return {k, false};
    return {std::max(k, KOf(*kind, v1::DEVICE)), kind->untested()};
  }
};

bool AnswerStrategy(StrategyProfiles& profiles,
                    v1::TrainingSetup::Parallel strategy,
                    const ResolvedTarget& target, const ComponentArray& factors,
                    const VerdictRule& rule, const MinGpusDevice& device,
                    uint64_t batch, uint32_t step, v1::MinGpusStrategy* row) {
  absl::Status failed = absl::OkStatus();
  // The device figure of the step at n GPUs, and its upper bound.
  const auto figures = [&](uint32_t n) {
    const v1::TrainingSetup at = profiles.SetupAt(strategy, n);
    const double device_gb =
        device.CostsAt(target, at)
            .DeviceGb(
                PeakAt(profiles.At(strategy, n, &failed), factors, batch));
    const auto [k, untested] = device.KAt(at, rule.k);
    return std::make_tuple(device_gb, device_gb * k, untested);
  };
  const auto verdict = [&](uint32_t n) {
    const auto [device_gb, upper_gb, untested] = figures(n);
    if (device_gb > target.memory_gb) return FitVerdict::kDoesNotFit;
    if (!untested && upper_gb * rule.headroom <= target.memory_gb) {
      return FitVerdict::kFits;
    }
    return FitVerdict::kBorderline;
  };
  row->set_strategy(StrategyName(strategy));
  const uint32_t fits =
      SolveMinGpus([&](uint32_t n) { return std::get<1>(figures(n)); },
                   [&](uint32_t n) { return verdict(n) == FitVerdict::kFits; },
                   target.memory_gb / rule.headroom, step, step);
  const uint32_t not_dnf = SolveMinGpus(
      [&](uint32_t n) { return std::get<0>(figures(n)); },
      [&](uint32_t n) { return verdict(n) != FitVerdict::kDoesNotFit; },
      target.memory_gb, step, step);
  if (!failed.ok()) return false;
  row->set_gpus_fits(fits);
  row->set_gpus_not_does_not_fit(not_dnf);
  const uint32_t at = fits != 0 ? fits : not_dnf;
  if (at == 0) return true;
  const MemoryProfile p = profiles.At(strategy, at, &failed);
  row->set_gpus(at);
  row->set_nodes(LayoutOf(profiles.SetupAt(strategy, at)).nodes);
  row->set_peak_gb(PeakAt(p, factors, batch));
  row->set_upper_gb(row->peak_gb() * rule.k);
  const auto [device_gb, device_upper_gb, untested] = figures(at);
  row->set_device_gb(device_gb);
  row->set_device_upper_gb(device_upper_gb);
  SetBreakdown(p, factors, batch, row);
  return true;
}

// For each target, the fewest GPUs per strategy (the setup's, else every
// one) at `batch`, and the cheapest strategy that fits: fewest GPUs, then
// lowest peak.
void AnswerMinGpus(
    const v1::ModelSpec& spec, const v1::TrainingSetup& setup, uint64_t batch,
    const std::vector<ResolvedTarget>& targets, const ComponentArray& factors,
    const VerdictRule& rule, double constant_gb,
    const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>&
        collectives,
    const Correction& correction, const MinGpusDevice& device,
    v1::CheckFitResponse* response) {
  std::vector<v1::TrainingSetup::Parallel> strategies;
  if (setup.parallel() != v1::TrainingSetup::PARALLEL_UNSPECIFIED) {
    strategies.push_back(setup.parallel());
  } else {
    strategies = AllStrategies();
  }
  const uint32_t step = std::max<uint32_t>(1, setup.tensor_parallel());
  StrategyProfiles profiles(spec, setup, collectives, correction, factors,
                            constant_gb);
  for (const ResolvedTarget& target : targets) {
    v1::MinGpusTarget* out = response->add_min_gpus();
    out->set_target(target.name);
    out->set_memory_gb(target.memory_gb);
    const v1::MinGpusStrategy* cheapest = nullptr;
    for (v1::TrainingSetup::Parallel strategy : strategies) {
      v1::MinGpusStrategy* row = out->add_strategies();
      if (!AnswerStrategy(profiles, strategy, target, factors, rule, device,
                          batch, step, row)) {
        out->mutable_strategies()->RemoveLast();
        continue;
      }
      const uint32_t fits = row->gpus_fits();
      if (fits != 0 && (cheapest == nullptr || fits < cheapest->gpus_fits() ||
                        (fits == cheapest->gpus_fits() &&
                         row->peak_gb() < cheapest->peak_gb()))) {
        cheapest = row;
      }
    }
    if (cheapest != nullptr) out->set_cheapest(cheapest->strategy());
  }
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
  if (request.has_job()) {  // the job's files, as CheckFit reads them
    ASSIGN_OR_RETURN(const JobRequest job, RequestFromJob(request, *catalog_));
    return KeyOf(job.request);
  }
  ASSIGN_OR_RETURN(
      ResolvedModel model,
      ResolveModelRef(request.model(), request.setup(), *catalog_));
  return KeyFor(model, ProfileSetup(request.model(), request.setup()));
}

absl::StatusOr<v1::CheckFitResponse> FitPlanner::CheckFit(
    const v1::CheckFitRequest& request, const Evidence* evidence) const {
  if (request.has_job()) {  // the job's files (core/jobs/job_files.h)
    return AnswerJobRequest(request, *catalog_, [&](const auto& plain) {
      return CheckFit(plain, evidence);
    });
  }
  // The model, the request's batches, targets and coverage, the plan.
  ASSIGN_OR_RETURN(
      ResolvedModel model,
      ResolveModelRef(request.model(), request.setup(), *catalog_));
  std::vector<std::string>& assumptions = model.assumptions;
  RETURN_IF_ERROR(CheckBatches(request.batches(), kMaxBatchesPerRequest));
  ASSIGN_OR_RETURN(const std::vector<ResolvedTarget> targets,
                   ResolveTargets(request));
  ASSIGN_OR_RETURN(const double coverage,
                   CoverageOf(request, default_coverage_));
  ASSIGN_OR_RETURN(Plan resolved,
                   ResolvePlan(model.spec(),
                               ProfileSetup(request.model(), request.setup())));
  const FitPlan plan(std::move(resolved));

  // The profile.
  ASSIGN_OR_RETURN(MemoryProfile profile,
                   BuildProfile(model.spec(), plan.resolved));
  RETURN_IF_ERROR(CheckWholeSteps(request.batches(), plan));
  const CollectiveFit collective =
      AddSetupToProfile(model.spec(), request.setup(), plan,
                        factor_set_.collectives(), &profile, &assumptions);

  // The anchor (the model's own runs, else a prior) and the bound.
  const AnswerBasis basis = AnchorAnswer(
      evidence == nullptr ? ModelKey{}
                          : KeyFor(model, plan.setup, /*with_id=*/false),
      evidence, request.include_simulated(), plan.setup, prior_, compile_prior_,
      &assumptions);
  const UpperBound bound =
      BoundOf(basis, coverage, factor_set_.headroom(), evidence);
  const ComponentArray& factors = basis.prior->factors;
  const double constant_gb = basis.prior->constant_gb + collective.constant_gb;
  const MemoryProfile anchored =
      AnchoredProfile(profile, basis.correction, factors, constant_gb, 0);

  // The estimates, then each target's verdicts and largest batches on the
  // device figure of the job's largest phase, under its kind's bound.
  v1::CheckFitResponse response =
      ResponseHead(model.spec(), profile, factor_set_, bound,
                   request.batches(0), std::move(assumptions));
  const std::optional<v1::SetupKindBound> kind =
      BoundForSetup(factor_set_.kind_bounds(), plan.setup);
  if (kind.has_value()) *response.mutable_bound() = *kind;
  response.set_framework(plan.resolved.profile.label);
  for (const std::string& line : plan.resolved.lines) {
    response.add_plan(line);
  }
  const PhaseContext phases{&profile, &model.spec(), &plan.setup};
  AddEstimates(request.batches(), anchored, factors, bound,
               BasisMessage(basis, request.include_simulated()), phases,
               &response);
  for (const ResolvedTarget& target : targets) {
    v1::TargetResult* result = response.add_targets();
    const TargetJudge judge =
        basis.anchor != nullptr
            ? JudgeOnAnchor(target, profile, basis, constant_gb, bound,
                            evidence->calibration().gpu_constant_gb, result)
            : JudgeOnPrior(target, anchored, basis, bound, regimes_, result);
    const DeviceJudge device = DeviceJudgeFor(judge, target, basis, evidence,
                                              factor_set_, kind, phases);
    AddVerdicts(judge, device, target, request.batches(), result);
    AddMaxBatches(judge, device, target, plan, result);
  }

  // The fewest GPUs per strategy, when asked.
  if (request.min_gpus()) {
    AnswerMinGpus(
        model.spec(), plan.setup, request.batches(0), targets, factors,
        bound.rule, basis.prior->constant_gb, factor_set_.collectives(),
        basis.correction,
        MinGpusDevice{&factor_set_.device_costs(), &factor_set_.kind_bounds(),
                      SourceName(basis.anchor != nullptr ? basis.anchor->source
                                                         : basis.prior->source),
                      basis.anchor != nullptr},
        &response);
  }
  return response;
}

}  // namespace headroom
