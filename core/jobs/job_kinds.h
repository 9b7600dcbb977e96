#ifndef HEADROOM_CORE_JOBS_JOB_KINDS_H_
#define HEADROOM_CORE_JOBS_JOB_KINDS_H_

// Internal to core/jobs: what one kind's reader makes of its file, and the
// readers (one file per family: job_litgpt.cc, job_torchtune.cc, job_hf.cc
// for axolotl / TRL / TrainingArguments, job_distributed.cc for DeepSpeed
// and accelerate). Each reads its keys, writes the setup, records every key
// and default in the derivation, and ends with JobReader::Finish.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/jobs/job_reader.h"
#include "headroom/v1/model.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom::jobs {

// The pieces of a CheckFit request a job's files give.
struct DerivedJob {
  // The model as the files name it, best first (a hub id, a framework's
  // name for it, a checkpoint directory's last component).
  std::vector<std::string> model_ids;
  v1::TrainingSetup setup;
  // Samples per GPU per forward pass; the step's batch is this x
  // setup.grad_accum.
  uint32_t micro_batch = 1;
  // HF family only: whether the job file set bf16 / fp16 itself (an
  // accelerate config's mixed_precision applies only where it did not),
  // and the DeepSpeed file it names ("" if none).
  bool precision_from_job = false;
  std::string deepspeed_named;
  // The accelerate config chose FSDP (a DeepSpeed file then contradicts).
  bool accelerate_fsdp = false;
};

// Sources the defaults cite (repository path @ commit).
inline constexpr char kLitgptLora[] =
    "Lightning-AI/litgpt litgpt/finetune/lora.py @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa";
inline constexpr char kLitgptFull[] =
    "Lightning-AI/litgpt litgpt/finetune/full.py @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa";
inline constexpr char kLitgptUtils[] =
    "Lightning-AI/litgpt litgpt/utils.py @ "
    "26857050fe3ff627cd714fe92f5838f51a3d5efa";
inline constexpr char kTorchtuneRecipe[] =
    "pytorch/torchtune recipes/lora_finetune_single_device.py @ "
    "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1";
inline constexpr char kTrainingArgs[] =
    "huggingface/transformers src/transformers/training_args.py @ "
    "00349ae87eddc872ffa21a8a54f264375a0056a8";
inline constexpr char kTrlSftConfig[] =
    "huggingface/trl trl/trainer/sft_config.py @ "
    "f2cd57710ae345ea6428ae95363267fcf38a3dc8";
inline constexpr char kTrlModelConfig[] =
    "huggingface/trl trl/trainer/model_config.py @ "
    "f2cd57710ae345ea6428ae95363267fcf38a3dc8";
inline constexpr char kAxolotlSchema[] =
    "axolotl-ai-cloud/axolotl src/axolotl/utils/schemas/config.py @ "
    "067b021c8b87a9e5e380b9173c704cf7340e30f5";
inline constexpr char kDeepSpeedConfig[] =
    "deepspeedai/DeepSpeed deepspeed/runtime/config.py @ "
    "edaa7221267243c7be7fb49c5d5f5c4fb97b4641";
inline constexpr char kHfDeepSpeed[] =
    "huggingface/transformers src/transformers/integrations/deepspeed.py @ "
    "00349ae87eddc872ffa21a8a54f264375a0056a8";
inline constexpr char kAccelerateConfig[] =
    "huggingface/accelerate src/accelerate/commands/config/config_args.py @ "
    "16cb6eb80dd9aa8b4df1a63ef57863e455d53b83";

absl::Status ReadLitgpt(JobReader& reader, DerivedJob* job);
absl::Status ReadTorchtune(JobReader& reader, DerivedJob* job);
absl::Status ReadAxolotl(JobReader& reader, DerivedJob* job);
absl::Status ReadTrl(JobReader& reader, DerivedJob* job);
absl::Status ReadTrainingArguments(JobReader& reader, DerivedJob* job);
// Applied after the job file: the accelerate config, then the DeepSpeed
// config ("auto" values resolved from the job as transformers does).
absl::Status ApplyAccelerate(JobReader& reader, DerivedJob* job);
absl::Status ApplyDeepSpeed(JobReader& reader, DerivedJob* job);

// Shared by the readers: a LoRA target as the frameworks name it ("q_proj",
// litgpt's "lora_query", torchtune's "output_proj") in Lora.targets' words;
// nullopt for a name headroom does not model.
std::optional<std::string> LoraTarget(absl::string_view name);

// Reads the list `key` of module names into job->setup.lora.targets
// (LoraTarget each), recording it; INVALID_ARGUMENT naming the key, the
// module and `allowed` for a name headroom does not model.
absl::Status ReadLoraModules(JobReader& r, const std::string& key,
                             const char* allowed, DerivedJob* job);

// An optimizer as transformers' `optim` names it (axolotl, TRL and
// TrainingArguments share the names); nullopt for one headroom does not
// model.
std::optional<v1::TrainingSetup::Optimizer> HfOptimizer(absl::string_view name);

// An optimizer by its class path (litgpt's and torchtune's
// `_component_` / class_path), `fused` from its arguments; nullopt for one
// headroom does not model.
std::optional<v1::TrainingSetup::Optimizer> OptimizerClass(
    absl::string_view path, bool fused);

}  // namespace headroom::jobs

#endif  // HEADROOM_CORE_JOBS_JOB_KINDS_H_
