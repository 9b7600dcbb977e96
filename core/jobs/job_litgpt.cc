// litgpt's config-hub YAML (config_hub/finetune/*/lora.yaml, qlora.yaml,
// full.yaml): the arguments of litgpt finetune's setup(), as jsonargparse
// reads them.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "core/jobs/job_kinds.h"

namespace headroom::jobs {
namespace {

using S = v1::TrainingSetup;

// Keys that change the memory figure: any of them unread is refused.
const std::vector<std::string>& LitgptMemoryKeys() {
  static const auto* const kKeys =
      new std::vector<std::string>{"precision",
                                   "quantize",
                                   "devices",
                                   "num_nodes",
                                   "lora_",
                                   "train.micro_batch_size",
                                   "train.global_batch_size",
                                   "train.max_seq_length",
                                   "optimizer.",
                                   "optimizer"};
  return *kKeys;
}

// The model: checkpoint_dir is checkpoints/<org>/<name> (litgpt download's
// layout); the hub id first, then the bare name (litgpt's own name).
absl::Status ReadModel(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> dir, r.String("checkpoint_dir"));
  if (!dir.has_value()) {
    return r.Bad("checkpoint_dir",
                 "is missing; litgpt needs the model's "
                 "checkpoint directory");
  }
  std::vector<std::string> parts = absl::StrSplit(*dir, '/', absl::SkipEmpty());
  if (!parts.empty() && parts.front() == "checkpoints") {
    parts.erase(parts.begin());
  }
  if (parts.size() >= 2) {
    job->model_ids.push_back(
        absl::StrCat(parts[parts.size() - 2], "/", parts.back()));
  }
  if (!parts.empty()) job->model_ids.push_back(parts.back());
  r.FromFile("checkpoint_dir", *dir, "model");
  return absl::OkStatus();
}

// precision and quantize (lora.py: a bnb quantization needs a -true
// precision; its optimizer becomes bitsandbytes PagedAdamW).
absl::Status ReadPrecision(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> precision, r.String("precision"));
  if (!precision.has_value()) {
    precision = "bf16-mixed";
    r.Default("precision", "bf16-mixed",
              absl::StrCat("get_default_supported_precision(training=True) "
                           "on a bf16 GPU, ",
                           kLitgptUtils));
  } else {
    r.FromFile("precision", *precision, "precision");
  }
  static const auto* const kPrecisions =
      new std::map<std::string, S::Precision>{{"bf16-true", S::BF16_TRUE},
                                              {"bf16-mixed", S::BF16_MIXED},
                                              {"16-true", S::FP16_TRUE},
                                              {"16-mixed", S::FP16_MIXED},
                                              {"32-true", S::FP32}};
  auto it = kPrecisions->find(*precision);
  if (it == kPrecisions->end()) {
    return r.Bad("precision", absl::StrCat("= ", *precision,
                                           " is not known; allowed bf16-true, "
                                           "bf16-mixed, 16-true, 16-mixed, "
                                           "32-true"));
  }
  job->setup.set_precision(it->second);
  ASSIGN_OR_RETURN(std::optional<std::string> quantize, r.String("quantize"));
  if (!quantize.has_value()) return absl::OkStatus();
  if (*quantize == "bnb.nf4" || *quantize == "bnb.nf4-dq") {
    job->setup.set_quant_base(S::NF4);
  } else if (*quantize == "bnb.int8-training") {
    job->setup.set_quant_base(S::INT8);
  } else {
    return r.Bad("quantize", absl::StrCat("= ", *quantize,
                                          " is not modelled; allowed bnb.nf4, "
                                          "bnb.nf4-dq, bnb.int8-training"));
  }
  if (absl::StrContains(*precision, "mixed")) {
    return r.Bad("quantize",
                 absl::StrCat("= ", *quantize, " with precision = ", *precision,
                              ": litgpt refuses quantization with "
                              "mixed precision (",
                              kLitgptLora, ")"));
  }
  r.FromFile("quantize", *quantize, "quant_base");
  return absl::OkStatus();
}

