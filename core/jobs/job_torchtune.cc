// torchtune's recipe YAML (recipes/configs/<family>/*.yaml): the model
// builder and its LoRA arguments, the optimizer and loss components, and
// the recipe's own switches, as the recipes read them with cfg.get.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "core/jobs/job_kinds.h"

namespace headroom::jobs {
namespace {

using S = v1::TrainingSetup;

constexpr char kTorchtuneLoss[] =
    "pytorch/torchtune torchtune/modules/loss/cross_entropy_loss.py @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1";

// Keys that change the memory figure: anything under model, optimizer and
// loss, and the recipe's memory switches.
const std::vector<std::string>& TorchtuneMemoryKeys() {
  static const auto* const kKeys =
      new std::vector<std::string>{"model.",
                                   "optimizer.",
                                   "loss.",
                                   "enable_",
                                   "fsdp_",
                                   "dtype",
                                   "batch_size",
                                   "gradient_accumulation_steps",
                                   "compile",
                                   "optimizer_in_bwd",
                                   "tensor_parallel_dim",
                                   "ac_mode",
                                   "ac_option",
                                   "tokenizer.max_seq_len",
                                   "custom_sharded_layers"};
  return *kKeys;
}

// model._component_: torchtune.models.<family>.[q]lora_<builder> or
// <builder>; the builder's name (llama3_1_8b) is an id the catalog knows.
absl::Status ReadModel(JobReader& r, DerivedJob* job, bool* lora) {
  ASSIGN_OR_RETURN(std::optional<std::string> component,
                   r.String("model._component_"));
  if (!component.has_value()) {
    return r.Bad("model._component_",
                 "is missing; a torchtune recipe names its model builder");
  }
  absl::string_view builder(*component);
  builder.remove_prefix(component->rfind('.') + 1);
  r.FromFile("model._component_", *component, "model");
  if (absl::ConsumePrefix(&builder, "qlora_")) {
    job->setup.set_quant_base(S::NF4);
    *lora = true;
    r.FromFile("model._component_", "qlora_*", "quant_base = NF4");
  } else if (absl::ConsumePrefix(&builder, "lora_")) {
    *lora = true;
  }
  job->model_ids.emplace_back(builder);
  ASSIGN_OR_RETURN(std::optional<std::string> dir,
                   r.String("checkpointer.checkpoint_dir"));
  if (dir.has_value()) {
    std::vector<std::string> parts =
        absl::StrSplit(*dir, '/', absl::SkipEmpty());
    if (!parts.empty()) job->model_ids.push_back(parts.back());
  }
  return absl::OkStatus();
}

// The LoRA builder's arguments (lora_rank, lora_dropout, lora_attn_modules,
// apply_lora_to_mlp; apply_lora_to_output and use_dora are refused when
// on, quantize_base quantizes).
absl::Status ReadLora(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> rank,
                   r.Int("model.lora_rank", 1, 4096));
  if (!rank.has_value()) {
    return r.Bad("model.lora_rank", "is missing; the LoRA builders require it");
  }
  r.FromFile("model.lora_rank", absl::StrCat(*rank), "lora.rank");
  job->setup.mutable_lora()->set_rank(static_cast<uint32_t>(*rank));
  r.Find("model.lora_alpha");
  ASSIGN_OR_RETURN(std::optional<double> dropout,
                   r.Number("model.lora_dropout"));
  if (dropout.has_value()) {
    r.FromFile("model.lora_dropout", absl::StrCat(*dropout), "lora.dropout");
    job->setup.mutable_lora()->set_dropout(*dropout);
  }
  RETURN_IF_ERROR(ReadLoraModules(r, "model.lora_attn_modules",
                                  "q_proj, k_proj, v_proj, output_proj", job));
  ASSIGN_OR_RETURN(std::optional<bool> mlp, r.Bool("model.apply_lora_to_mlp"));
  if (mlp.value_or(false)) {
    for (const char* t : {"gate", "up", "down"}) {
      job->setup.mutable_lora()->add_targets(t);
    }
  }
  if (mlp.has_value()) {
    r.FromFile("model.apply_lora_to_mlp", *mlp ? "true" : "false",
               "lora.targets");
  }
  for (const char* key : {"model.apply_lora_to_output", "model.use_dora"}) {
    ASSIGN_OR_RETURN(std::optional<bool> on, r.Bool(key));
    if (on.value_or(false)) {
      return r.Bad(key, "= true is not modelled; allowed false");
    }
  }
  ASSIGN_OR_RETURN(std::optional<bool> quantize, r.Bool("model.quantize_base"));
  if (quantize.value_or(false)) {
    job->setup.set_quant_base(S::NF4);
    r.FromFile("model.quantize_base", "true", "quant_base = NF4");
  }
  return absl::OkStatus();
}

absl::Status ReadOptimizer(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> component,
                   r.String("optimizer._component_"));
  if (!component.has_value()) {
    return r.Bad("optimizer._component_",
                 "is missing; a torchtune recipe names its optimizer");
  }
  ASSIGN_OR_RETURN(std::optional<bool> fused, r.Bool("optimizer.fused"));
  for (const char* key : {"optimizer.lr", "optimizer.weight_decay",
                          "optimizer.betas", "optimizer.eps"}) {
    r.Find(key);
  }
  std::optional<S::Optimizer> optimizer =
      OptimizerClass(*component, fused.value_or(false));
  if (!optimizer.has_value()) {
    return r.Bad("optimizer._component_",
                 absl::StrCat("= ", *component,
                              " is not modelled; allowed torch.optim.AdamW, "
                              "SGD, bitsandbytes and torchao AdamW variants"));
  }
  job->setup.set_optimizer(*optimizer);
  r.FromFile(
      "optimizer._component_",
      fused.value_or(false) ? absl::StrCat(*component, " (fused)") : *component,
      "optimizer");
  ASSIGN_OR_RETURN(std::optional<bool> in_backward, r.Bool("optimizer_in_bwd"));
  if (in_backward.value_or(false)) {
    job->setup.set_optimizer_in_backward(true);
    r.FromFile("optimizer_in_bwd", "true", "optimizer_in_backward");
  }
  return absl::OkStatus();
}

