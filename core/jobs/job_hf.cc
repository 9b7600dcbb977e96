// The transformers Trainer family: axolotl YAML, TRL / alignment-handbook
// recipe YAML (TrlParser: ModelConfig + ScriptArguments + SFTConfig) and
// TrainingArguments as JSON (HfArgumentParser.parse_json_file, or the dict
// TrainingArguments.to_json_string prints). One reader per kind over shared
// pieces; the keys they share mean what TrainingArguments says.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/jobs/job_kinds.h"

namespace headroom::jobs {
namespace {

using S = v1::TrainingSetup;

constexpr char kAxolotlTraining[] =
    "axolotl-ai-cloud/axolotl src/axolotl/utils/schemas/training.py @ "
    "067b021c8b87a9e5e380b9173c704cf7340e30f5";
constexpr char kAxolotlDtype[] =
    "axolotl-ai-cloud/axolotl src/axolotl/utils/config/__init__.py @ "
    "067b021c8b87a9e5e380b9173c704cf7340e30f5";

// What a kind calls the shared keys and what it defaults them to.
struct HfNames {
  const char* micro_key;  // per_device_train_batch_size / micro_batch_size
  int64_t micro_default;
  const char* micro_source;
  const char* optimizer_key;  // optim / optimizer
  const char* optimizer_default;
  const char* optimizer_source;
  bool checkpointing_default;
  const char* checkpointing_source;
};

// Keys every HF kind reads for memory.
std::vector<std::string> HfMemoryKeys() {
  return {"per_device_train_batch_size",
          "per_device_eval_batch_size",
          "gradient_accumulation_steps",
          "gradient_checkpointing",
          "optim",
          "bf16",
          "fp16",
          "attn_implementation",
          "torch_compile",
          "fsdp",
          "fsdp_config",
          "deepspeed",
          "load_in_4bit",
          "load_in_8bit",
          "lora_",
          "torch_dtype",
          "dtype",
          "max_seq_length",
          "max_length",
          "micro_batch_size",
          "sequence_len",
          "optimizer",
          "adapter",
          "use_peft",
          "use_dora",
          "flash_attention",
          "sdp_attention"};
}

absl::Status ReadModel(JobReader& r, const char* key, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> id, r.String(key));
  if (!id.has_value()) return absl::OkStatus();
  job->model_ids.push_back(*id);
  r.FromFile(key, *id, "model");
  return absl::OkStatus();
}

// Micro-batch, accumulation, checkpointing, optimizer, attention, compile,
// evaluation batch and the DeepSpeed / FSDP keys.
absl::Status ReadTrainer(JobReader& r, const HfNames& names, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> micro,
                   r.Int(names.micro_key, 1, 1 << 20));
  job->micro_batch = static_cast<uint32_t>(micro.value_or(names.micro_default));
  if (micro.has_value()) {
    r.FromFile(names.micro_key, absl::StrCat(*micro), "micro-batch");
  } else {
    r.Default("micro-batch", absl::StrCat(names.micro_default),
              names.micro_source);
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> accum,
                   r.Int("gradient_accumulation_steps", 1, 1024));
  job->setup.set_grad_accum(static_cast<uint32_t>(accum.value_or(1)));
  if (accum.has_value()) {
    r.FromFile("gradient_accumulation_steps", absl::StrCat(*accum),
               "grad_accum");
  } else {
    r.Default(
        "grad_accum", "1",
        absl::StrCat("gradient_accumulation_steps default 1, ", kTrainingArgs));
  }
  ASSIGN_OR_RETURN(std::optional<bool> checkpointing,
                   r.Bool("gradient_checkpointing"));
  const bool ac = checkpointing.value_or(names.checkpointing_default);
  job->setup.set_activation_checkpointing(ac);
  job->setup.set_checkpointing(ac ? S::FULL : S::NO_CHECKPOINTING);
  r.Find("gradient_checkpointing_kwargs");
  if (checkpointing.has_value()) {
    r.FromFile("gradient_checkpointing", ac ? "true" : "false",
               "checkpointing");
  } else {
    r.Default("checkpointing", ac ? "FULL" : "NO_CHECKPOINTING",
              names.checkpointing_source);
  }
  ASSIGN_OR_RETURN(std::optional<std::string> optim,
                   r.String(names.optimizer_key));
  const std::string optimizer = optim.value_or(names.optimizer_default);
  std::optional<S::Optimizer> chosen = HfOptimizer(optimizer);
  if (!chosen.has_value()) {
    return r.Bad(names.optimizer_key,
                 absl::StrCat("= ", optimizer,
                              " is not modelled; allowed adamw_torch, "
                              "adamw_torch_fused, adamw_8bit, "
                              "adamw_bnb_8bit, paged_adamw_8bit, "
                              "paged_adamw_32bit, adamw_torch_4bit, "
                              "adafactor, sgd, lion_32bit"));
  }
  job->setup.set_optimizer(*chosen);
  if (optim.has_value()) {
    r.FromFile(names.optimizer_key, optimizer, "optimizer");
  } else {
    r.Default("optimizer", optimizer, names.optimizer_source);
  }
  ASSIGN_OR_RETURN(std::optional<std::string> attention,
                   r.String("attn_implementation"));
  if (attention == "flash_attention_2") {
    job->setup.set_attention(S::FLASH);
  } else if (attention == "sdpa") {
    job->setup.set_attention(S::SDPA);
  } else if (attention == "eager") {
    job->setup.set_attention(S::EAGER);
  } else if (attention.has_value()) {
    return r.Bad("attn_implementation",
                 absl::StrCat("= ", *attention,
                              " is not modelled; allowed flash_attention_2, "
                              "sdpa, eager"));
  }
  if (attention.has_value()) {
    r.FromFile("attn_implementation", *attention, "attention");
  }
  ASSIGN_OR_RETURN(std::optional<bool> compile, r.Bool("torch_compile"));
  if (compile.has_value()) {
    job->setup.set_compile(*compile);
    r.FromFile("torch_compile", *compile ? "true" : "false", "compile");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> eval,
                   r.Int("per_device_eval_batch_size", 1, 1 << 20));
  if (eval.has_value()) {
    job->setup.set_eval_batch(static_cast<uint32_t>(*eval));
    r.FromFile("per_device_eval_batch_size", absl::StrCat(*eval), "eval_batch");
  }
  return absl::OkStatus();
}