// lora_r, lora_dropout and the lora_<part> switches (setup()'s defaults:
// query and value on, the rest off). lora_alpha scales, no memory.
absl::Status ReadLora(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> rank, r.Int("lora_r", 1, 4096));
  r.Find("lora_alpha");
  const int64_t r_value = rank.value_or(8);
  if (rank.has_value()) {
    r.FromFile("lora_r", absl::StrCat(r_value), "lora.rank");
  } else {
    r.Default("lora.rank", "8", absl::StrCat("setup(lora_r=8), ", kLitgptLora));
  }
  job->setup.mutable_lora()->set_rank(static_cast<uint32_t>(r_value));
  ASSIGN_OR_RETURN(std::optional<double> dropout, r.Number("lora_dropout"));
  job->setup.mutable_lora()->set_dropout(dropout.value_or(0.05));
  if (dropout.has_value()) {
    r.FromFile("lora_dropout", absl::StrCat(*dropout), "lora.dropout");
  } else {
    r.Default("lora.dropout", "0.05",
              absl::StrCat("setup(lora_dropout=0.05), ", kLitgptLora));
  }
  struct Part {
    const char* key;
    bool by_default;
    std::vector<const char*> targets;
  };
  const std::vector<Part> parts = {{"lora_query", true, {"q"}},
                                   {"lora_key", false, {"k"}},
                                   {"lora_value", true, {"v"}},
                                   {"lora_projection", false, {"o"}},
                                   {"lora_mlp", false, {"gate", "up", "down"}},
                                   {"lora_head", false, {}}};
  for (const Part& part : parts) {
    ASSIGN_OR_RETURN(std::optional<bool> on, r.Bool(part.key));
    if (on.value_or(part.by_default) && part.targets.empty()) {
      return r.Bad(part.key,
                   "= true: an adapter on the output head is not "
                   "modelled; allowed false");
    }
    if (on.has_value()) {
      r.FromFile(part.key, *on ? "true" : "false", "lora.targets");
    } else {
      r.Default(absl::StrCat("lora.targets (", part.key, ")"),
                part.by_default ? "true" : "false",
                absl::StrCat("setup() default, ", kLitgptLora));
    }
    if (!on.value_or(part.by_default)) continue;
    for (const char* target : part.targets) {
      job->setup.mutable_lora()->add_targets(target);
    }
  }
  return absl::OkStatus();
}

// devices x num_nodes GPUs; more than one: lora.py's ModelParallelStrategy
// (FSDP2 fully_shard, data parallel only, parallelize_fn's activation
// checkpointing on), full.py's FSDPStrategy (FULL_SHARD, Block
// checkpointing).
absl::Status ReadDevices(JobReader& r, bool lora, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> devices, r.Int("devices", 1, 512));
  ASSIGN_OR_RETURN(std::optional<int64_t> nodes, r.Int("num_nodes", 1, 512));
  const int64_t gpus = devices.value_or(1) * nodes.value_or(1);
  if (gpus > 512) {
    return r.Bad("devices", absl::StrCat("x num_nodes = ", gpus,
                                         " GPUs; allowed up to 512"));
  }
  if (devices.has_value()) {
    r.FromFile("devices", absl::StrCat(*devices), "gpus");
  } else {
    r.Default("gpus", "1", absl::StrCat("setup(devices=1), ", kLitgptLora));
  }
  if (nodes.has_value()) r.FromFile("num_nodes", absl::StrCat(*nodes), "nodes");
  job->setup.set_gpus(static_cast<uint32_t>(gpus));
  if (nodes.value_or(1) > 1) {
    job->setup.set_nodes(static_cast<uint32_t>(*nodes));
    job->setup.set_gpus_per_node(static_cast<uint32_t>(devices.value_or(1)));
  }
  if (gpus > 1 && job->setup.quant_base() != S::BASE_QUANT_UNSPECIFIED) {
    return r.Bad("quantize", absl::StrCat("with devices x num_nodes = ", gpus,
                                          ": litgpt runs quantized models on "
                                          "one GPU only (",
                                          kLitgptLora, ")"));
  }
  if (gpus > 1) {
    job->setup.set_parallel(S::FSDP_FULL);
    job->setup.set_activation_checkpointing(true);
    job->setup.set_checkpointing(S::FULL);
    r.Default("parallel, checkpointing", "FSDP_FULL, FULL",
              absl::StrCat("more than one GPU: ",
                           lora ? "ModelParallelStrategy(parallelize_fn) "
                                  "with activation_checkpointing=True, "
                                : "FSDPStrategy(activation_checkpointing_"
                                  "policy={Block}), ",
                           lora ? kLitgptLora : kLitgptFull));
  } else {
    job->setup.set_checkpointing(S::NO_CHECKPOINTING);
    r.Default("checkpointing", "NO_CHECKPOINTING",
              absl::StrCat("one GPU: strategy \"auto\", no activation "
                           "checkpointing, ",
                           lora ? kLitgptLora : kLitgptFull));
  }
  return absl::OkStatus();
}

