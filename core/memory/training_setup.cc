#include "core/memory/training_setup.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "base/units.h"
#include "core/memory/model_spec.h"
#include "core/memory/parallel.h"
#include "core/memory/param_tensors.h"

namespace headroom {
namespace {

using v1::TrainingSetup;

constexpr const char* kLoraTargetNames[] = {"q",    "k",  "v",   "o",
                                            "gate", "up", "down"};
// Targets beyond the linears: the output head and the embedding tables
// (PEFT's all-linear leaves the output layer out, so these are named).
constexpr const char* kLoraExtraTargets[] = {"lm_head", "embed"};
constexpr int kMaxLoraTargets = 16;
constexpr size_t kMaxFreezeNameBytes = 256;

absl::Status Invalid(const std::string& field, const std::string& value,
                     const std::string& allowed) {
  return absl::InvalidArgumentError(absl::StrCat("setup.", field, " = ", value,
                                                 " is not allowed; ", allowed));
}

// Whether LoRA adapts the tensor: a linear by its target, the output
// head as "lm_head", an embedding table as "embed" (param_tensors.h).
bool LoraAdapts(const ParamTensor& t, const std::set<std::string>& targets) {
  const bool adaptable = t.role == TensorRole::kLinear ||
                         t.role == TensorRole::kHead ||
                         t.role == TensorRole::kTable;
  return adaptable && targets.count(t.target) != 0;
}

// LoRA's A and B for an adapted tensor, as PEFT shapes them: a linear
// [out, in] (the head too) gets A [r, in] and B [out, r]; an embedding
// table [num, dim] gets lora_embedding_A [r, num] and lora_embedding_B
// [dim, r] (Embedding.update_layer, peft src/peft/tuners/lora/layer.py
// @ 5d602fd).
std::array<ParamTensor, 2> LoraAdapters(const ParamTensor& t, uint64_t rank) {
  const bool table = t.role == TensorRole::kTable;
  const uint64_t in = table ? t.shape[0] : t.InFeatures();
  const uint64_t out = table ? t.shape[1] : t.OutFeatures();
  std::array<ParamTensor, 2> adapters;
  adapters[0].shape = {rank, in};
  adapters[1].shape = {out, rank};
  for (ParamTensor& a : adapters) {
    a.rank = 2;
    a.copies = t.copies;
  }
  return adapters;
}

bool Matches(const std::string& pattern, const std::string& name) {
  if (absl::EndsWith(pattern, "*")) {
    return absl::StartsWith(name, pattern.substr(0, pattern.size() - 1));
  }
  return pattern == name;
}

// torchao's AdamW4bit / AdamWFp8 state of one tensor: two moments, each
// quantized when the tensor has >= 4096 elements and a whole number of
// blocks, else torch.zeros_like(p) in the parameter's dtype (_new_buffer,
// torchao/optim/adam.py @ 36027d8). OptimState4bit.zeros holds codes of
// n / 2 uint8, n / 128 fp32 scales and a 16-entry fp32 qmap
// (torchao/optim/subclass_4bit.py @ 36027d8); OptimStateFp8.zeros n
// float8_e4m3fn codes and n / 256 fp32 scales (subclass_fp8.py).
double LowBitStateBytes(TrainingSetup::Optimizer optimizer,
                        const ParamTensor& t, double param_bytes) {
  const uint64_t n = t.Elements();
  const double e = static_cast<double>(n);
  const bool four = optimizer == TrainingSetup::ADAM4BIT;
  const uint64_t block = four ? kTorchao4BitBlock : kTorchaoFp8Block;
  if (n < kTorchaoMinLowBitSize || n % block != 0) {
    return 2 * param_bytes * e;
  }
  const double scales = 4.0 * e / static_cast<double>(block);
  return four ? 2 * (e / 2 + scales + 16 * 4.0) : 2 * (e + scales);
}

// The part of one tensor's state that lives in CUDA managed memory: a
// paged bitsandbytes optimizer pages its moment buffers (not the 8-bit
// absmax) of tensors of >= 1e5 elements (get_state_buffer, bitsandbytes/
// optim/optimizer.py @ 95f9af3).
double PagedStateBytes(TrainingSetup::Optimizer optimizer,
                       const ParamTensor& t) {
  if (t.Elements() < kBnbMinPagedSize) return 0;
  const double e = static_cast<double>(t.Elements());
  if (optimizer == TrainingSetup::PAGED_ADAMW) return 2 * 4.0 * e;
  if (optimizer == TrainingSetup::PAGED_ADAMW8BIT) return 2 * e;
  return 0;
}

double StateBytes(const TrainingSetup& setup, const ParamTensor& t,
                  double param_bytes) {
  const double e = static_cast<double>(t.Elements());
  switch (setup.optimizer()) {
    case TrainingSetup::SGD:
      return 0;
    case TrainingSetup::SGD_MOMENTUM:
    case TrainingSetup::LION:
      return param_bytes * e;
    case TrainingSetup::ADAM8BIT:
    case TrainingSetup::PAGED_ADAMW8BIT: {
      if (t.Elements() < kBnbMin8BitSize) return 2 * 4.0 * e;  // fp32 moments
      const double blocks = std::ceil(e / kBnbOptimizerBlock);
      return 2 * (e + 4.0 * blocks);
    }
    case TrainingSetup::PAGED_ADAMW:
      // optim_bits 32: both moments fp32 whatever the parameter's dtype
      // (get_state_buffer(p, dtype=torch.float32), bitsandbytes/optim/
      // optimizer.py @ 95f9af3).
      return 2 * 4.0 * e;
    case TrainingSetup::ADAM4BIT:
    case TrainingSetup::ADAMFP8:
      return LowBitStateBytes(setup.optimizer(), t, param_bytes);
    case TrainingSetup::ADAFACTOR: {
      if (t.rank < 2) return 4.0 * e;
      double lead = 1;
      for (int i = 0; i + 2 < t.rank; ++i) lead *= t.shape[i];
      const double rows = lead * t.shape[t.rank - 2];
      const double cols = lead * t.shape[t.rank - 1];
      return 4.0 * (rows + cols);
    }
    default:  // the AdamW family: two moments in the parameter dtype
      return 2 * param_bytes * e;
  }
}

// Temporaries of one tensor's step when the step runs a tensor at a time.
double TensorStepTemporaries(const TrainingSetup& setup, double elements,
                             double param_bytes) {
  switch (setup.optimizer()) {
    case TrainingSetup::ADAMW_LOOP:
    case TrainingSetup::LION:
      return 2 * param_bytes * elements;
    case TrainingSetup::ADAFACTOR:
      // The squared gradient and its factored approximation in fp32, plus
      // fp32 copies of a 16-bit gradient and weight.
      return (2 + (param_bytes < 4 ? 2 : 0)) * 4.0 * elements;
    case TrainingSetup::SGD:
    case TrainingSetup::ADAMW_FUSED:
    case TrainingSetup::ADAM8BIT:
    case TrainingSetup::PAGED_ADAMW8BIT:
    case TrainingSetup::PAGED_ADAMW:
    // torchao's low-bit Adam: one torch.compile'd single_param_adam per
    // tensor, fused: no materialized temporaries (torchao/optim/adam.py @
    // 36027d8).
    case TrainingSetup::ADAM4BIT:
    case TrainingSetup::ADAMFP8:
      return 0;
    default:  // foreach AdamW, SGD with momentum: one intermediate
      return param_bytes * elements;
  }
}

bool LoopsOverTensors(const TrainingSetup& setup) {
  return setup.optimizer() == TrainingSetup::ADAMW_LOOP ||
         setup.optimizer() == TrainingSetup::LION ||
         setup.optimizer() == TrainingSetup::ADAFACTOR;
}

const char* OptimizerName(TrainingSetup::Optimizer optimizer) {
  switch (optimizer) {
    case TrainingSetup::SGD:
      return "sgd";
    case TrainingSetup::SGD_MOMENTUM:
      return "sgd-momentum";
    case TrainingSetup::ADAMW_FUSED:
      return "adamw-fused";
    case TrainingSetup::ADAMW_LOOP:
      return "adamw-loop";
    case TrainingSetup::ADAM8BIT:
      return "adam8bit";
    case TrainingSetup::PAGED_ADAMW8BIT:
      return "paged-adamw8bit";
    case TrainingSetup::PAGED_ADAMW:
      return "paged-adamw";
    case TrainingSetup::ADAM4BIT:
      return "adam4bit";
    case TrainingSetup::ADAMFP8:
      return "adamfp8";
    case TrainingSetup::ADAFACTOR:
      return "adafactor";
    case TrainingSetup::LION:
      return "lion";
    default:
      return "adamw";
  }
}

std::string Count(uint64_t n) {
  if (n >= 1000000000) return absl::StrCat(std::round(n / 1e7) / 100, " B");
  if (n >= 1000000) return absl::StrCat(std::round(n / 1e4) / 100, " M");
  return absl::StrCat(n);
}

// The step's own fields: positions, the enums, FlashAttention's precision,
// gradient accumulation.
absl::Status ValidateStep(const TrainingSetup& setup) {
  if (setup.positions() > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("setup.positions = ", setup.positions(),
                     " is out of range; allowed 0 (the model's standard) .. ",
                     uint64_t{1} << 32));
  }
  if (!TrainingSetup::Precision_IsValid(setup.precision())) {
    return Invalid("precision", absl::StrCat(setup.precision()),
                   "allowed FP32, BF16_MIXED, FP16_MIXED, BF16_TRUE, "
                   "FP16_TRUE");
  }
  if (!TrainingSetup::Optimizer_IsValid(setup.optimizer())) {
    return Invalid("optimizer", absl::StrCat(setup.optimizer()),
                   "allowed ADAMW, ADAMW_FUSED, ADAMW_LOOP, ADAM8BIT, "
                   "PAGED_ADAMW8BIT, PAGED_ADAMW, ADAM4BIT, ADAMFP8, "
                   "ADAFACTOR, LION, SGD, SGD_MOMENTUM");
  }
  if (!TrainingSetup::Attention_IsValid(setup.attention())) {
    return Invalid("attention", absl::StrCat(setup.attention()),
                   "allowed ATTENTION_UNSPECIFIED (the model's default), "
                   "EAGER, SDPA, FLASH");
  }
  if (!TrainingSetup::BaseQuant_IsValid(setup.quant_base())) {
    return Invalid("quant_base", absl::StrCat(setup.quant_base()),
                   "allowed BASE_QUANT_UNSPECIFIED (not quantized), NF4, "
                   "INT8");
  }
  if (setup.attention() == TrainingSetup::FLASH &&
      ActivationBytes(setup) != 2) {
    return Invalid("attention", "FLASH",
                   "FlashAttention runs in 16 bits only: allowed with "
                   "precision BF16_MIXED, FP16_MIXED, BF16_TRUE or FP16_TRUE");
  }
  if (setup.grad_accum() > kMaxGradAccum) {
    return Invalid("grad_accum", absl::StrCat(setup.grad_accum()),
                   absl::StrCat("allowed 0 or 1 (none) .. ", kMaxGradAccum));
  }
  if (setup.optimizer_in_backward() && setup.grad_accum() > 1) {
    return Invalid("grad_accum", absl::StrCat(setup.grad_accum()),
                   "optimizer_in_backward steps during every backward, so "
                   "it allows grad_accum 0 or 1 only");
  }
  return absl::OkStatus();
}

// The LoRA adapters, and a quantized base that trains only through them.
absl::Status ValidateLora(const TrainingSetup& setup) {
  const v1::Lora& lora = setup.lora();
  if (lora.rank() > kMaxLoraRank) {
    return Invalid("lora.rank", absl::StrCat(lora.rank()),
                   absl::StrCat("allowed 0 (no adapters) .. ", kMaxLoraRank));
  }
  if (lora.rank() == 0 && (lora.targets_size() != 0 || lora.dropout() != 0)) {
    return Invalid("lora.rank", "0",
                   "lora.targets and lora.dropout need lora.rank 1 .. 4096");
  }
  if (!(lora.dropout() >= 0 && lora.dropout() < 1)) {
    return Invalid("lora.dropout", absl::StrCat(lora.dropout()),
                   "allowed 0 <= dropout < 1");
  }
  if (lora.targets_size() > kMaxLoraTargets) {
    return Invalid("lora.targets",
                   absl::StrCat(lora.targets_size(), " entries"),
                   absl::StrCat("allowed at most ", kMaxLoraTargets));
  }
  for (int i = 0; i < lora.targets_size(); ++i) {
    const std::string& target = lora.targets(i);
    const auto is = [&](const char* name) { return target == name; };
    const bool known = target == "all-linear" ||
                       std::any_of(std::begin(kLoraTargetNames),
                                   std::end(kLoraTargetNames), is) ||
                       std::any_of(std::begin(kLoraExtraTargets),
                                   std::end(kLoraExtraTargets), is);
    if (!known) {
      return Invalid(absl::StrCat("lora.targets[", i, "]"),
                     absl::StrCat("'", target.substr(0, 64), "'"),
                     "allowed q, k, v, o, gate, up, down, all-linear, "
                     "lm_head, embed");
    }
  }
  if (setup.quant_base() != TrainingSetup::BASE_QUANT_UNSPECIFIED &&
      lora.rank() == 0) {
    return Invalid("quant_base",
                   TrainingSetup::BaseQuant_Name(setup.quant_base()),
                   "a quantized base trains only through adapters: set "
                   "lora.rank 1 .. 4096");
  }
  return absl::OkStatus();
}

// The loss, activation checkpointing and offloading fields, and the
// combinations that mean nothing.
absl::Status ValidateActivationSetup(const TrainingSetup& setup) {
  if (!TrainingSetup::Loss_IsValid(setup.loss())) {
    return Invalid("loss", absl::StrCat(setup.loss()),
                   "allowed LOSS_UNSPECIFIED (the framework's default), "
                   "FULL_CE, CHUNKED_CE");
  }
  if (setup.loss_chunks() != 0 && setup.loss() != TrainingSetup::CHUNKED_CE) {
    return Invalid("loss_chunks", absl::StrCat(setup.loss_chunks()),
                   "loss_chunks needs loss CHUNKED_CE; allowed 0 otherwise");
  }
  if (setup.loss_chunks() > kMaxLossChunks) {
    return Invalid("loss_chunks", absl::StrCat(setup.loss_chunks()),
                   absl::StrCat("allowed 0 (", kDefaultLossChunks, ") .. ",
                                kMaxLossChunks));
  }
  if (!TrainingSetup::Checkpointing_IsValid(setup.checkpointing())) {
    return Invalid("checkpointing", absl::StrCat(setup.checkpointing()),
                   "allowed CHECKPOINTING_UNSPECIFIED "
                   "(activation_checkpointing decides), NO_CHECKPOINTING, "
                   "FULL, SELECTIVE");
  }
  if (setup.checkpointing() == TrainingSetup::NO_CHECKPOINTING &&
      setup.activation_checkpointing()) {
    return Invalid("checkpointing", "NO_CHECKPOINTING",
                   "activation_checkpointing true asks for FULL: allowed "
                   "FULL, SELECTIVE or activation_checkpointing false");
  }
  if (setup.checkpoint_every() != 0 &&
      setup.checkpointing() != TrainingSetup::SELECTIVE) {
    return Invalid("checkpoint_every", absl::StrCat(setup.checkpoint_every()),
                   "checkpoint_every needs checkpointing SELECTIVE; allowed "
                   "0 otherwise");
  }
  if (setup.checkpoint_every() > 100000) {
    return Invalid("checkpoint_every", absl::StrCat(setup.checkpoint_every()),
                   "allowed 0 (op-level selective) .. 100000 (every N-th "
                   "block recomputed)");
  }
  return absl::OkStatus();
}

// The frozen layer names and the trained last blocks.
absl::Status ValidateFreeze(const v1::Freeze& freeze) {
  if (freeze.layers_size() > kMaxFreezeNames) {
    return Invalid("freeze.layers",
                   absl::StrCat(freeze.layers_size(), " entries"),
                   absl::StrCat("allowed at most ", kMaxFreezeNames));
  }
  for (int i = 0; i < freeze.layers_size(); ++i) {
    const std::string& name = freeze.layers(i);
    if (name.empty() || name.size() > kMaxFreezeNameBytes) {
      return Invalid(absl::StrCat("freeze.layers[", i, "]"),
                     absl::StrCat("a name of ", name.size(), " bytes"),
                     "allowed a top-level layer name of 1 .. 256 bytes");
    }
  }
  if (freeze.train_last_blocks() > 100000) {
    return Invalid("freeze.train_last_blocks",
                   absl::StrCat(freeze.train_last_blocks()),
                   "allowed 0 (off) .. 100000");
  }
  return absl::OkStatus();
}

// What a paged or low-bit optimizer's state assumes.
void AddOptimizerRemarks(const TrainingSetup& setup, const ModelStates& states,
                         std::vector<std::string>* out) {
  if (states.paged_states > 0) {
    out->push_back(absl::StrCat(
        "paged optimizer state: ", FormatBytesAsGb(states.paged_states, 2),
        " of ", OptimizerName(setup.optimizer()),
        "'s moments (tensors of >= 100,000 elements) are not in the peak: "
        "they live in CUDA managed memory, which the driver pages to the "
        "host under pressure and torch's allocator does not count; the ",
        FormatBytesAsGb(states.states - states.paged_states, 2),
        " rest is device memory"));
  }
  if (setup.optimizer() == TrainingSetup::ADAM4BIT ||
      setup.optimizer() == TrainingSetup::ADAMFP8) {
    const bool four = setup.optimizer() == TrainingSetup::ADAM4BIT;
    out->push_back(absl::StrCat(
        "torchao ", four ? "AdamW4bit" : "AdamWFp8", ": moments ",
        four ? "in 4 bits with one fp32 scale per 128 values"
             : "in fp8 (e4m3) with one fp32 scale per 256 values",
        "; tensors under 4,096 elements or not a whole number of blocks "
        "keep moments in the parameter dtype"));
  }
}

// What the loss, checkpointing and activation offloading assume.
void AddActivationRemarks(const TrainingSetup& setup,
                          std::vector<std::string>* out) {
  if (const uint32_t chunks = LossChunks(setup); chunks != 0) {
    out->push_back(absl::StrCat(
        "loss: chunked cross-entropy in ", chunks,
        " pieces of the sequence (torchtune's CEWithChunkedOutputLoss; "
        "litgpt's chunked_cross_entropy): every piece's head output is "
        "alive at the loss, one piece's fp32 logits and gradient at a "
        "time"));
  }
  const TrainingSetup::Checkpointing checkpointing = CheckpointingOf(setup);
  if (checkpointing == TrainingSetup::SELECTIVE) {
    out->push_back(
        setup.checkpoint_every() > 1
            ? absl::StrCat(
                  "checkpointing: selective, every ", setup.checkpoint_every(),
                  "-th copy of a repeated block recomputed (torchtune's "
                  "ac_mode selective, ac_option ",
                  setup.checkpoint_every(),
                  "), the other copies keep their activations")
        : setup.checkpoint_every() == 1
            ? std::string("checkpointing: selective every block, as full")
            : std::string(
                  "checkpointing: op-level selective (torchtitan's op SAC): "
                  "attention outputs and every second matmul output saved, "
                  "norms, activations and elementwise ops recomputed"));
  }
  if (setup.activation_offloading()) {
    out->push_back(
        "activation offloading (torchtune's OffloadActivations, streams "
        "on): saved activations go to pinned host memory during forward; "
        "the GPU keeps two copies of a repeated block's activations (the one "
        "in "
        "backward and the one being brought back) and the head's input, "
        "which torchtune does not offload; tensors under 1 KiB stay and are "
        "not counted");
  }
}

}  // namespace

