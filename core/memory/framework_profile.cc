#include "core/memory/framework_profile.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace headroom {
namespace {

using v1::TrainingSetup;

constexpr size_t kMaxVersionBytes = 32;

// The sources each rule follows (repository, path and commit; the line
// numbers are at that commit).
constexpr const char* kPeftAdapterCast =
    "huggingface/peft src/peft/tuners/tuners_utils.py:2657 "
    "cast_adapter_dtype (autocast_adapter_dtype=True upcasts bf16/fp16 "
    "adapters to fp32) @ 5d602fdbff04c33c1c4de55cda9d4ae1d7cb7e40";
constexpr const char* kHfLossUpcast =
    "huggingface/transformers src/transformers/loss/loss_utils.py "
    "ForCausalLMLoss (logits = logits.float() over the whole sequence) @ "
    "0114da07ec0e101b420a923dedeb6032b6ac3a44";
constexpr const char* kLitgptChunks =
    "Lightning-AI/litgpt litgpt/finetune/lora.py:304 "
    "model(input_ids, lm_head_chunk_size=128) and litgpt/utils.py "
    "chunked_cross_entropy(chunk_size=128) @ "
    "00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d";
constexpr const char* kLitgptPhases =
    "Lightning-AI/litgpt litgpt/finetune/lora.py fit(): validate() at "
    "eval.interval and generate_example() (EvalArgs max_new_tokens=100, "
    "line 72), save_lora_checkpoint at the end @ "
    "00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d";
constexpr const char* kLitgptAdapters =
    "Lightning-AI/litgpt litgpt/lora.py:125 lora_A = nn.Parameter(...) "
    "created under fabric.init_module (the precision's dtype) @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa";
constexpr const char* kLitgptFsdp1 =
    "Lightning-AI/litgpt litgpt/finetune/lora.py:147 FSDPStrategy("
    "auto_wrap_policy={Block}, activation_checkpointing_policy={Block}, "
    "limit_all_gathers=True) @ 00af8b0d9b43eaa3f8c812e3e8bd53ef38cbb49d";
constexpr const char* kLitgptFsdp2 =
    "Lightning-AI/litgpt litgpt/finetune/lora.py:522 parallelize_fn("
    "activation_checkpointing=True): checkpoint_wrapper on every block, "
    "fully_shard per block (since v0.5.11, 5ac69b06) @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa";
constexpr const char* kTorchtuneChunks =
    "pytorch/torchtune torchtune/modules/loss/ce_chunked_output_loss.py:35 "
    "CEWithChunkedOutputLoss(num_output_chunks=8) @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1";
constexpr const char* kTorchtuneAdapters =
    "pytorch/torchtune torchtune/modules/peft/lora.py:99 lora_a = "
    "nn.Linear(...) built under training.set_default_dtype(self._dtype) "
    "(recipes/lora_finetune_single_device.py:410) @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1";
constexpr const char* kTorchtuneFsdp2 =
    "pytorch/torchtune recipes/lora_finetune_distributed.py:548 "
    "training.shard_model (fully_shard per layer) @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1";
// How each loads: the LOAD phase's rule (phases.h: the weights as stored
// plus one weight being quantised) holds for each, cited here so the plan
// says why.
constexpr const char* kHfLoad =
    "huggingface/transformers src/transformers/integrations/bitsandbytes.py "
    "set_module_quantized_tensor_to_device (meta init in the load dtype, "
    "each checkpoint tensor set on the device and a 4-bit one quantised "
    "there, one at a time) @ 01ae98ae2414210efd0d9ac1ffe78ff21588f1f7";
constexpr const char* kLitgptLoad =
    "Lightning-AI/litgpt litgpt/finetune/lora.py fabric.init_module("
    "empty_init=world_size > 1) then load_checkpoint @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa; Lightning-AI/pytorch-"
    "lightning src/lightning/fabric/plugins/precision/bitsandbytes.py "
    "_quantize_on_load_hook @ d9ff9f3b62d77dd89592d92b018d96d5dfe1aae8";
constexpr const char* kTorchtuneLoad =
    "pytorch/torchtune torchtune/modules/peft/lora.py (to_nf4 of the base "
    "weight) and torchtune/training/_distributed.py "
    "load_from_full_model_state_dict (per parameter) @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1";
// Save is not a default phase of any profile: each gathers a full state
// dict to the host one unit or parameter at a time (or saves the adapters
// only), which the save phase (phases.h: the whole model gathered on the
// GPU) does not describe; --phases save asks for that worst case.
constexpr const char* kNoSave =
    "save left out: huggingface/accelerate src/accelerate/utils/"
    "dataclasses.py:2043 FullStateDictConfig(offload_to_cpu=True, "
    "rank0_only=True) @ 16cb6eb80dd9aa8b4df1a63ef57863e455d53b83; "
    "pytorch/torchtune torchtune/training/_distributed.py "
    "gather_cpu_state_dict (full_tensor().cpu() per parameter) @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1; Lightning-AI/litgpt "
    "litgpt/finetune/lora.py:546 save_lora_checkpoint (the adapters only) @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa";

struct NamedFramework {
  TrainingSetup::Framework framework;
  const char* name;
};
constexpr NamedFramework kFrameworks[] = {
    {TrainingSetup::GENERIC, "generic"},
    {TrainingSetup::HF_TRAINER, "hf-trainer"},
    {TrainingSetup::LITGPT, "litgpt"},
    {TrainingSetup::TORCHTUNE, "torchtune"},
    {TrainingSetup::DEEPSPEED, "deepspeed"},
    {TrainingSetup::TORCH, "torch"},
};

bool Checkpointed(const TrainingSetup& setup) {
  return setup.checkpointing() != TrainingSetup::CHECKPOINTING_UNSPECIFIED ||
         setup.activation_checkpointing();
}

void SetPhases(std::initializer_list<v1::JobPhase> phases,
               TrainingSetup* setup) {
  for (v1::JobPhase phase : phases) setup->add_phases(phase);
}

// Several GPUs: the framework's strategy and checkpointing when unset.
void ShardAsFramework(const char* source, bool checkpoint, TrainingSetup* setup,
                      AppliedProfile* out) {
  if (setup->gpus() <= 1) return;
  if (setup->parallel() == TrainingSetup::PARALLEL_UNSPECIFIED) {
    setup->set_parallel(TrainingSetup::FSDP_FULL);
    out->rules.push_back({"several GPUs: FSDP full shard", source});
  }
  if (checkpoint && !Checkpointed(*setup)) {
    setup->set_checkpointing(TrainingSetup::FULL);
    setup->set_activation_checkpointing(true);
    out->rules.push_back(
        {"several GPUs: every block checkpointed (full)", source});
  }
}

void ApplyLitgpt(uint64_t positions, TrainingSetup* setup,
                 AppliedProfile* out) {
  out->adapter_bytes = 0;
  out->rules.push_back(
      {"load: built on the device in the precision's dtype (on meta under "
       "several GPUs), a 4-bit base quantised as it loads",
       kLitgptLoad});
  out->rules.push_back(
      {"LoRA adapters in the weights' dtype", kLitgptAdapters});
  if (setup->loss() == TrainingSetup::LOSS_UNSPECIFIED) {
    setup->set_loss(TrainingSetup::CHUNKED_CE);
    if (setup->loss_chunks() == 0) {
      setup->set_loss_chunks(static_cast<uint32_t>(
          std::max<uint64_t>(1, (positions + 127) / 128)));
    }
    out->rules.push_back(
        {absl::StrCat("loss: the head and cross-entropy in ",
                      setup->loss_chunks(), " chunks of 128 tokens"),
         kLitgptChunks});
  }
  if (setup->phases().empty()) {
    SetPhases({v1::LOAD, v1::STEP, v1::EVAL, v1::GENERATE}, setup);
    if (setup->generate_tokens() == 0) setup->set_generate_tokens(100);
    out->rules.push_back(
        {"phases: load, step, eval, generate (100 new tokens)", kLitgptPhases});
    out->rules.push_back({"phases: no save", kNoSave});
  }
  // The sharding and checkpointing rules are finetune/lora.py's; full
  // fine-tuning (finetune/full.py) and pretraining (pretrain.py) choose
  // their own, so a setup without adapters keeps what it says.
  if (setup->lora().rank() == 0) return;
  const bool fsdp1 = VersionBefore(setup->framework_version(), "0.5.11");
  ShardAsFramework(fsdp1 ? kLitgptFsdp1 : kLitgptFsdp2, true, setup, out);
  if (setup->gpus() > 1) {
    out->rules.push_back(
        {fsdp1 ? "FSDP flavour: FSDP1 flat parameters (before 0.5.11)"
               : "FSDP flavour: FSDP2 per-parameter (0.5.11 and after)",
         fsdp1 ? kLitgptFsdp1 : kLitgptFsdp2});
  }
}

void ApplyTorchtune(TrainingSetup* setup, AppliedProfile* out) {
  out->adapter_bytes = 0;
  out->rules.push_back(
      {"load: built in the recipe's dtype, an NF4 base converted as each "
       "weight loads",
       kTorchtuneLoad});
  out->rules.push_back(
      {"LoRA adapters in the weights' dtype", kTorchtuneAdapters});
  if (setup->loss() == TrainingSetup::LOSS_UNSPECIFIED) {
    setup->set_loss(TrainingSetup::CHUNKED_CE);
    if (setup->loss_chunks() == 0) setup->set_loss_chunks(8);
    out->rules.push_back({absl::StrCat("loss: chunked cross-entropy, ",
                                       setup->loss_chunks(), " chunks"),
                          kTorchtuneChunks});
  }
  if (setup->phases().empty()) {
    SetPhases({v1::LOAD, v1::STEP}, setup);
    out->rules.push_back({"phases: load, step", kNoSave});
  }
  ShardAsFramework(kTorchtuneFsdp2, false, setup, out);
}

// transformers' Trainer (and what runs it: TRL, axolotl) with PEFT.
void ApplyHfTrainer(TrainingSetup* setup, AppliedProfile* out) {
  out->rules.push_back(
      {"load: meta init in the load dtype, each tensor set on the device, a "
       "4-bit one quantised there one at a time",
       kHfLoad});
  out->rules.push_back({"LoRA adapters in fp32", kPeftAdapterCast});
  if (setup->loss() == TrainingSetup::LOSS_UNSPECIFIED) {
    setup->set_loss(TrainingSetup::FULL_CE);
    out->rules.push_back(
        {"loss: full logits, upcast to fp32 for the cross-entropy",
         kHfLossUpcast});
  }
  if (setup->phases().empty()) {
    SetPhases({v1::LOAD, v1::STEP}, setup);
    out->rules.push_back({"phases: load, step", kNoSave});
  }
}

}  // namespace