// loss._component_: both of torchtune's cross-entropy losses chunk the
// output (num_output_chunks, default 8).
absl::Status ReadLoss(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> component,
                   r.String("loss._component_"));
  if (!component.has_value()) return absl::OkStatus();
  if (!absl::EndsWith(*component, "CEWithChunkedOutputLoss") &&
      !absl::EndsWith(*component, "LinearCrossEntropyLoss")) {
    return r.Bad("loss._component_",
                 absl::StrCat("= ", *component,
                              " is not modelled; allowed "
                              "torchtune.modules.loss.CEWithChunkedOutputLoss,"
                              " LinearCrossEntropyLoss"));
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> chunks,
                   r.Int("loss.num_output_chunks", 1, 1 << 16));
  job->setup.set_loss(S::CHUNKED_CE);
  job->setup.set_loss_chunks(static_cast<uint32_t>(chunks.value_or(8)));
  r.FromFile("loss._component_", *component, "loss = CHUNKED_CE");
  if (chunks.has_value()) {
    r.FromFile("loss.num_output_chunks", absl::StrCat(*chunks), "loss_chunks");
  } else {
    r.Default("loss_chunks", "8",
              absl::StrCat("num_output_chunks: int = 8, ", kTorchtuneLoss));
  }
  return absl::OkStatus();
}

