#include "client/setup_flags.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/memory/framework_profile.h"
#include "core/memory/parallel.h"

namespace headroom::cli {
namespace {

using v1::TrainingSetup;

template <typename Enum>
struct Word {
  const char* word;
  Enum value;
};

// `words` is any range of Word<Enum>.
template <typename Words, typename Enum>
absl::Status Lookup(const char* flag, const std::string& value,
                    const Words& words, Enum* out) {
  std::vector<std::string> allowed;
  for (const Word<Enum>& w : words) {
    if (value == w.word) {
      *out = w.value;
      return absl::OkStatus();
    }
    allowed.push_back(w.word);
  }
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", value,
                                                 "' is unknown; allowed ",
                                                 absl::StrJoin(allowed, ", ")));
}

constexpr Word<TrainingSetup::Precision> kPrecisions[] = {
    {"fp32", TrainingSetup::FP32},
    {"bf16", TrainingSetup::BF16_MIXED},
    {"fp16", TrainingSetup::FP16_MIXED},
    {"bf16-true", TrainingSetup::BF16_TRUE},
    {"fp16-true", TrainingSetup::FP16_TRUE},
};

constexpr Word<TrainingSetup::Optimizer> kOptimizers[] = {
    {"adamw", TrainingSetup::ADAMW},
    {"adamw-fused", TrainingSetup::ADAMW_FUSED},
    {"adamw-loop", TrainingSetup::ADAMW_LOOP},
    {"adam8bit", TrainingSetup::ADAM8BIT},
    {"paged-adamw8bit", TrainingSetup::PAGED_ADAMW8BIT},
    {"paged-adamw", TrainingSetup::PAGED_ADAMW},
    {"adam4bit", TrainingSetup::ADAM4BIT},
    {"adamfp8", TrainingSetup::ADAMFP8},
    {"adafactor", TrainingSetup::ADAFACTOR},
    {"lion", TrainingSetup::LION},
    {"sgd", TrainingSetup::SGD},
    {"sgd-momentum", TrainingSetup::SGD_MOMENTUM},
};

constexpr Word<TrainingSetup::Attention> kAttention[] = {
    {"eager", TrainingSetup::EAGER},
    {"sdpa", TrainingSetup::SDPA},
    {"flash", TrainingSetup::FLASH},
};

// The strategies by the names the planner answers with (StrategyName).
std::vector<Word<TrainingSetup::Framework>> FrameworkWords() {
  std::vector<Word<TrainingSetup::Framework>> words;
  for (TrainingSetup::Framework f : AllFrameworks()) {
    words.push_back({FrameworkName(f), f});
  }
  return words;
}

std::vector<Word<TrainingSetup::Parallel>> ParallelWords() {
  std::vector<Word<TrainingSetup::Parallel>> words;
  for (TrainingSetup::Parallel s : AllStrategies()) {
    words.push_back({StrategyName(s), s});
  }
  return words;
}

constexpr Word<TrainingSetup::Offload> kOffload[] = {
    {"optimizer", TrainingSetup::OPTIMIZER},
    {"params", TrainingSetup::PARAMS},
    {"both", TrainingSetup::BOTH},
    {"optimizer,gradients", TrainingSetup::OPTIMIZER_GRADIENTS},
};

constexpr Word<TrainingSetup::Loss> kLoss[] = {
    {"chunked-ce", TrainingSetup::CHUNKED_CE},
    {"full-ce", TrainingSetup::FULL_CE},
};

constexpr Word<TrainingSetup::Checkpointing> kCheckpointing[] = {
    {"none", TrainingSetup::NO_CHECKPOINTING},
    {"full", TrainingSetup::FULL},
    {"selective", TrainingSetup::SELECTIVE},
};

constexpr Word<TrainingSetup::BaseQuant> kQuant[] = {
    {"nf4", TrainingSetup::NF4},
    {"int8", TrainingSetup::INT8},
};

// JobPhase by its name in answers and measurements (PhaseFigures.phase).
constexpr Word<v1::JobPhase> kPhases[] = {
    {"load", v1::LOAD}, {"first-step", v1::FIRST_STEP}, {"step", v1::STEP},
    {"eval", v1::EVAL}, {"generate", v1::GENERATE},     {"save", v1::SAVE},
};

std::vector<std::string> List(const std::string& text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

// --phases, each phase once, and the allocator and phase options.
absl::Status FillPhases(const Options& o, TrainingSetup* setup) {
  setup->set_expandable_segments(o.expandable_segments);
  std::vector<std::string> seen;
  for (const std::string& name : List(o.phases)) {
    v1::JobPhase phase = v1::JOB_PHASE_UNSPECIFIED;
    if (absl::Status s = Lookup("--phases", name, kPhases, &phase); !s.ok()) {
      return s;
    }
    if (std::find(seen.begin(), seen.end(), name) != seen.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--phases names '", name,
                       "' twice; give each of load, first-step, step, eval, "
                       "generate, save at most once"));
    }
    seen.push_back(name);
    setup->add_phases(phase);
  }
  setup->set_eval_batch(o.eval_batch);
  setup->set_generate_tokens(o.generate_tokens);
  if (!o.framework.empty()) {
    TrainingSetup::Framework framework = TrainingSetup::GENERIC;
    if (absl::Status s =
            Lookup("--framework", o.framework, FrameworkWords(), &framework);
        !s.ok()) {
      return s;
    }
    setup->set_framework(framework);
  }
  setup->set_framework_version(o.framework_version);
  return absl::OkStatus();
}