const char* FrameworkName(TrainingSetup::Framework framework) {
  for (const NamedFramework& f : kFrameworks) {
    if (f.framework == framework) return f.name;
  }
  return "generic";
}

bool ParseFramework(const std::string& name,
                    TrainingSetup::Framework* framework) {
  for (const NamedFramework& f : kFrameworks) {
    if (name == f.name) {
      *framework = f.framework;
      return true;
    }
  }
  return false;
}

const std::vector<TrainingSetup::Framework>& AllFrameworks() {
  static const auto* all = [] {
    auto* v = new std::vector<TrainingSetup::Framework>();
    for (const NamedFramework& f : kFrameworks) v->push_back(f.framework);
    return v;
  }();
  return *all;
}

absl::Status ValidateFramework(const TrainingSetup& setup) {
  if (!TrainingSetup::Framework_IsValid(setup.framework())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.framework = ", setup.framework(),
        " is not allowed; allowed GENERIC, HF_TRAINER, LITGPT, TORCHTUNE, "
        "DEEPSPEED, TORCH (--framework generic|hf-trainer|litgpt|torchtune|"
        "deepspeed|torch)"));
  }
  const std::string& v = setup.framework_version();
  bool ok = v.size() <= kMaxVersionBytes;
  for (absl::string_view part : absl::StrSplit(v, '.')) {
    uint32_t n;
    if (!v.empty() && !absl::SimpleAtoi(part, &n)) ok = false;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.framework_version = '", v.substr(0, kMaxVersionBytes),
        "' is not allowed; allowed empty (the profile's newest) or "
        "dot-separated numbers such as 0.5.10, at most 32 bytes"));
  }
  return absl::OkStatus();
}