// bf16 / fp16 and the weights' load dtype: weights loaded in bf16 (axolotl
// whenever bf16; TRL's dtype bfloat16) train as BF16_TRUE, fp32 weights
// under the Trainer's autocast as BF16_MIXED.
absl::Status ReadPrecision(JobReader& r, bool bf16_default,
                           const char* bf16_source, bool weights_follow_bf16,
                           DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<bool> fp16, r.Bool("fp16"));
  bool bf16 = bf16_default && !fp16.value_or(false);
  const Tree* bf16_value = r.Find("bf16");
  if (bf16_value != nullptr && bf16_value->is_string() &&
      bf16_value->get<std::string>() == "auto") {
    bf16 = !fp16.value_or(false);
    r.FromFile("bf16", "auto", bf16 ? "bf16 on a bf16 GPU" : "off");
    r.Default("bf16", bf16 ? "true" : "false",
              absl::StrCat("resolve_dtype: \"auto\" is true where the GPU "
                           "supports bf16, ",
                           kAxolotlDtype));
  } else if (bf16_value != nullptr) {
    ASSIGN_OR_RETURN(std::optional<bool> set, r.Bool("bf16"));
    bf16 = *set;
    r.FromFile("bf16", bf16 ? "true" : "false", "precision");
  } else if (!fp16.has_value()) {
    r.Default("bf16", bf16 ? "true" : "false", bf16_source);
  }
  if (fp16.has_value())
    r.FromFile("fp16", *fp16 ? "true" : "false", "precision");
  job->precision_from_job = bf16_value != nullptr || fp16.has_value();
  ASSIGN_OR_RETURN(std::optional<std::string> dtype, r.String("torch_dtype"));
  if (!dtype.has_value()) {
    ASSIGN_OR_RETURN(dtype, r.String("dtype"));
  }
  const bool bf16_weights =
      dtype == "bfloat16" || (weights_follow_bf16 && bf16);
  if (dtype.has_value()) r.FromFile("torch_dtype", *dtype, "precision");
  if (bf16 && fp16.value_or(false)) {
    return r.Bad("bf16", "and fp16 are both true; allowed one of them");
  }
  if (fp16.value_or(false)) {
    job->setup.set_precision(S::FP16_MIXED);
  } else if (bf16_weights) {
    job->setup.set_precision(S::BF16_TRUE);
  } else {
    job->setup.set_precision(bf16 ? S::BF16_MIXED : S::FP32);
  }
  return absl::OkStatus();
}