std::vector<std::string> LoraTargetWords() {
  std::vector<std::string> words(std::begin(kLoraTargetNames),
                                 std::end(kLoraTargetNames));
  words.push_back("all-linear");
  words.insert(words.end(), std::begin(kLoraExtraTargets),
               std::end(kLoraExtraTargets));
  return words;
}

absl::Status ValidateSetup(const TrainingSetup& setup) {
  if (absl::Status parallel = ValidateParallel(setup); !parallel.ok()) {
    return parallel;
  }
  if (absl::Status step = ValidateStep(setup); !step.ok()) return step;
  if (absl::Status lora = ValidateLora(setup); !lora.ok()) return lora;
  RETURN_IF_ERROR(ValidateActivationSetup(setup));
  return ValidateFreeze(setup.freeze());
}

bool TrueHalfPrecision(const TrainingSetup& setup) {
  return setup.precision() == TrainingSetup::BF16_TRUE ||
         setup.precision() == TrainingSetup::FP16_TRUE;
}

bool MixedPrecision(const TrainingSetup& setup) {
  return setup.precision() == TrainingSetup::BF16_MIXED ||
         setup.precision() == TrainingSetup::FP16_MIXED;
}

double ActivationBytes(const TrainingSetup& setup) {
  return TrueHalfPrecision(setup) || MixedPrecision(setup) ? 2.0 : 4.0;
}