// --checkpointing, --checkpoint_every, --loss, --loss_chunks,
// --activation_offloading. A bare --checkpointing (or full) sets the old
// activation_checkpointing as it always did and none sets nothing, so
// those setups keep their keys; selective sets `checkpointing`.
absl::Status FillActivationSetup(const Options& o, TrainingSetup* setup) {
  if (!o.checkpointing.empty()) {
    TrainingSetup::Checkpointing checkpointing =
        TrainingSetup::CHECKPOINTING_UNSPECIFIED;
    if (absl::Status s = Lookup("--checkpointing", o.checkpointing,
                                kCheckpointing, &checkpointing);
        !s.ok()) {
      return s;
    }
    if (checkpointing == TrainingSetup::FULL) {
      setup->set_activation_checkpointing(true);
    } else if (checkpointing == TrainingSetup::SELECTIVE) {
      setup->set_checkpointing(checkpointing);
    }
  }
  setup->set_checkpoint_every(o.checkpoint_every);
  if (!o.loss.empty()) {
    TrainingSetup::Loss loss = TrainingSetup::LOSS_UNSPECIFIED;
    if (absl::Status s = Lookup("--loss", o.loss, kLoss, &loss); !s.ok()) {
      return s;
    }
    setup->set_loss(loss);
  }
  setup->set_loss_chunks(o.loss_chunks);
  setup->set_activation_offloading(o.activation_offloading);
  return absl::OkStatus();
}

}  // namespace

