#include "core/microbatch/plan.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/microbatch/select.h"

namespace headroom {
namespace {

struct Card {
  std::string name;
  double memory_gb;
};

absl::StatusOr<Card> ResolveCard(const v1::PlanMicrobatchRequest& request) {
  switch (request.target_case()) {
    case v1::PlanMicrobatchRequest::kGpu: {
      ASSIGN_OR_RETURN(GpuInfo gpu, FindGpu(request.gpu()));
      return Card{gpu.name, gpu.memory_gb};
    }
    case v1::PlanMicrobatchRequest::kMemoryGb: {
      const double gb = request.memory_gb();
      RETURN_IF_ERROR(CheckCardGb(gb, "memory_gb"));
      return Card{absl::StrCat(gb, " GB"), gb};
    }
    case v1::PlanMicrobatchRequest::TARGET_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "target is empty; set gpu (a catalog name) or memory_gb");
}

// The candidates ascending, each checked against the global batch.
absl::StatusOr<std::vector<uint32_t>> Candidates(
    const v1::PlanMicrobatchRequest& request) {
  if (request.global_batch() == 0 || request.global_batch() > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("global_batch = ", request.global_batch(),
                     " is out of range; allowed 1..", kMaxBatch));
  }
  const int n = request.microbatch_candidates_size();
  if (n == 0 || n > kMaxMicrobatchCandidates) {
    return absl::InvalidArgumentError(absl::StrCat("microbatch_candidates has ",
                                                   n, " entries; allowed 1..",
                                                   kMaxMicrobatchCandidates));
  }
  std::vector<uint32_t> candidates;
  for (int i = 0; i < n; ++i) {
    const uint32_t microbatch = request.microbatch_candidates(i);
    if (microbatch == 0 || microbatch > request.global_batch()) {
      return absl::InvalidArgumentError(
          absl::StrCat("microbatch_candidates[", i, "] = ", microbatch,
                       " is out of range; allowed 1..global_batch (",
                       request.global_batch(), ")"));
    }
    if (std::find(candidates.begin(), candidates.end(), microbatch) !=
        candidates.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("microbatch_candidates[", i, "] = ", microbatch,
                       " repeats; allowed distinct microbatches"));
    }
    candidates.push_back(microbatch);
  }
  std::sort(candidates.begin(), candidates.end());
  return candidates;
}

// Sets action and reason from the verdict; see PlanMicrobatch in plan.h.
void Decide(FitVerdict verdict, bool compiled, double budget_gb,
            const VerdictRule& rule, v1::PlannedMicrobatch* planned) {
  const double margin_gb = planned->upper_gb() * rule.headroom;
  switch (verdict) {
    case FitVerdict::kFits:
      planned->set_action(v1::PlannedMicrobatch::SKIP);
      planned->set_reason(absl::StrCat("predicted fit: upper bound x headroom ",
                                       margin_gb, " GB <= budget ", budget_gb,
                                       " GB"));
      return;
    case FitVerdict::kBorderline:
      planned->set_action(v1::PlannedMicrobatch::MEASURE);
      planned->set_reason(absl::StrCat(
          "near the edge: peak ", planned->peak_gb(), " GB <= budget ",
          budget_gb, " GB < upper bound x headroom ", margin_gb, " GB"));
      return;
    case FitVerdict::kDoesNotFit:
      if (compiled) {
        planned->set_action(v1::PlannedMicrobatch::MEASURE);
        planned->set_reason(absl::StrCat(
            "eager peak ", planned->peak_gb(), " GB > budget ", budget_gb,
            " GB, but compilation can lower the peak below the budget"));
      } else {
        planned->set_action(v1::PlannedMicrobatch::SKIP);
        planned->set_reason(absl::StrCat("predicted OOM: peak ",
                                         planned->peak_gb(), " GB > budget ",
                                         budget_gb, " GB"));
      }
      return;
  }
}

}  // namespace

absl::StatusOr<v1::TrainingSetup> MicrobatchSetup(
    const v1::PlanMicrobatchRequest& request) {
  v1::TrainingSetup setup = request.setup();
  if (request.context() != 0) setup.set_positions(request.context());
  const std::string& backend = request.attention_backend();
  // FlashAttention and SDPA keep the same tensors; SDPA also runs in fp32.
  if (backend == "flash" || backend == "sdpa") {
    setup.set_attention(v1::TrainingSetup::SDPA);
  } else if (backend == "eager") {
    setup.set_attention(v1::TrainingSetup::EAGER);
  } else if (!backend.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention_backend = '", backend.substr(0, 64),
                     "' is unknown; allowed '' (keep setup.attention), "
                     "flash, sdpa, eager"));
  }
  if (!backend.empty()) setup.clear_fused_attention();
  return setup;
}