TrainingSetup::Checkpointing CheckpointingOf(const TrainingSetup& setup) {
  if (setup.checkpointing() != TrainingSetup::CHECKPOINTING_UNSPECIFIED) {
    return setup.checkpointing();
  }
  return setup.activation_checkpointing() ? TrainingSetup::FULL
                                          : TrainingSetup::NO_CHECKPOINTING;
}

uint32_t LossChunks(const TrainingSetup& setup) {
  if (setup.loss() != TrainingSetup::CHUNKED_CE) return 0;
  return setup.loss_chunks() != 0 ? setup.loss_chunks() : kDefaultLossChunks;
}

double ChunkedLogitsFraction(uint64_t positions, uint32_t chunks) {
  if (positions == 0 || chunks <= 1) return 1.0;
  const uint64_t largest = (positions + chunks - 1) / chunks;
  return std::min(
      1.0, static_cast<double>(largest) / static_cast<double>(positions));
}

bool FusedAttention(const v1::Attention& attention,
                    const TrainingSetup& setup) {
  switch (setup.attention()) {
    case TrainingSetup::EAGER:
      return false;
    case TrainingSetup::SDPA:
    case TrainingSetup::FLASH:
      return true;
    default:
      return setup.fused_attention() || attention.fused();
  }
}

std::set<std::string> LoraTargets(const TrainingSetup& setup) {
  std::set<std::string> targets;
  if (setup.lora().rank() == 0) return targets;
  if (setup.lora().targets().empty()) return {"q", "v"};
  for (const std::string& target : setup.lora().targets()) {
    if (target == "all-linear") {
      targets.insert(std::begin(kLoraTargetNames), std::end(kLoraTargetNames));
      targets.insert("linear");
    } else {
      targets.insert(target);
    }
  }
  return targets;
}

