#include "server/core/planner/fit_planner.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/catalog/gpu_catalog.h"
#include "server/core/common/status_macros.h"
#include "server/core/frontends/hf_config.h"
#include "server/core/frontends/onnx_import.h"
#include "server/core/memory/fit_verdict.h"
#include "server/core/memory/memory_profile.h"
#include "server/core/memory/model_spec.h"

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

absl::StatusOr<ResolvedModel> ResolveModelRef(const v1::ModelRef& model,
                                              const v1::TrainingSetup& setup,
                                              const ModelCatalog& catalog) {
  ResolvedModel resolved;
  switch (model.source_case()) {
    case v1::ModelRef::kTemplate: {
      ASSIGN_OR_RETURN(const v1::ModelSpec* spec,
                       catalog.Find(model.template_()));
      resolved.catalog_spec = spec;
      resolved.template_name = spec->name();
      return resolved;
    }
    case v1::ModelRef::kSpec:
      RETURN_IF_ERROR(ValidateSpec(model.spec()));
      resolved.owned_spec = model.spec();
      return resolved;
    case v1::ModelRef::kHfConfig: {
      HfOptions options;
      options.seq_len = setup.positions();
      absl::StatusOr<HfConversion> converted =
          SpecFromHfConfig(model.hf_config(), options);
      if (!converted.ok()) {
        return absl::Status(
            converted.status().code(),
            absl::StrCat("model.hf_config: ", converted.status().message()));
      }
      resolved.owned_spec = std::move(converted->spec);
      resolved.assumptions = std::move(converted->assumed_defaults);
      return resolved;
    }
    case v1::ModelRef::kOnnx: {
      OnnxOptions options;
      options.positions = setup.positions();
      absl::StatusOr<OnnxConversion> converted =
          SpecFromOnnx(model.onnx(), options);
      if (!converted.ok()) {
        return absl::Status(
            converted.status().code(),
            absl::StrCat("model.onnx: ", converted.status().message()));
      }
      resolved.owned_spec = std::move(converted->spec);
      resolved.assumptions = std::move(converted->notes);
      return resolved;
    }
    case v1::ModelRef::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "model is empty; set model.template (a catalog name), model.spec, "
      "model.hf_config or model.onnx");
}

absl::StatusOr<v1::CheckFitResponse> FitPlanner::CheckFit(
    const v1::CheckFitRequest& request) const {
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
  const std::optional<double> calibrated_k =
      KAtCoverage(factor_set_.k90(), factor_set_.k95(), coverage);
  if (!calibrated_k.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "coverage = ", request.coverage(),
        " is not calibrated; allowed 0 (server default), 0.9, 0.95"));
  }
  const double k = *calibrated_k;

  // An ONNX graph's lengths are resolved by its conversion (setup.positions
  // bound its symbolic dimensions); they are not rescaled again.
  v1::TrainingSetup setup = request.setup();
  if (request.model().source_case() == v1::ModelRef::kOnnx) {
    setup.clear_positions();
  }
  ASSIGN_OR_RETURN(MemoryProfile profile, BuildProfile(*spec, setup));
  const ComponentArray factors = FactorArray(factor_set_.factors());
  const VerdictRule rule{factor_set_.headroom(), k};

  v1::CheckFitResponse response;
  response.set_model(spec->name());
  response.set_params(profile.params);
  response.set_factor_set_version(factor_set_.version());
  response.set_headroom(rule.headroom);
  response.set_coverage(coverage);
  response.set_k(k);
  for (std::string& assumption : assumptions) {
    response.add_assumptions(std::move(assumption));
  }
  std::vector<double> peaks;
  peaks.reserve(request.batches_size());
  for (uint64_t batch : request.batches()) {
    Moment moment = Moment::kBackward;
    const ComponentArray bytes = profile.PeakBytesAt(batch, factors, &moment);
    const double peak = PeakGb(bytes, factors);
    peaks.push_back(peak);
    v1::BatchEstimate* estimate = response.add_estimates();
    estimate->set_batch(batch);
    estimate->set_peak_gb(peak);
    estimate->set_upper_gb(peak * k);
    ComponentArray factored;
    for (int c = 0; c < kNumComponents; ++c) {
      factored[c] = bytes[c] * factors[c];
    }
    SetComponentsGb(factored, estimate->mutable_components());
    estimate->set_moment(MomentName(moment));
  }
  for (const ResolvedTarget& target : targets) {
    v1::TargetResult* result = response.add_targets();
    result->set_name(target.name);
    result->set_memory_gb(target.memory_gb);
    auto regime = target.is_gpu ? regimes_.find(target.name) : regimes_.end();
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
              : PeakAt(profile, target_factors, request.batches(i));
      result->add_peaks_gb(peak);
      result->add_verdicts(
          ToApiVerdict(Verdict(peak, target.memory_gb, target_rule)));
    }
    result->set_max_batch_fits(MaxBatch(profile, target_factors,
                                        target.memory_gb, target_rule,
                                        /*fits_only=*/true));
    result->set_max_batch_not_does_not_fit(
        MaxBatch(profile, target_factors, target.memory_gb, target_rule,
                 /*fits_only=*/false));
  }
  return response;
}

}  // namespace headroom