// train.global_batch_size / micro_batch_size: accumulation is
// global / (devices x nodes) / micro (TrainArgs.gradient_accumulation_iters,
// which asserts both divisions leave no remainder).
absl::Status ReadBatch(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> global,
                   r.Int("train.global_batch_size", 1, 1 << 20));
  ASSIGN_OR_RETURN(std::optional<int64_t> micro,
                   r.Int("train.micro_batch_size", 1, 1 << 20));
  const int64_t g = global.value_or(16);
  const int64_t m = micro.value_or(1);
  if (global.has_value()) {
    r.FromFile("train.global_batch_size", absl::StrCat(g), "grad_accum");
  } else {
    r.Default("global batch", "16",
              absl::StrCat("setup(train=TrainArgs(global_batch_size=16)), ",
                           kLitgptLora));
  }
  if (micro.has_value()) {
    r.FromFile("train.micro_batch_size", absl::StrCat(m), "micro-batch");
  } else {
    r.Default("micro-batch", "1",
              absl::StrCat("setup(train=TrainArgs(micro_batch_size=1)), ",
                           kLitgptLora));
  }
  const int64_t ranks = std::max<uint32_t>(1, job->setup.gpus());
  if (g % (m * ranks) != 0) {
    return r.Bad("train.global_batch_size",
                 absl::StrCat("= ", g,
                              " is not a multiple of train.micro_batch_size "
                              "x devices x num_nodes = ",
                              m, " x ", ranks, " = ", m * ranks,
                              "; litgpt's gradient_accumulation_iters needs a "
                              "whole number of micro-batches per rank"));
  }
  job->micro_batch = static_cast<uint32_t>(m);
  job->setup.set_grad_accum(static_cast<uint32_t>(g / ranks / m));
  ASSIGN_OR_RETURN(std::optional<int64_t> length,
                   r.Int("train.max_seq_length", 1, 1 << 22));
  if (length.has_value()) {
    r.FromFile("train.max_seq_length", absl::StrCat(*length), "positions");
    job->setup.set_positions(static_cast<uint64_t>(*length));
  }
  return absl::OkStatus();
}

// optimizer: a name ("AdamW": torch.optim) or {class_path, init_args};
// quantized runs use bitsandbytes PagedAdamW (instantiate_bnb_optimizer).
absl::Status ReadOptimizer(JobReader& r, DerivedJob* job) {
  std::string path = "AdamW";
  const Tree* value = r.Find("optimizer");
  if (value != nullptr && value->is_string()) {
    path = value->get<std::string>();
  } else if (value != nullptr && value->is_object() &&
             value->contains("class_path") &&
             (*value)["class_path"].is_string()) {
    path = (*value)["class_path"].get<std::string>();
  } else if (value != nullptr) {
    return r.Bad("optimizer",
                 "is neither a class name nor {class_path, "
                 "init_args}");
  }
  if (job->setup.quant_base() != S::BASE_QUANT_UNSPECIFIED) {
    if (!absl::StrContains(path, "AdamW")) {
      return r.Bad("optimizer", absl::StrCat("= ", path,
                                             " with quantize: litgpt allows "
                                             "only AdamW there"));
    }
    job->setup.set_optimizer(S::PAGED_ADAMW);
    r.Default("optimizer", "PAGED_ADAMW",
              absl::StrCat("instantiate_bnb_optimizer: a quantized model "
                           "trains with bitsandbytes PagedAdamW, ",
                           kLitgptUtils));
    return absl::OkStatus();
  }
  std::optional<S::Optimizer> optimizer = OptimizerClass(path, false);
  if (!optimizer.has_value()) {
    return r.Bad("optimizer", absl::StrCat("= ", path,
                                           " is not modelled; allowed "
                                           "torch.optim.AdamW, SGD, "
                                           "bitsandbytes / torchao AdamW "
                                           "variants"));
  }
  job->setup.set_optimizer(*optimizer);
  if (value == nullptr) {
    r.Default("optimizer", "ADAMW",
              absl::StrCat("setup(optimizer=\"AdamW\"), ", kLitgptLora));
  } else {
    r.FromFile("optimizer", path, "optimizer");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ReadLitgpt(JobReader& r, DerivedJob* job) {
  job->setup.set_framework(S::LITGPT);
  bool lora = false;
  for (const char* key :
       {"lora_r", "lora_alpha", "lora_dropout", "lora_query", "lora_value"}) {
    if (r.Find(key) != nullptr) lora = true;
  }
  RETURN_IF_ERROR(ReadModel(r, job));
  RETURN_IF_ERROR(ReadPrecision(r, job));
  if (lora) RETURN_IF_ERROR(ReadLora(r, job));
  RETURN_IF_ERROR(ReadDevices(r, lora, job));
  RETURN_IF_ERROR(ReadBatch(r, job));
  RETURN_IF_ERROR(ReadOptimizer(r, job));
  // lora.py / full.py: model(input_ids, lm_head_chunk_size=128) and
  // chunked_cross_entropy: the head's logits 128 positions at a time.
  job->setup.set_loss(S::CHUNKED_CE);
  if (job->setup.positions() > 0) {
    job->setup.set_loss_chunks(
        static_cast<uint32_t>((job->setup.positions() + 127) / 128));
  }
  r.Default("loss", "CHUNKED_CE (128 positions a chunk)",
            absl::StrCat("fit(): lm_head_chunk_size=128 and "
                         "chunked_cross_entropy, ",
                         lora ? kLitgptLora : kLitgptFull));
  return r.Finish(LitgptMemoryKeys());
}

}  // namespace headroom::jobs