void AddSetupFlags(CLI::App* app, Options& o, bool compile_flag) {
  app->add_option("--precision", o.precision,
                  "fp32, bf16 or fp16 (mixed), bf16-true or fp16-true "
                  "(16-bit weights, gradients and state)");
  app->add_option("--optimizer", o.optimizer,
                  "adamw, adamw-fused, adamw-loop, adam8bit, "
                  "paged-adamw8bit, paged-adamw, adam4bit, adamfp8, "
                  "adafactor, lion, sgd or sgd-momentum");
  app->add_flag("--optimizer_in_backward", o.optimizer_in_backward,
                "step each parameter during backward (no full set of "
                "gradients)");
  app->add_option("--checkpointing", o.checkpointing,
                  "activation checkpointing: none, full or selective (bare: "
                  "full)")
      ->expected(0, 1)
      ->default_str("full");
  app->add_option("--checkpoint_every", o.checkpoint_every,
                  "with --checkpointing selective: recompute every N-th "
                  "block (0: op-level, matmul and attention outputs kept)");
  app->add_option("--loss", o.loss,
                  "chunked-ce or full-ce (default: the framework's)");
  app->add_option("--loss_chunks", o.loss_chunks,
                  "with --loss chunked-ce: pieces of the sequence (0: 8)");
  app->add_flag("--activation_offloading", o.activation_offloading,
                "saved activations to host memory during forward "
                "(torchtune's OffloadActivations)");
  app->add_option("--attention", o.attention,
                  "eager, sdpa or flash (default: the model's own)");
  app->add_flag("--fused_attention", o.fused_attention,
                "deprecated: --attention sdpa");
  app->add_option("--lora_rank", o.lora_rank, "LoRA adapters of this rank");
  app->add_option("--lora_targets", o.lora_targets,
                  "q,k,v,o,gate,up,down, all-linear, lm_head, embed "
                  "(default q,v)");
  app->add_option("--lora_dropout", o.lora_dropout,
                  "dropout on the adapters' input, 0 <= p < 1");
  app->add_option("--quant_base", o.quant_base,
                  "nf4 or int8: the frozen base stored quantized (QLoRA)");
  app->add_option("--freeze", o.freeze,
                  "top-level layer names to freeze, comma-separated "
                  "(name* is a prefix)");
  app->add_option("--train_last_blocks", o.train_last_blocks,
                  "freeze all but the last N copies of the last repeated "
                  "block");
  app->add_option("--grad_accum", o.grad_accum,
                  "microbatches per step (the batch is divided)");
  if (compile_flag) app->add_flag("--compile", o.compile, "torch.compile");
  app->add_option("--gpus", o.gpus,
                  "GPUs in all (1..512), or auto: the smallest count per "
                  "--gpu kind, per strategy");
  app->add_option("--parallel", o.parallel,
                  "ddp, fsdp-full, fsdp-grad-op, fsdp-hybrid, zero1, zero2 "
                  "or zero3 (with --gpus auto and none given: each)");
  app->add_option("--offload", o.offload,
                  "optimizer, params or both: to host memory (sharded "
                  "strategies); optimizer,gradients: torchao's one-GPU "
                  "CPUOffloadOptimizer with offload_gradients");
  app->add_option("--tensor_parallel", o.tensor_parallel,
                  "tensor-parallel degree T (divides --gpus)");
  app->add_option("--nodes", o.nodes, "nodes (hybrid sharding)");
  app->add_option("--gpus_per_node", o.gpus_per_node,
                  "GPUs per node (default 8)");
  app->add_flag("--expandable_segments", o.expandable_segments,
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (reserved "
                "memory stays closer to allocated)");
  app->add_option("--phases", o.phases,
                  "the job's phases, comma-separated: load, first-step, step, "
                  "eval, generate, save (default load,step); the answer is "
                  "the largest");
  app->add_option("--eval_batch", o.eval_batch,
                  "the eval phase's batch (0: the training batch)");
  app->add_option("--generate_tokens", o.generate_tokens,
                  "new tokens per sample in the generate phase (0: 128)");
  app->add_option("--framework", o.framework,
                  "what runs the job: generic (default), hf-trainer "
                  "(transformers Trainer, TRL, axolotl), litgpt, torchtune, "
                  "deepspeed or torch; its profile fills what the setup "
                  "leaves unset (--explain prints the plan)");
  app->add_option("--framework_version", o.framework_version,
                  "the framework's version where its behaviour changed, "
                  "e.g. 0.5.10 (default: the profile's newest)");
  app->add_option("--positions", o.positions,
                  "sequence length / tokens per sample, the longest when "
                  "batches are padded (0: the model's standard)");
}

absl::Status FillSetup(const Options& o, TrainingSetup* setup) {
  TrainingSetup::Precision precision = TrainingSetup::FP32;
  if (absl::Status s =
          Lookup("--precision", o.precision, kPrecisions, &precision);
      !s.ok()) {
    return s;
  }
  setup->set_precision(precision);
  TrainingSetup::Optimizer optimizer = TrainingSetup::ADAMW;
  if (absl::Status s =
          Lookup("--optimizer", o.optimizer, kOptimizers, &optimizer);
      !s.ok()) {
    return s;
  }
  setup->set_optimizer(optimizer);
  if (!o.attention.empty()) {
    TrainingSetup::Attention attention = TrainingSetup::ATTENTION_UNSPECIFIED;
    if (absl::Status s =
            Lookup("--attention", o.attention, kAttention, &attention);
        !s.ok()) {
      return s;
    }
    setup->set_attention(attention);
  } else if (o.fused_attention) {
    setup->set_attention(TrainingSetup::SDPA);
  }
  if (!o.quant_base.empty()) {
    TrainingSetup::BaseQuant quant = TrainingSetup::BASE_QUANT_UNSPECIFIED;
    if (absl::Status s = Lookup("--quant_base", o.quant_base, kQuant, &quant);
        !s.ok()) {
      return s;
    }
    setup->set_quant_base(quant);
  }
  if (absl::Status s = FillActivationSetup(o, setup); !s.ok()) return s;
  setup->set_optimizer_in_backward(o.optimizer_in_backward);
  setup->set_positions(o.positions);
  if (o.lora_rank != 0 || !o.lora_targets.empty() || o.lora_dropout != 0) {
    v1::Lora* lora = setup->mutable_lora();
    lora->set_rank(o.lora_rank);
    for (std::string& target : List(o.lora_targets)) {
      lora->add_targets(std::move(target));
    }
    lora->set_dropout(o.lora_dropout);
  }
  for (std::string& layer : List(o.freeze)) {
    setup->mutable_freeze()->add_layers(std::move(layer));
  }
  if (o.train_last_blocks != 0) {
    setup->mutable_freeze()->set_train_last_blocks(o.train_last_blocks);
  }
  setup->set_grad_accum(o.grad_accum);
  setup->set_compile(o.compile);
  if (!o.gpus.empty() && o.gpus != "auto") {
    uint32_t gpus = 0;
    if (!absl::SimpleAtoi(o.gpus, &gpus) || gpus == 0 || gpus > 512) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpus '", o.gpus, "' is invalid; allowed 1..512 or auto"));
    }
    setup->set_gpus(gpus);
  }
  if (!o.parallel.empty()) {
    TrainingSetup::Parallel parallel = TrainingSetup::PARALLEL_UNSPECIFIED;
    if (absl::Status s =
            Lookup("--parallel", o.parallel, ParallelWords(), &parallel);
        !s.ok()) {
      return s;
    }
    setup->set_parallel(parallel);
  }
  if (!o.offload.empty()) {
    TrainingSetup::Offload offload = TrainingSetup::OFFLOAD_UNSPECIFIED;
    if (absl::Status s = Lookup("--offload", o.offload, kOffload, &offload);
        !s.ok()) {
      return s;
    }
    setup->set_offload(offload);
  }
  if (absl::Status s = FillPhases(o, setup); !s.ok()) return s;
  setup->set_tensor_parallel(o.tensor_parallel);
  setup->set_nodes(o.nodes);
  setup->set_gpus_per_node(o.gpus_per_node);
  return absl::OkStatus();
}

bool MinGpusAsked(const Options& o) { return o.gpus == "auto"; }

}  // namespace headroom::cli