bool VersionBefore(const std::string& a, const std::string& b) {
  if (a.empty()) return false;
  const std::vector<absl::string_view> x = absl::StrSplit(a, '.');
  const std::vector<absl::string_view> y = absl::StrSplit(b, '.');
  for (size_t i = 0; i < std::max(x.size(), y.size()); ++i) {
    uint32_t p = 0;
    uint32_t q = 0;
    if (i < x.size() && !absl::SimpleAtoi(x[i], &p)) p = 0;
    if (i < y.size() && !absl::SimpleAtoi(y[i], &q)) q = 0;
    if (p != q) return p < q;
  }
  return false;
}

AppliedProfile ApplyProfile(uint64_t positions, TrainingSetup* setup) {
  AppliedProfile out;
  out.framework = setup->framework() == TrainingSetup::FRAMEWORK_UNSPECIFIED
                      ? TrainingSetup::GENERIC
                      : setup->framework();
  out.label = FrameworkName(out.framework);
  if (!setup->framework_version().empty()) {
    absl::StrAppend(&out.label, " ", setup->framework_version());
  }
  switch (out.framework) {
    case TrainingSetup::LITGPT:
      ApplyLitgpt(positions, setup, &out);
      break;
    case TrainingSetup::TORCHTUNE:
      ApplyTorchtune(setup, &out);
      break;
    case TrainingSetup::HF_TRAINER:
      ApplyHfTrainer(setup, &out);
      break;
    case TrainingSetup::DEEPSPEED:
      if (setup->phases().empty()) {
        SetPhases({v1::LOAD, v1::STEP}, setup);
        out.rules.push_back({"phases: load, step", kNoSave});
      }
      out.rules.push_back({"LoRA adapters in fp32", kPeftAdapterCast});
      break;
    default:  // generic and a hand-written torch loop: the model as is
      out.rules.push_back(
          {"the idealised framework: the setup as given, LoRA adapters in "
           "fp32 as PEFT keeps them",
           kPeftAdapterCast});
      break;
  }
  return out;
}

}  // namespace headroom