absl::StatusOr<FrozenSpec> ApplyFreeze(const v1::ModelSpec& spec,
                                       const TrainingSetup& setup) {
  FrozenSpec out;
  out.spec = spec;
  const v1::Freeze& freeze = setup.freeze();
  const bool lora = setup.lora().rank() != 0;
  if (freeze.train_last_blocks() != 0) {
    int last = -1;
    for (int i = 0; i < spec.layers_size(); ++i) {
      if (spec.layers(i).repeat() > 1) last = i;
    }
    if (last < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "setup.freeze.train_last_blocks = ", freeze.train_last_blocks(),
          ": model ", spec.name(),
          " has no repeated block to train the last copies of; use "
          "freeze.layers with its layer names"));
    }
    auto* layers = out.spec.mutable_layers();
    const uint32_t repeat = spec.layers(last).repeat();
    if (freeze.train_last_blocks() < repeat) {
      v1::Layer head = spec.layers(last);
      head.set_repeat(repeat - freeze.train_last_blocks());
      head.set_frozen(true);
      head.set_name(absl::StrCat(head.name(), " (frozen copies)"));
      layers->Mutable(last)->set_repeat(freeze.train_last_blocks());
      layers->Add(std::move(head));
      // Move the frozen copies in front of the trained ones.
      for (int i = layers->size() - 1; i > last; --i) {
        layers->SwapElements(i, i - 1);
      }
      ++last;
    }
    for (int i = 0; i < last; ++i) layers->Mutable(i)->set_frozen(true);
  }
  out.weights_frozen.assign(out.spec.layers_size(), lora);
  for (int n = 0; n < freeze.layers_size(); ++n) {
    bool found = false;
    for (int i = 0; i < out.spec.layers_size(); ++i) {
      if (Matches(freeze.layers(n), out.spec.layers(i).name())) {
        out.weights_frozen[i] = true;
        found = true;
      }
    }
    if (!found) {
      std::vector<std::string> names;
      for (const v1::Layer& layer : spec.layers()) {
        if (names.size() == 24) {
          names.push_back("...");
          break;
        }
        if (!layer.name().empty()) names.push_back(layer.name());
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "setup.freeze.layers[", n, "] = '", freeze.layers(n).substr(0, 64),
          "' names no top-level layer of ", spec.name(), "; its layers: ",
          names.empty() ? "(unnamed)" : absl::StrJoin(names, ", ")));
    }
  }
  if (freeze.layers_size() != 0 || lora) {
    // The layers before the first one that trains anything get no
    // gradient: autograd saves nothing for them.
    const std::set<std::string> targets = LoraTargets(setup);
    std::vector<bool> trains(out.spec.layers_size(), false);
    ForEachParamTensor(out.spec, [&](const ParamTensor& t) {
      if (t.spec_frozen) return;
      const bool adapted = LoraAdapts(t, targets);
      if (adapted || !out.weights_frozen[t.top_level]) {
        trains[t.top_level] = true;
      }
    });
    for (int i = 0; i < out.spec.layers_size() && !trains[i]; ++i) {
      out.spec.mutable_layers(i)->set_frozen(true);
    }
  }
  return out;
}

