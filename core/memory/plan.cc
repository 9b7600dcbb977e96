#include "core/memory/plan.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/memory/phases.h"
#include "core/memory/training_setup.h"

namespace headroom {
namespace {

using v1::TrainingSetup;

std::string Lower(const std::string& s) { return absl::AsciiStrToLower(s); }

const char* BytesName(double bytes) { return bytes >= 4 ? "fp32" : "16-bit"; }

// Where a field's value came from: the request's setup when it set it,
// else the profile (its rule's source) or the model's default.
std::string From(bool set_by_request, const AppliedProfile& profile,
                 const std::string& rule_prefix) {
  if (set_by_request) return "[setup]";
  for (const ProfileRule& rule : profile.rules) {
    if (rule.what.rfind(rule_prefix, 0) == 0) {
      return absl::StrCat("[", profile.label, ": ", rule.source, "]");
    }
  }
  return "[default]";
}

void AddLines(const TrainingSetup& asked, Plan* plan) {
  const TrainingSetup& s = plan->setup;
  std::vector<std::string>& lines = plan->lines;
  lines.push_back(
      absl::StrCat("framework: ", plan->profile.label,
                   asked.framework() == TrainingSetup::FRAMEWORK_UNSPECIFIED
                       ? " [default: no framework named]"
                       : " [setup]"));
  lines.push_back(absl::StrCat(
      "weights and gradients: ", BytesName(plan->weight_bytes),
      ", activations ", BytesName(plan->compute_bytes), " (precision ",
      Lower(TrainingSetup::Precision_Name(
          s.precision() == TrainingSetup::PRECISION_UNSPECIFIED
              ? TrainingSetup::FP32
              : s.precision())),
      ") ",
      asked.precision() != TrainingSetup::PRECISION_UNSPECIFIED ? "[setup]"
                                                                : "[default]"));
  if (!plan->lora_targets.empty()) {
    lines.push_back(absl::StrCat("LoRA rank ", s.lora().rank(), " on ",
                                 absl::StrJoin(plan->lora_targets, ","),
                                 ", adapters ", BytesName(plan->adapter_bytes),
                                 " ",
                                 From(false, plan->profile, "LoRA adapters")));
  }
  if (s.quant_base() != TrainingSetup::BASE_QUANT_UNSPECIFIED) {
    lines.push_back(absl::StrCat(
        "frozen base: ", TrainingSetup::BaseQuant_Name(s.quant_base()),
        ", dequantized one layer at a time [setup]"));
  }
  lines.push_back(
      absl::StrCat("optimizer: ",
                   Lower(TrainingSetup::Optimizer_Name(
                       s.optimizer() == TrainingSetup::OPTIMIZER_UNSPECIFIED
                           ? TrainingSetup::ADAMW
                           : s.optimizer())),
                   s.optimizer_in_backward() ? ", stepped in backward" : "",
                   asked.optimizer() != TrainingSetup::OPTIMIZER_UNSPECIFIED
                       ? " [setup]"
                       : " [default]"));
  const bool checkpointed =
      s.checkpointing() == TrainingSetup::FULL ||
      s.checkpointing() == TrainingSetup::SELECTIVE ||
      (s.checkpointing() == TrainingSetup::CHECKPOINTING_UNSPECIFIED &&
       s.activation_checkpointing());
  lines.push_back(absl::StrCat(
      "checkpointing: ",
      s.checkpointing() == TrainingSetup::SELECTIVE
          ? absl::StrCat(
                "selective",
                s.checkpoint_every() > 0
                    ? absl::StrCat(", every ", s.checkpoint_every(), " blocks")
                    : std::string(", op-level"))
      : checkpointed ? std::string("full")
                     : std::string("none"),
      s.activation_offloading() ? ", saved activations offloaded to host" : "",
      " ",
      From(asked.checkpointing() != TrainingSetup::CHECKPOINTING_UNSPECIFIED ||
               asked.activation_checkpointing(),
           plan->profile, "several GPUs: every block")));
  lines.push_back(absl::StrCat(
      "loss: ",
      s.loss() == TrainingSetup::CHUNKED_CE
          ? absl::StrCat("chunked cross-entropy, ",
                         s.loss_chunks() == 0 ? 8 : s.loss_chunks(), " chunks")
          : std::string("full logits"),
      " ",
      From(asked.loss() != TrainingSetup::LOSS_UNSPECIFIED, plan->profile,
           "loss")));
  if (plan->parallel) {
    lines.push_back(absl::StrCat(
        "GPUs: ", plan->layout.gpus, " (", plan->layout.nodes, " node",
        plan->layout.nodes == 1 ? "" : "s", "), ",
        StrategyName(plan->layout.strategy), ", shard degree ",
        plan->layout.shard_degree, ", tensor parallel ",
        plan->layout.tensor_parallel, " ",
        From(asked.parallel() != TrainingSetup::PARALLEL_UNSPECIFIED,
             plan->profile, "several GPUs: FSDP")));
  }
  for (const ProfileRule& rule : plan->profile.rules) {
    if (rule.what.rfind("load:", 0) == 0) {
      lines.push_back(absl::StrCat(rule.what, " [", plan->profile.label, ": ",
                                   rule.source, "]"));
    }
  }
  std::vector<std::string> phases;
  for (v1::JobPhase phase : plan->phases) phases.push_back(PhaseName(phase));
  lines.push_back(
      absl::StrCat("phases: ", absl::StrJoin(phases, ", "), " ",
                   From(!asked.phases().empty(), plan->profile, "phases")));
  for (const ProfileRule& rule : plan->profile.rules) {
    if (rule.what.rfind("FSDP flavour", 0) == 0) {
      lines.push_back(absl::StrCat(rule.what, " [", plan->profile.label, ": ",
                                   rule.source, "]"));
    }
  }
}

}  // namespace

absl::StatusOr<Plan> ResolvePlan(const v1::ModelSpec& spec,
                                 const TrainingSetup& setup) {
  if (absl::Status s = ValidateFramework(setup); !s.ok()) return s;
  if (absl::Status s = ValidateSetup(setup); !s.ok()) return s;
  Plan plan;
  plan.setup = setup;
  plan.positions = setup.positions() > 0 ? setup.positions() : spec.positions();
  plan.profile = ApplyProfile(plan.positions, &plan.setup);
  // The profile only fills fields within their allowed values; checked
  // again so that a profile rule can never hand the model a bad setup.
  if (absl::Status s = ValidateSetup(plan.setup); !s.ok()) {
    return absl::InternalError(
        absl::StrCat("framework profile ", plan.profile.label,
                     " made an invalid setup: ", s.message()));
  }
  const TrainingSetup& s = plan.setup;
  plan.weight_bytes = TrueHalfPrecision(s) ? 2.0 : 4.0;
  plan.compute_bytes = ActivationBytes(s);
  plan.adapter_bytes = plan.profile.adapter_bytes > 0
                           ? plan.profile.adapter_bytes
                           : plan.weight_bytes;
  plan.lora_targets = LoraTargets(s);
  plan.parallel = HasParallel(s);
  plan.layout = LayoutOf(s);
  plan.phases = PhasesOf(s);
  plan.accum = std::max<uint32_t>(1, s.grad_accum());
  AddLines(setup, &plan);
  return plan;
}

}  // namespace headroom
