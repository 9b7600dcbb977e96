// Names the frameworks share: LoRA targets and optimizers.

#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/jobs/job_kinds.h"

namespace headroom::jobs {

absl::Status ReadLoraModules(JobReader& r, const std::string& key,
                             const char* allowed, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> modules,
                   r.Strings(key));
  if (!modules.has_value()) return absl::OkStatus();
  for (const std::string& module : *modules) {
    std::optional<std::string> target = LoraTarget(module);
    if (!target.has_value()) {
      return r.Bad(key, absl::StrCat("names ", module, "; allowed ", allowed));
    }
    job->setup.mutable_lora()->add_targets(*target);
  }
  r.FromFile(key, absl::StrJoin(*modules, ","), "lora.targets");
  return absl::OkStatus();
}

std::optional<std::string> LoraTarget(absl::string_view name) {
  // PEFT's module names for Llama-family models, torchtune's
  // lora_attn_modules (q_proj, k_proj, v_proj, output_proj) and PEFT's
  // "all-linear".
  static const auto* const kTargets = new std::map<std::string, std::string>{
      {"q_proj", "q"},   {"k_proj", "k"},       {"v_proj", "v"},
      {"o_proj", "o"},   {"output_proj", "o"},  {"gate_proj", "gate"},
      {"up_proj", "up"}, {"down_proj", "down"}, {"all-linear", "all-linear"}};
  auto it = kTargets->find(std::string(name));
  if (it == kTargets->end()) return std::nullopt;
  return it->second;
}

std::optional<v1::TrainingSetup::Optimizer> HfOptimizer(
    absl::string_view name) {
  // transformers' OptimizerNames (src/transformers/training_args.py and
  // trainer_optimizer.py): the bitsandbytes ones are 8-bit / paged variants
  // of AdamW; adamw_torch_4bit is torchao's AdamW4bit.
  using S = v1::TrainingSetup;
  static const auto* const kNames = new std::map<std::string, S::Optimizer>{
      {"adamw_torch", S::ADAMW},
      {"adamw_hf", S::ADAMW},
      {"adamw_torch_fused", S::ADAMW_FUSED},
      {"adamw_8bit", S::ADAM8BIT},
      {"adamw_bnb_8bit", S::ADAM8BIT},
      {"paged_adamw_8bit", S::PAGED_ADAMW8BIT},
      {"paged_adamw_32bit", S::PAGED_ADAMW},
      {"adamw_torch_4bit", S::ADAM4BIT},
      {"adafactor", S::ADAFACTOR},
      {"sgd", S::SGD},
      {"lion_32bit", S::LION}};
  auto it = kNames->find(std::string(name));
  if (it == kNames->end()) return std::nullopt;
  return it->second;
}

std::optional<v1::TrainingSetup::Optimizer> OptimizerClass(
    absl::string_view path, bool fused) {
  using S = v1::TrainingSetup;
  if (path == "AdamW" || path == "torch.optim.AdamW" || path == "Adam" ||
      path == "torch.optim.Adam") {
    return fused ? S::ADAMW_FUSED : S::ADAMW;
  }
  if (path == "SGD" || path == "torch.optim.SGD") return S::SGD;
  if (path == "bitsandbytes.optim.PagedAdamW" ||
      path == "bitsandbytes.optim.PagedAdamW32bit") {
    return S::PAGED_ADAMW;
  }
  if (path == "bitsandbytes.optim.PagedAdamW8bit") return S::PAGED_ADAMW8BIT;
  if (path == "bitsandbytes.optim.AdamW8bit" ||
      path == "bitsandbytes.optim.Adam8bit") {
    return S::ADAM8BIT;
  }
  if (path == "torchao.optim.AdamW4bit" ||
      path == "torchao.prototype.low_bit_optim.AdamW4bit") {
    return S::ADAM4BIT;
  }
  if (path == "torchao.optim.AdamWFp8" ||
      path == "torchao.prototype.low_bit_optim.AdamWFp8") {
    return S::ADAMFP8;
  }
  return std::nullopt;
}

}  // namespace headroom::jobs