absl::Status ReadQuant(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<bool> four, r.Bool("load_in_4bit"));
  ASSIGN_OR_RETURN(std::optional<bool> eight, r.Bool("load_in_8bit"));
  if (four.value_or(false) && eight.value_or(false)) {
    return r.Bad("load_in_4bit",
                 "and load_in_8bit are both true; allowed "
                 "one of them");
  }
  if (four.value_or(false)) {
    job->setup.set_quant_base(S::NF4);
    r.FromFile("load_in_4bit", "true", "quant_base = NF4");
  }
  if (eight.value_or(false)) {
    job->setup.set_quant_base(S::INT8);
    r.FromFile("load_in_8bit", "true", "quant_base = INT8");
  }
  r.Find("bnb_4bit_quant_type");
  r.Find("use_bnb_nested_quant");
  return absl::OkStatus();
}

// lora_r, lora_dropout, lora_target_modules (and axolotl's
// lora_target_linear: every linear).
absl::Status ReadLora(JobReader& r, int64_t rank_default,
                      const char* rank_source, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> rank, r.Int("lora_r", 1, 4096));
  job->setup.mutable_lora()->set_rank(
      static_cast<uint32_t>(rank.value_or(rank_default)));
  if (rank.has_value()) {
    r.FromFile("lora_r", absl::StrCat(*rank), "lora.rank");
  } else {
    r.Default("lora.rank", absl::StrCat(rank_default), rank_source);
  }
  r.Find("lora_alpha");
  ASSIGN_OR_RETURN(std::optional<double> dropout, r.Number("lora_dropout"));
  if (dropout.has_value()) {
    job->setup.mutable_lora()->set_dropout(*dropout);
    r.FromFile("lora_dropout", absl::StrCat(*dropout), "lora.dropout");
  }
  ASSIGN_OR_RETURN(std::optional<bool> linear, r.Bool("lora_target_linear"));
  if (linear.value_or(false)) {
    job->setup.mutable_lora()->add_targets("all-linear");
    r.FromFile("lora_target_linear", "true", "lora.targets = all-linear");
  }
  RETURN_IF_ERROR(ReadLoraModules(r, "lora_target_modules",
                                  "q_proj, k_proj, v_proj, o_proj, gate_proj, "
                                  "up_proj, down_proj, all-linear",
                                  job));
  ASSIGN_OR_RETURN(std::optional<bool> dora, r.Bool("use_dora"));
  if (dora.value_or(false)) {
    return r.Bad("use_dora", "= true is not modelled; allowed false");
  }
  return absl::OkStatus();
}

absl::Status ReadLength(JobReader& r, const char* key, int64_t fallback,
                        const char* source, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> length, r.Int(key, 1, 1 << 22));
  if (length.has_value()) {
    r.FromFile(key, absl::StrCat(*length), "positions");
  } else if (fallback > 0) {
    r.Default("positions", absl::StrCat(fallback), source);
  }
  const int64_t positions = length.value_or(fallback);
  if (positions > 0) job->setup.set_positions(static_cast<uint64_t>(positions));
  return absl::OkStatus();
}