ModelStates ComputeModelStates(const FrozenSpec& frozen,
                               const TrainingSetup& setup,
                               double adapter_bytes) {
  ModelStates s;
  s.adapter_bytes = adapter_bytes;
  const double w = TrueHalfPrecision(setup) ? 2.0 : 4.0;
  const bool mixed = MixedPrecision(setup);
  const double compute = ActivationBytes(setup);
  const std::set<std::string> targets = LoraTargets(setup);
  const uint64_t rank = setup.lora().rank();
  const bool quantize =
      setup.quant_base() != TrainingSetup::BASE_QUANT_UNSPECIFIED;
  const bool loops = LoopsOverTensors(setup);
  double foreach_temporaries = 0;
  double largest_step = 0;  // the largest one-tensor step's temporaries
  double largest_in_backward = 0;

  const auto train = [&](const ParamTensor& t, double param_bytes) {
    const double e = static_cast<double>(t.Elements());
    const double c = static_cast<double>(t.copies);
    s.trainable += t.Elements() * t.copies;
    s.gradients += param_bytes * e * c;
    const double state = StateBytes(setup, t, param_bytes) * c;
    s.states += state;
    s.paged_states += PagedStateBytes(setup.optimizer(), t) * c;
    s.largest_gradient = std::max(s.largest_gradient, param_bytes * e);
    if (t.Elements() < kTorchaoOffloadMinSize) {
      s.small_gradients += param_bytes * e * c;
      s.small_states += state;
    }
    if (mixed) s.half_copies += 2.0 * e * c;
    const double step = TensorStepTemporaries(setup, e, param_bytes);
    if (!loops) foreach_temporaries += step * c;
    largest_step = std::max(largest_step, step);
    largest_in_backward = std::max(largest_in_backward, param_bytes * e + step);
  };

  // LoRA's A and B, trained in the adapters' dtype.
  const auto adapt = [&](const ParamTensor& t) {
    for (const ParamTensor& adapter : LoraAdapters(t, rank)) {
      s.adapter_params += adapter.Elements() * adapter.copies;
      s.weights += adapter_bytes * static_cast<double>(adapter.Elements()) *
                   static_cast<double>(adapter.copies);
      train(adapter, adapter_bytes);
    }
  };

  ForEachParamTensor(frozen.spec, [&](const ParamTensor& t) {
    const double e = static_cast<double>(t.Elements());
    const double c = static_cast<double>(t.copies);
    s.params += t.Elements() * t.copies;
    const bool linear = t.role == TensorRole::kLinear;
    if (quantize && linear) {
      s.quantized_params += t.Elements() * t.copies;
      const double per_weight =
          setup.quant_base() == TrainingSetup::NF4
              ? 0.5 + 1.0 / kNf4Block + 4.0 / (kNf4Block * kNf4ScaleBlock)
              : 1.0 + 4.0 / static_cast<double>(
                                std::max<uint64_t>(1, t.InFeatures()));
      s.weights += per_weight * e * c;
      s.dequantized = std::max(s.dequantized, compute * e);
    } else {
      s.weights += w * e * c;
    }
    if (t.spec_frozen) return;
    if (rank != 0 && LoraAdapts(t, targets)) {
      adapt(t);
      return;
    }
    if (!frozen.weights_frozen[t.top_level]) train(t, w);
  });
  // A tied head shares the table's weight but PEFT still wraps the head's
  // Linear with adapters of its own.
  if (rank != 0 && targets.count("lm_head") != 0) {
    ForEachTiedHead(frozen.spec, [&](const ParamTensor& t) {
      if (!t.spec_frozen) adapt(t);
    });
  }
  s.update_temporaries = loops ? largest_step : foreach_temporaries;
  if (setup.optimizer_in_backward())
    s.in_backward_buffers = largest_in_backward;
  return s;
}

