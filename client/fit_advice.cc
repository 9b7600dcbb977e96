#include "client/fit_advice.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/catalog/gpu_catalog.h"

namespace headroom::cli {
namespace {

using v1::TrainingSetup;

bool NotFits(const v1::TargetResult& t, int i) {
  return i < t.verdicts_size() && t.verdicts(i) != v1::FITS;
}

// The card's name as the answer printed it ("L4", "16 GB").
const std::string& CardName(const v1::TargetResult& t) { return t.name(); }

// Batch i's device upper bound on `t` (the estimates' upper bound from a
// planner without the device figures).
double UpperGb(const v1::CheckFitResponse& r, const v1::TargetResult& t,
               int i) {
  if (i < t.batches_size() && t.batches(i).figures().device_upper_gb() > 0) {
    return t.batches(i).figures().device_upper_gb();
  }
  return i < r.estimates_size() ? r.estimates(i).upper_gb() : 0;
}

bool CheckpointingOff(const TrainingSetup& s) {
  if (s.checkpointing() == TrainingSetup::NO_CHECKPOINTING) return true;
  return s.checkpointing() == TrainingSetup::CHECKPOINTING_UNSPECIFIED &&
         !s.activation_checkpointing();
}

bool FullFineTuning(const TrainingSetup& s) {
  return s.lora().rank() == 0 &&
         s.quant_base() == TrainingSetup::BASE_QUANT_UNSPECIFIED &&
         s.freeze().layers().empty() && s.freeze().train_last_blocks() == 0;
}

// The smallest catalog card(s) holding `need_gb`, e.g. "A100-80GB, H100
// (80 GB)", or empty when none does.
std::string SmallestCardHolding(double need_gb) {
  double best = 0;
  for (const GpuInfo& gpu : GpuCatalog()) {
    if (gpu.memory_gb >= need_gb && (best == 0 || gpu.memory_gb < best)) {
      best = gpu.memory_gb;
    }
  }
  if (best == 0) return "";
  std::vector<std::string> names;
  for (const GpuInfo& gpu : GpuCatalog()) {
    if (gpu.memory_gb == best) names.push_back(gpu.name);
  }
  return absl::StrCat(absl::StrJoin(names, ", "), " (",
                      absl::StrFormat("%g", best), " GB)");
}

// "--grad_accum 4 (4 microbatches of 128)" for `batch` on a card whose
// largest FITS batch is `fits`: the smallest A dividing the batch (the
// planner requires whole microbatches) with batch / A <= fits.
std::string GradAccum(uint32_t batch, uint64_t fits) {
  for (uint32_t a = std::max<uint64_t>(2, (batch + fits - 1) / fits);
       a <= batch; ++a) {
    if (batch % a == 0) {
      return absl::StrCat("--grad_accum ", a, " (", a, " microbatches of ",
                          batch / a, ")");
    }
  }
  return "";
}

}  // namespace

std::vector<std::string> NextSteps(const v1::CheckFitRequest& request,
                                   const v1::CheckFitResponse& response) {
  std::vector<std::string> steps;
  // The largest not-FITS batch's requirement over every card.
  double need_gb = 0;
  uint32_t need_batch = 0;
  double need_upper = 0;
  for (const v1::TargetResult& t : response.targets()) {
    for (int i = 0; i < t.verdicts_size(); ++i) {
      if (!NotFits(t, i)) continue;
      const double upper = UpperGb(response, t, i);
      if (upper * response.headroom() > need_gb) {
        need_gb = upper * response.headroom();
        need_upper = upper;
        need_batch =
            i < response.estimates_size() ? response.estimates(i).batch() : 0;
      }
    }
  }
  if (need_gb == 0) return steps;
  // With --job, the setup is what the file says, the flags over it.
  TrainingSetup setup = request.setup();
  if (response.has_job()) setup.MergeFrom(response.job().setup());
  if (setup.gpus() <= 1 && !request.min_gpus()) {
    steps.push_back(
        "--gpus auto: the smallest GPU count per parallel strategy (DDP, "
        "FSDP, ZeRO) on each card");
  }
  if (CheckpointingOff(setup)) {
    steps.push_back(
        "--checkpointing: recompute activations in backward instead of "
        "keeping them (the outputs, attention and internal columns)");
  }
  if (FullFineTuning(setup)) {
    steps.push_back(
        "--lora_rank 16 (LoRA: gradients and optimizer state for the "
        "adapters only), or with --quant_base nf4 too (QLoRA: the frozen "
        "weights in 4 bits)");
  }
  const std::string card = SmallestCardHolding(need_gb);
  const std::string arithmetic =
      absl::StrFormat("%.2f GB (device upper %.2f GB x headroom %.2f)", need_gb,
                      need_upper, response.headroom());
  if (!card.empty()) {
    steps.push_back(
        absl::StrCat("a larger card: batch ", need_batch, " needs ", arithmetic,
                     "; the smallest catalog card that holds it: ", card,
                     " (headroom gpus)"));
  } else {
    steps.push_back(absl::StrCat("no catalog card holds batch ", need_batch,
                                 " on one GPU: it needs ", arithmetic));
  }
  for (const v1::TargetResult& t : response.targets()) {
    const uint64_t fits = t.max_batch_fits();
    if (fits == 0) continue;
    for (int i = t.verdicts_size() - 1; i >= 0; --i) {
      if (!NotFits(t, i) || i >= response.estimates_size()) continue;
      const uint32_t batch = response.estimates(i).batch();
      if (batch <= 1 || batch <= fits) continue;
      const std::string accum = GradAccum(batch, fits);
      steps.push_back(absl::StrCat(CardName(t), ": batch ", batch, " as ",
                                   accum.empty() ? "" : accum + ", or ",
                                   "--batch ", fits,
                                   " (the largest batch that FITS there)"));
      break;  // the largest not-FITS batch per card
    }
  }
  return steps;
}

void PrintNextSteps(const v1::CheckFitRequest& request,
                    const v1::CheckFitResponse& response, std::ostream& out) {
  const std::vector<std::string> steps = NextSteps(request, response);
  if (steps.empty()) return;
  out << "\nnot FITS everywhere; to try (each alone, then fit again):\n";
  for (const std::string& step : steps) out << "  - " << step << "\n";
}

}  // namespace headroom::cli