// deepspeed: a path (the file comes with --deepspeed) or an inline dict
// (refused: give it as a file); fsdp: TrainingArguments' option words.
absl::Status ReadDistributed(JobReader& r, DerivedJob* job) {
  const Tree* deepspeed = r.Find("deepspeed");
  if (deepspeed != nullptr && deepspeed->is_string()) {
    job->deepspeed_named = deepspeed->get<std::string>();
    r.FromFile("deepspeed", job->deepspeed_named, "the DeepSpeed config");
  } else if (deepspeed != nullptr) {
    return r.Bad("deepspeed",
                 "is an inline dict; save it as a file and give "
                 "it with --deepspeed");
  }
  ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> fsdp,
                   r.Strings("fsdp"));
  r.Find("fsdp_config");
  for (const std::string& option : fsdp.value_or(std::vector<std::string>{})) {
    if (option == "full_shard") {
      job->setup.set_parallel(S::FSDP_FULL);
    } else if (option == "shard_grad_op") {
      job->setup.set_parallel(S::FSDP_GRAD_OP);
    } else if (option == "hybrid_shard") {
      job->setup.set_parallel(S::FSDP_HYBRID);
    } else if (option == "offload") {
      job->setup.set_offload(S::BOTH);
    } else if (option != "auto_wrap") {
      return r.Bad("fsdp", absl::StrCat("names ", option,
                                        "; allowed full_shard, "
                                        "shard_grad_op, hybrid_shard, "
                                        "offload, auto_wrap"));
    }
  }
  if (fsdp.has_value() && !fsdp->empty()) {
    r.FromFile("fsdp", absl::StrJoin(*fsdp, " "), "parallel");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadAxolotl(JobReader& r, DerivedJob* job) {
  job->setup.set_framework(S::HF_TRAINER);
  RETURN_IF_ERROR(ReadModel(r, "base_model", job));
  const std::string micro_source =
      absl::StrCat("micro_batch_size default 1, ", kAxolotlTraining);
  const std::string optim_source =
      absl::StrCat("optimizer default adamw_torch_fused, ", kAxolotlTraining);
  const std::string ckpt_source =
      absl::StrCat("gradient_checkpointing default False, ", kAxolotlSchema);
  RETURN_IF_ERROR(
      ReadTrainer(r,
                  HfNames{"micro_batch_size", 1, micro_source.c_str(),
                          "optimizer", "adamw_torch_fused",
                          optim_source.c_str(), false, ckpt_source.c_str()},
                  job));
  const std::string bf16_source = absl::StrCat(
      "bf16 default \"auto\" (true on a bf16 GPU), ", kAxolotlSchema);
  RETURN_IF_ERROR(ReadPrecision(r, true, bf16_source.c_str(),
                                /*weights_follow_bf16=*/true, job));
  RETURN_IF_ERROR(ReadQuant(r, job));
  ASSIGN_OR_RETURN(std::optional<std::string> adapter, r.String("adapter"));
  if (adapter == "lora" || adapter == "qlora") {
    r.FromFile("adapter", *adapter, "lora");
    RETURN_IF_ERROR(ReadLora(r, 8, "axolotl has no lora_r default", job));
  } else if (adapter.has_value()) {
    return r.Bad("adapter", absl::StrCat("= ", *adapter,
                                         " is not modelled; allowed lora, "
                                         "qlora"));
  }
  if (adapter == "qlora" && job->setup.quant_base() != S::NF4) {
    return r.Bad("adapter", "= qlora needs load_in_4bit: true");
  }
  const std::string length_source =
      absl::StrCat("sequence_len default 512, ", kAxolotlSchema);
  RETURN_IF_ERROR(
      ReadLength(r, "sequence_len", 512, length_source.c_str(), job));
  ASSIGN_OR_RETURN(std::optional<bool> flash, r.Bool("flash_attention"));
  if (flash.value_or(false)) {
    job->setup.set_attention(S::FLASH);
    r.FromFile("flash_attention", "true", "attention = FLASH");
  }
  r.Find("sample_packing");
  RETURN_IF_ERROR(ReadDistributed(r, job));
  std::vector<std::string> memory = HfMemoryKeys();
  memory.insert(memory.end(), {"gpu_memory_limit", "relora_",
                               "unfrozen_parameters", "peft_"});
  return r.Finish(memory);
}

absl::Status ReadTrl(JobReader& r, DerivedJob* job) {
  job->setup.set_framework(S::HF_TRAINER);
  RETURN_IF_ERROR(ReadModel(r, "model_name_or_path", job));
  const std::string micro_source =
      absl::StrCat("per_device_train_batch_size default 8, ", kTrainingArgs);
  const std::string optim_source = absl::StrCat(
      "optim default adamw_torch_fused (torch >= 2.8), ", kTrainingArgs);
  const std::string ckpt_source = absl::StrCat(
      "SFTConfig overrides gradient_checkpointing to True, ", kTrlSftConfig);
  RETURN_IF_ERROR(
      ReadTrainer(r,
                  HfNames{"per_device_train_batch_size", 8,
                          micro_source.c_str(), "optim", "adamw_torch_fused",
                          optim_source.c_str(), true, ckpt_source.c_str()},
                  job));
  const std::string bf16_source = absl::StrCat(
      "SFTConfig: bf16 defaults to True when fp16 is not set, ", kTrlSftConfig);
  RETURN_IF_ERROR(ReadPrecision(r, true, bf16_source.c_str(),
                                /*weights_follow_bf16=*/false, job));
  RETURN_IF_ERROR(ReadQuant(r, job));
  ASSIGN_OR_RETURN(std::optional<bool> peft, r.Bool("use_peft"));
  if (peft.value_or(false)) {
    r.FromFile("use_peft", "true", "lora");
    const std::string rank_source =
        absl::StrCat("ModelConfig lora_r default 16, ", kTrlModelConfig);
    RETURN_IF_ERROR(ReadLora(r, 16, rank_source.c_str(), job));
  }
  // max_seq_length is the older SFTConfig's name for max_length.
  const std::string length_source =
      absl::StrCat("SFTConfig max_length default 1024, ", kTrlSftConfig);
  if (r.Find("max_seq_length") != nullptr) {
    RETURN_IF_ERROR(ReadLength(r, "max_seq_length", 0, "", job));
  } else {
    RETURN_IF_ERROR(
        ReadLength(r, "max_length", 1024, length_source.c_str(), job));
  }
  RETURN_IF_ERROR(ReadDistributed(r, job));
  return r.Finish(HfMemoryKeys());
}

absl::Status ReadTrainingArguments(JobReader& r, DerivedJob* job) {
  job->setup.set_framework(S::HF_TRAINER);
  RETURN_IF_ERROR(ReadModel(r, "model_name_or_path", job));
  const std::string micro_source =
      absl::StrCat("per_device_train_batch_size default 8, ", kTrainingArgs);
  const std::string optim_source = absl::StrCat(
      "optim default adamw_torch_fused (torch >= 2.8), ", kTrainingArgs);
  const std::string ckpt_source =
      absl::StrCat("gradient_checkpointing default False, ", kTrainingArgs);
  RETURN_IF_ERROR(
      ReadTrainer(r,
                  HfNames{"per_device_train_batch_size", 8,
                          micro_source.c_str(), "optim", "adamw_torch_fused",
                          optim_source.c_str(), false, ckpt_source.c_str()},
                  job));
  const std::string bf16_source =
      absl::StrCat("bf16 default False, ", kTrainingArgs);
  RETURN_IF_ERROR(ReadPrecision(r, false, bf16_source.c_str(),
                                /*weights_follow_bf16=*/false, job));
  RETURN_IF_ERROR(ReadQuant(r, job));
  RETURN_IF_ERROR(ReadDistributed(r, job));
  return r.Finish(HfMemoryKeys());
}

}  // namespace headroom::jobs