// dtype, batch_size, gradient_accumulation_steps, tokenizer.max_seq_len,
// compile and the activation switches.
absl::Status ReadRecipe(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> dtype, r.String("dtype"));
  if (dtype == "bf16") {
    job->setup.set_precision(S::BF16_TRUE);
  } else if (dtype == "fp32") {
    job->setup.set_precision(S::FP32);
  } else if (dtype.has_value()) {
    return r.Bad("dtype", absl::StrCat("= ", *dtype,
                                       " is not known; allowed bf16, fp32"));
  }
  if (dtype.has_value()) r.FromFile("dtype", *dtype, "precision");
  ASSIGN_OR_RETURN(std::optional<int64_t> batch,
                   r.Int("batch_size", 1, 1 << 20));
  if (!batch.has_value()) {
    return r.Bad("batch_size", "is missing; the recipe reads cfg.batch_size");
  }
  job->micro_batch = static_cast<uint32_t>(*batch);
  r.FromFile("batch_size", absl::StrCat(*batch), "micro-batch");
  ASSIGN_OR_RETURN(std::optional<int64_t> accum,
                   r.Int("gradient_accumulation_steps", 1, 1024));
  job->setup.set_grad_accum(static_cast<uint32_t>(accum.value_or(1)));
  if (accum.has_value()) {
    r.FromFile("gradient_accumulation_steps", absl::StrCat(*accum),
               "grad_accum");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> length,
                   r.Int("tokenizer.max_seq_len", 1, 1 << 22));
  if (length.has_value()) {
    job->setup.set_positions(static_cast<uint64_t>(*length));
    r.FromFile("tokenizer.max_seq_len", absl::StrCat(*length), "positions");
  }
  ASSIGN_OR_RETURN(std::optional<bool> compile, r.Bool("compile"));
  job->setup.set_compile(compile.value_or(false));
  if (compile.has_value()) {
    r.FromFile("compile", *compile ? "true" : "false", "compile");
  }
  ASSIGN_OR_RETURN(std::optional<bool> checkpointing,
                   r.Bool("enable_activation_checkpointing"));
  ASSIGN_OR_RETURN(std::optional<bool> offloading,
                   r.Bool("enable_activation_offloading"));
  job->setup.set_activation_checkpointing(checkpointing.value_or(false));
  job->setup.set_checkpointing(
      checkpointing.value_or(false) ? S::FULL : S::NO_CHECKPOINTING);
  job->setup.set_activation_offloading(offloading.value_or(false));
  if (checkpointing.has_value()) {
    r.FromFile("enable_activation_checkpointing",
               *checkpointing ? "true" : "false", "checkpointing");
  } else {
    r.Default("checkpointing", "NO_CHECKPOINTING",
              absl::StrCat("cfg.get(\"enable_activation_checkpointing\", "
                           "False), ",
                           kTorchtuneRecipe));
  }
  if (offloading.has_value()) {
    r.FromFile("enable_activation_offloading", *offloading ? "true" : "false",
               "activation_offloading");
  }
  if (offloading.value_or(false) && !checkpointing.value_or(false)) {
    return r.Bad("enable_activation_offloading",
                 "= true needs enable_activation_checkpointing = true (the "
                 "recipe raises otherwise)");
  }
  ASSIGN_OR_RETURN(std::optional<bool> cpu_offload, r.Bool("fsdp_cpu_offload"));
  if (cpu_offload.value_or(false)) {
    job->setup.set_offload(S::BOTH);
    r.FromFile("fsdp_cpu_offload", "true", "offload = BOTH");
  }
  r.Find("fsdp_reshard_after_forward");
  r.Find("enable_async_checkpointing");
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadTorchtune(JobReader& r, DerivedJob* job) {
  job->setup.set_framework(S::TORCHTUNE);
  bool lora = false;
  RETURN_IF_ERROR(ReadModel(r, job, &lora));
  if (lora) RETURN_IF_ERROR(ReadLora(r, job));
  RETURN_IF_ERROR(ReadOptimizer(r, job));
  RETURN_IF_ERROR(ReadLoss(r, job));
  RETURN_IF_ERROR(ReadRecipe(r, job));
  return r.Finish(TorchtuneMemoryKeys());
}

}  // namespace headroom::jobs