absl::StatusOr<v1::PlanMicrobatchResponse> PlanMicrobatch(
    const v1::PlanMicrobatchRequest& request, const PeakFunction& peak_gb,
    const VerdictRule& rule) {
  if (!(rule.k > 0 && rule.headroom > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "factor set k95 = ", rule.k, " and headroom = ", rule.headroom,
        " must both be positive"));
  }
  ASSIGN_OR_RETURN(std::vector<uint32_t> candidates, Candidates(request));
  RETURN_IF_ERROR(MicrobatchSetup(request).status());
  const double fraction = request.vram_fraction();
  if (!(fraction > 0 && fraction <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vram_fraction = ", fraction, " is out of range; allowed (0, 1]"));
  }
  const double reserve_gb = request.reserve_gb();
  if (!(std::isfinite(reserve_gb) && reserve_gb >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reserve_gb = ", reserve_gb, " is out of range; allowed >= 0"));
  }
  ASSIGN_OR_RETURN(Card card, ResolveCard(request));
  const double budget_gb = fraction * card.memory_gb - reserve_gb;
  if (budget_gb <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reserve_gb = ", reserve_gb, " leaves no budget; allowed below ",
        "vram_fraction * memory_gb = ", fraction * card.memory_gb, " GB"));
  }

  v1::PlanMicrobatchResponse response;
  response.set_k(rule.k);
  response.set_headroom(rule.headroom);
  response.set_gpu(card.name);
  response.set_memory_gb(card.memory_gb);
  response.set_budget_gb(budget_gb);
  std::vector<double> peaks;
  peaks.reserve(candidates.size());
  for (uint32_t microbatch : candidates) peaks.push_back(peak_gb(microbatch));
  std::vector<bool> compiled_modes = {false};
  if (request.compile_model()) compiled_modes.push_back(true);
  for (bool compiled : compiled_modes) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      const uint32_t microbatch = candidates[i];
      v1::PlannedMicrobatch* planned = response.add_candidates();
      planned->set_microbatch(microbatch);
      planned->set_mode(std::string(compiled ? kCompiledMode : kEagerMode));
      planned->set_peak_gb(peaks[i]);
      planned->set_upper_gb(peaks[i] * rule.k);
      const FitVerdict verdict = Verdict(peaks[i], budget_gb, rule);
      planned->set_verdict(ToApiVerdict(verdict));
      planned->set_microbatches_per_update(
          (request.global_batch() + microbatch - 1) / microbatch);
      Decide(verdict, compiled, budget_gb, rule, planned);
      // The margin a selection without a measurement keeps: the largest
      // eager predicted fit and how far its upper bound stays below budget.
      if (!compiled && verdict == FitVerdict::kFits) {
        *response.mutable_largest_predicted_fit() = *planned;
        response.set_margin_gb(budget_gb - planned->upper_gb());
      }
      if (planned->action() == v1::PlannedMicrobatch::MEASURE) {
        response.set_measure_count(response.measure_count() + 1);
      } else {
        response.set_skip_count(response.skip_count() + 1);
      }
    }
  }
  return response;
}

absl::StatusOr<v1::PlanMicrobatchResponse> PlanMicrobatch(
    const v1::PlanMicrobatchRequest& request, const ModelCatalog& catalog,
    const v1::FactorSet& factor_set) {
  const v1::ModelSpec* spec = nullptr;
  switch (request.model_case()) {
    case v1::PlanMicrobatchRequest::kTemplate: {
      ASSIGN_OR_RETURN(spec, catalog.Find(request.template_()));
      break;
    }
    case v1::PlanMicrobatchRequest::kSpec: {
      RETURN_IF_ERROR(ValidateSpec(request.spec()));
      spec = &request.spec();
      break;
    }
    case v1::PlanMicrobatchRequest::MODEL_NOT_SET:
      return absl::InvalidArgumentError(
          "model is empty; set template (a catalog name) or spec");
  }
  ASSIGN_OR_RETURN(v1::TrainingSetup setup, MicrobatchSetup(request));
  ASSIGN_OR_RETURN(MemoryProfile profile, BuildProfile(*spec, setup));
  const ComponentArray factors = FactorArray(factor_set.factors());
  const PeakFunction peak_gb = [&profile, &factors](uint64_t microbatch) {
    return PeakAt(profile, factors, microbatch);
  };
  const VerdictRule rule{factor_set.headroom(), factor_set.k95()};
  ASSIGN_OR_RETURN(v1::PlanMicrobatchResponse response,
                   PlanMicrobatch(request, peak_gb, rule));
  response.set_model(spec->name());
  response.set_params(profile.params);
  response.set_factor_set_version(factor_set.version());
  return response;
}

}  // namespace headroom