namespace {

// The attention kernel the model's own default picks, by layer count, when
// the request names none; nothing when it names one or the model has no
// attention.
void AddAttentionAssumption(const v1::ModelSpec& spec,
                            const TrainingSetup& asked,
                            const TrainingSetup& setup,
                            std::vector<std::string>* out) {
  if (asked.attention() != TrainingSetup::ATTENTION_UNSPECIFIED ||
      asked.fused_attention() ||
      setup.attention() != TrainingSetup::ATTENTION_UNSPECIFIED) {
    return;
  }
  int fused = 0;
  int eager = 0;
  std::function<void(const v1::Layer&, uint64_t)> visit =
      [&](const v1::Layer& layer, uint64_t times) {
        const uint64_t n = times * (layer.repeat() == 0 ? 1 : layer.repeat());
        if (layer.has_attention()) {
          (FusedAttention(layer.attention(), setup) ? fused : eager) +=
              static_cast<int>(n);
        }
        if (layer.has_block()) {
          for (const v1::Layer& child : layer.block().layers()) visit(child, n);
        }
      };
  for (const v1::Layer& layer : spec.layers()) visit(layer, 1);
  if (fused + eager == 0) return;
  const auto layers = [](int n) {
    return absl::StrCat(n, n == 1 ? " layer" : " layers");
  };
  out->push_back(absl::StrCat(
      "attention: the model's default, ",
      eager == 0 ? absl::StrCat("sdpa (", layers(fused), "; no score matrix)")
      : fused == 0
          ? absl::StrCat("eager (", layers(eager), "; probabilities saved)")
          : absl::StrCat(layers(fused), " sdpa, ", eager, " eager"),
      "; --attention eager|sdpa|flash chooses"));
}

// The positions the spec was taken at, when the request gives none: the
// converted config's reason ("<N> positions per sample: <why>.") where the
// spec has one, else the model's standard length.
void AddPositionsAssumption(const v1::ModelSpec& spec,
                            const TrainingSetup& asked,
                            std::vector<std::string>* out) {
  if (asked.positions() != 0 || spec.positions() <= 1) return;
  std::string why = "the model's standard sequence length";
  const std::string lead =
      absl::StrCat(spec.positions(), " positions per sample: ");
  if (absl::StartsWith(spec.input_source(), lead)) {
    why = absl::StrCat(
        "the config's ",
        absl::StripSuffix(absl::StrReplaceAll(
                              spec.input_source().substr(lead.size()),
                              {{" (a training length; pass seq_len to change)",
                                ", a training length"}}),
                          "."));
  }
  out->push_back(absl::StrCat(
      "positions ", spec.positions(), " per sample (", why,
      "; --positions sets the longest sample, which a padded batch peaks "
      "at)"));
}

// The precision when the request gives none; QLoRA says where its base is
// dequantized to.
void AddPrecisionAssumption(const TrainingSetup& asked,
                            const TrainingSetup& setup,
                            const ModelStates& states,
                            std::vector<std::string>* out) {
  if (asked.precision() != TrainingSetup::PRECISION_UNSPECIFIED) return;
  if (setup.precision() != TrainingSetup::PRECISION_UNSPECIFIED &&
      setup.precision() != TrainingSetup::FP32) {
    // The framework profile chose it (plan lines say which).
    out->push_back(absl::StrCat(
        "precision ",
        absl::AsciiStrToLower(TrainingSetup::Precision_Name(setup.precision())),
        " (not given: the framework profile's; --explain says why)"));
    return;
  }
  const std::string precision = "fp32";
  if (states.quantized_params == 0) {
    out->push_back(absl::StrCat("precision ", precision,
                                " (not given; --precision bf16 for mixed "
                                "precision)"));
    return;
  }
  out->push_back(absl::StrCat(
      "precision ", precision, " (not given): QLoRA computes in ", precision,
      ", each layer of the ", Count(states.quantized_params), " ",
      TrainingSetup::BaseQuant_Name(setup.quant_base()),
      " linear weights dequantized to ", precision, " for compute (",
      FormatBytesAsGb(states.dequantized, 2),
      " at a time); --precision bf16 computes in bf16"));
}

}  // namespace

std::vector<std::string> SetupAssumptions(const v1::ModelSpec& spec,
                                          const TrainingSetup& setup,
                                          const ModelStates& states) {
  return SetupAssumptions(spec, setup, setup, states);
}

std::vector<std::string> SetupAssumptions(const v1::ModelSpec& spec,
                                          const TrainingSetup& asked,
                                          const TrainingSetup& setup,
                                          const ModelStates& states) {
  std::vector<std::string> out;
  AddAttentionAssumption(spec, asked, setup, &out);
  AddPositionsAssumption(spec, asked, &out);
  AddPrecisionAssumption(asked, setup, states, &out);
  if (states.adapter_params != 0 && asked.lora().targets().empty()) {
    const std::set<std::string> targets = LoraTargets(setup);
    const std::vector<std::string> names(targets.begin(), targets.end());
    out.push_back(absl::StrCat(
        "LoRA targets ", absl::StrJoin(names, ","),
        " (not given; --lora_targets chooses): ", Count(states.adapter_params),
        " adapter parameters (", states.adapter_bytes >= 4 ? "fp32" : "16-bit",
        ") train, ", Count(states.params), " base parameters frozen"));
  }
  if (asked.optimizer() == TrainingSetup::OPTIMIZER_UNSPECIFIED) {
    out.push_back(absl::StrCat(
        "optimizer ",
        OptimizerName(setup.optimizer() == TrainingSetup::OPTIMIZER_UNSPECIFIED
                          ? TrainingSetup::ADAMW
                          : setup.optimizer()),
        " (not given): ", FormatBytesAsGb(states.states, 2), " of state for ",
        Count(states.trainable), " trained parameters"));
  }
  AddOptimizerRemarks(setup, states, &out);
  AddActivationRemarks(setup, &out);
  if (asked.grad_accum() <= 1 && setup.grad_accum() > 1) {
    out.push_back(absl::StrCat(
        "grad_accum ", setup.grad_accum(),
        " (not given: the framework's): the peak is one microbatch of "
        "batch / ",
        setup.grad_accum(),
        " samples, with the gradients resident between microbatches"));
  }
  return out;
}

}  // namespace headroom
