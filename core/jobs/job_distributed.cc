// The files beside an HF-family job: DeepSpeed's config JSON and
// accelerate's config YAML. Applied after the job file: accelerate first
// (processes, machines, FSDP, mixed precision where the job is silent),
// then DeepSpeed ("auto" values from the job, as transformers' HfDeepSpeed
// config fills them; a set value that differs from the job's is the
// mismatch transformers raises).

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/jobs/job_kinds.h"

namespace headroom::jobs {
namespace {

using S = v1::TrainingSetup;

constexpr char kDeepSpeedEngine[] =
    "deepspeedai/DeepSpeed deepspeed/runtime/engine.py @ "
    "edaa7221267243c7be7fb49c5d5f5c4fb97b4641";

// A DeepSpeed value that may be "auto": nullopt for auto or absent (the
// job decides), else the integer; INVALID_ARGUMENT for anything else.
absl::StatusOr<std::optional<int64_t>> AutoInt(JobReader& r,
                                               absl::string_view key) {
  const Tree* value = r.Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_string() && value->get<std::string>() == "auto") {
    r.FromFile(key, "auto", "the job's value");
    return std::nullopt;
  }
  if (!value->is_number_integer() || value->get<int64_t>() < 1) {
    return r.Bad(key, absl::StrCat("= ", ValueText(*value),
                                   " is not a positive integer or \"auto\""));
  }
  return value->get<int64_t>();
}

// The DeepSpeed value `key` must equal the job's `job_value` (transformers'
// fill_match refuses a mismatch).
absl::Status Match(JobReader& r, absl::string_view key, int64_t value,
                   int64_t job_value, absl::string_view job_key) {
  if (value == job_value) {
    r.FromFile(key, absl::StrCat(value), "matches the job");
    return absl::OkStatus();
  }
  return r.Bad(
      key, absl::StrCat("= ", value, " contradicts the job's ", job_key, " = ",
                        job_value, " (transformers refuses the mismatch, ",
                        kHfDeepSpeed, "); set it to \"auto\" or ", job_value));
}

absl::Status ApplyBatch(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<int64_t> micro,
                   AutoInt(r, "train_micro_batch_size_per_gpu"));
  ASSIGN_OR_RETURN(std::optional<int64_t> accum,
                   AutoInt(r, "gradient_accumulation_steps"));
  ASSIGN_OR_RETURN(std::optional<int64_t> global,
                   AutoInt(r, "train_batch_size"));
  const int64_t job_accum = std::max<uint32_t>(1, job->setup.grad_accum());
  if (micro.has_value()) {
    RETURN_IF_ERROR(Match(r, "train_micro_batch_size_per_gpu", *micro,
                          job->micro_batch, "micro-batch"));
  }
  if (accum.has_value()) {
    RETURN_IF_ERROR(Match(r, "gradient_accumulation_steps", *accum, job_accum,
                          "gradient_accumulation_steps"));
  }
  if (global.has_value()) {
    const int64_t world = std::max<uint32_t>(1, job->setup.gpus());
    RETURN_IF_ERROR(Match(r, "train_batch_size", *global,
                          job->micro_batch * job_accum * world,
                          "micro-batch x gradient_accumulation_steps x GPUs"));
  }
  return absl::OkStatus();
}

// bf16.enabled / fp16.enabled: "auto" follows the job; true makes
// DeepSpeed's mixed precision (16-bit weights, fp32 master copy).
absl::Status ApplyPrecision(JobReader& r, DerivedJob* job) {
  for (const char* key : {"bf16.enabled", "fp16.enabled"}) {
    const Tree* value = r.Find(key);
    if (value == nullptr) continue;
    if (value->is_string() && value->get<std::string>() == "auto") {
      r.FromFile(key, "auto", "the job's precision");
      continue;
    }
    if (!value->is_boolean()) {
      return r.Bad(key, absl::StrCat("= ", ValueText(*value),
                                     " is not true, false or \"auto\""));
    }
    const bool bf16 = key[0] == 'b';
    const bool job_on = bf16 ? (job->setup.precision() == S::BF16_MIXED ||
                                job->setup.precision() == S::BF16_TRUE)
                             : job->setup.precision() == S::FP16_MIXED;
    if (job->precision_from_job && value->get<bool>() != job_on) {
      return r.Bad(
          key,
          absl::StrCat("= ", ValueText(*value), " contradicts the job's ",
                       bf16 ? "bf16" : "fp16", " = ", job_on ? "true" : "false",
                       " (", kHfDeepSpeed, ")"));
    }
    if (value->get<bool>()) {
      job->setup.set_precision(bf16 ? S::BF16_MIXED : S::FP16_MIXED);
      r.FromFile(key, "true", "precision");
    }
  }
  r.Find("fp16.loss_scale");
  r.Find("fp16.loss_scale_window");
  r.Find("fp16.initial_scale_power");
  r.Find("fp16.hysteresis");
  r.Find("fp16.min_loss_scale");
  return absl::OkStatus();
}

absl::StatusOr<bool> Offloaded(JobReader& r, absl::string_view key) {
  ASSIGN_OR_RETURN(std::optional<std::string> device, r.String(key));
  if (!device.has_value() || *device == "none") return false;
  if (*device != "cpu" && *device != "nvme") {
    return r.Bad(key, absl::StrCat("= ", *device,
                                   " is not known; allowed none, cpu, nvme"));
  }
  r.FromFile(key, *device, "offload");
  return true;
}

// The offload switches as S::Offload.
S::Offload OffloadOf(bool optimizer, bool params) {
  if (optimizer && params) return S::BOTH;
  if (optimizer) return S::OPTIMIZER;
  return params ? S::PARAMS : S::OFFLOAD_UNSPECIFIED;
}

// optimizer.type: Adam / AdamW run DeepSpeed's FusedAdam unless
// params.torch_adam (torch.optim.AdamW) or the state is offloaded (CPU
// Adam on the host).
absl::Status ApplyOptimizer(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<std::string> type, r.String("optimizer.type"));
  r.Find("optimizer.params");
  if (!type.has_value()) return absl::OkStatus();
  if (*type != "Adam" && *type != "AdamW") {
    return r.Bad("optimizer.type", absl::StrCat("= ", *type,
                                                " is not modelled; allowed "
                                                "Adam, AdamW"));
  }
  ASSIGN_OR_RETURN(std::optional<bool> torch_adam,
                   r.Bool("optimizer.params.torch_adam"));
  job->setup.set_optimizer(torch_adam.value_or(false) ? S::ADAMW
                                                      : S::ADAMW_FUSED);
  r.FromFile("optimizer.type", *type,
             absl::StrCat("optimizer = ",
                          torch_adam.value_or(false)
                              ? "ADAMW (torch_adam)"
                              : "ADAMW_FUSED (DeepSpeed FusedAdam, ",
                          torch_adam.value_or(false) ? "" : kDeepSpeedEngine,
                          torch_adam.value_or(false) ? "" : ")"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyDeepSpeed(JobReader& r, DerivedJob* job) {
  if (job->accelerate_fsdp) {
    return r.Bad("zero_optimization.stage",
                 "is given while the accelerate config's distributed_type is "
                 "FSDP; allowed one of DeepSpeed and FSDP");
  }
  job->setup.set_framework(S::DEEPSPEED);
  ASSIGN_OR_RETURN(std::optional<int64_t> stage,
                   r.Int("zero_optimization.stage", 0, 3));
  static constexpr S::Parallel kStages[] = {S::DDP, S::ZERO1, S::ZERO2,
                                            S::ZERO3};
  const int64_t s = stage.value_or(0);
  if (s > 0 || job->setup.gpus() > 1) job->setup.set_parallel(kStages[s]);
  if (stage.has_value()) {
    r.FromFile("zero_optimization.stage", absl::StrCat(s), "parallel");
  } else {
    r.Default("zero_optimization.stage", "0",
              absl::StrCat("ZeRO stage default 0, ", kDeepSpeedConfig));
  }
  ASSIGN_OR_RETURN(const bool optimizer,
                   Offloaded(r, "zero_optimization.offload_optimizer.device"));
  ASSIGN_OR_RETURN(const bool params,
                   Offloaded(r, "zero_optimization.offload_param.device"));
  if (params && s != 3) {
    return r.Bad("zero_optimization.offload_param.device",
                 absl::StrCat("needs stage 3; stage is ", s));
  }
  if (optimizer || params) job->setup.set_offload(OffloadOf(optimizer, params));
  RETURN_IF_ERROR(ApplyBatch(r, job));
  RETURN_IF_ERROR(ApplyPrecision(r, job));
  RETURN_IF_ERROR(ApplyOptimizer(r, job));
  return r.Finish(
      {"zero_optimization.stage", "zero_optimization.offload_optimizer.device",
       "zero_optimization.offload_param.device", "bf16.", "fp16.",
       "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
       "train_batch_size", "optimizer.", "activation_checkpointing."});
}

namespace {

absl::Status ApplyFsdp(JobReader& r, DerivedJob* job) {
  job->accelerate_fsdp = true;
  ASSIGN_OR_RETURN(std::optional<int64_t> version,
                   r.Int("fsdp_config.fsdp_version", 1, 2));
  ASSIGN_OR_RETURN(std::optional<std::string> strategy,
                   r.String("fsdp_config.fsdp_sharding_strategy"));
  ASSIGN_OR_RETURN(std::optional<bool> reshard,
                   r.Bool("fsdp_config.fsdp_reshard_after_forward"));
  S::Parallel parallel = S::FSDP_FULL;
  if (version.value_or(1) == 2) {
    if (reshard.has_value() && !*reshard) parallel = S::FSDP_GRAD_OP;
    if (reshard.has_value()) {
      r.FromFile("fsdp_config.fsdp_reshard_after_forward",
                 *reshard ? "true" : "false", "parallel");
    }
  } else if (strategy.has_value()) {
    if (*strategy == "SHARD_GRAD_OP" || *strategy == "2") {
      parallel = S::FSDP_GRAD_OP;
    } else if (*strategy == "HYBRID_SHARD" || *strategy == "4") {
      parallel = S::FSDP_HYBRID;
    } else if (*strategy == "NO_SHARD" || *strategy == "3") {
      parallel = S::DDP;
    } else if (*strategy != "FULL_SHARD" && *strategy != "1") {
      return r.Bad("fsdp_config.fsdp_sharding_strategy",
                   absl::StrCat("= ", *strategy,
                                " is not modelled; allowed FULL_SHARD, "
                                "SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD"));
    }
    r.FromFile("fsdp_config.fsdp_sharding_strategy", *strategy, "parallel");
  }
  job->setup.set_parallel(parallel);
  ASSIGN_OR_RETURN(std::optional<bool> offload,
                   r.Bool("fsdp_config.fsdp_offload_params"));
  if (offload.value_or(false)) {
    // FSDP's CPUOffload(offload_params=True): parameters, gradients and
    // the optimizer step on the host.
    job->setup.set_offload(S::BOTH);
    r.FromFile("fsdp_config.fsdp_offload_params", "true", "offload = BOTH");
  }
  ASSIGN_OR_RETURN(std::optional<bool> ac,
                   r.Bool("fsdp_config.fsdp_activation_checkpointing"));
  if (ac.value_or(false)) {
    job->setup.set_activation_checkpointing(true);
    job->setup.set_checkpointing(S::FULL);
    r.FromFile("fsdp_config.fsdp_activation_checkpointing", "true",
               "checkpointing = FULL");
  }
  return absl::OkStatus();
}

// accelerate's deepspeed_config block (no DeepSpeed file): stage and
// offload devices.
absl::Status ApplyAccelerateDeepSpeed(JobReader& r, DerivedJob* job) {
  job->setup.set_framework(S::DEEPSPEED);
  ASSIGN_OR_RETURN(std::optional<std::string> file,
                   r.String("deepspeed_config.deepspeed_config_file"));
  if (file.has_value()) {
    job->deepspeed_named = *file;
    r.FromFile("deepspeed_config.deepspeed_config_file", *file,
               "the DeepSpeed config");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> stage,
                   r.Int("deepspeed_config.zero_stage", 0, 3));
  if (stage.has_value()) {
    static constexpr S::Parallel kStages[] = {S::DDP, S::ZERO1, S::ZERO2,
                                              S::ZERO3};
    job->setup.set_parallel(kStages[*stage]);
    r.FromFile("deepspeed_config.zero_stage", absl::StrCat(*stage), "parallel");
  }
  ASSIGN_OR_RETURN(const bool optimizer,
                   Offloaded(r, "deepspeed_config.offload_optimizer_device"));
  ASSIGN_OR_RETURN(const bool params,
                   Offloaded(r, "deepspeed_config.offload_param_device"));
  if (optimizer || params) job->setup.set_offload(OffloadOf(optimizer, params));
  return absl::OkStatus();
}

}  // namespace

absl::Status ApplyAccelerate(JobReader& r, DerivedJob* job) {
  ASSIGN_OR_RETURN(std::optional<bool> cpu, r.Bool("use_cpu"));
  if (cpu.value_or(false)) {
    return r.Bad("use_cpu",
                 "= true: a CPU job has no GPU memory to check; "
                 "allowed false");
  }
  ASSIGN_OR_RETURN(std::optional<int64_t> processes,
                   r.Int("num_processes", 1, 512));
  ASSIGN_OR_RETURN(std::optional<int64_t> machines,
                   r.Int("num_machines", 1, 512));
  if (processes.has_value()) {
    job->setup.set_gpus(static_cast<uint32_t>(*processes));
    r.FromFile("num_processes", absl::StrCat(*processes), "gpus");
  }
  if (machines.value_or(1) > 1) {
    if (processes.value_or(1) % *machines != 0) {
      return r.Bad(
          "num_processes",
          absl::StrCat("= ", processes.value_or(1),
                       " is not a multiple of num_machines = ", *machines));
    }
    job->setup.set_nodes(static_cast<uint32_t>(*machines));
    job->setup.set_gpus_per_node(
        static_cast<uint32_t>(processes.value_or(1) / *machines));
    r.FromFile("num_machines", absl::StrCat(*machines), "nodes");
  }
  ASSIGN_OR_RETURN(std::optional<std::string> type,
                   r.String("distributed_type"));
  const std::string kind = type.value_or("NO");
  if (kind == "FSDP") {
    RETURN_IF_ERROR(ApplyFsdp(r, job));
  } else if (kind == "DEEPSPEED") {
    RETURN_IF_ERROR(ApplyAccelerateDeepSpeed(r, job));
  } else if (kind == "MULTI_GPU") {
    if (job->setup.gpus() > 1) job->setup.set_parallel(S::DDP);
  } else if (kind != "NO") {
    return r.Bad("distributed_type",
                 absl::StrCat("= ", kind,
                              " is not modelled; allowed NO, MULTI_GPU, "
                              "FSDP, DEEPSPEED"));
  }
  if (type.has_value()) r.FromFile("distributed_type", kind, "parallel");
  ASSIGN_OR_RETURN(std::optional<std::string> mixed,
                   r.String("mixed_precision"));
  if (mixed.has_value() && !job->precision_from_job) {
    if (*mixed == "bf16") {
      job->setup.set_precision(S::BF16_MIXED);
    } else if (*mixed == "fp16") {
      job->setup.set_precision(S::FP16_MIXED);
    } else if (*mixed != "no") {
      return r.Bad("mixed_precision",
                   absl::StrCat("= ", *mixed,
                                " is not modelled; allowed no, bf16, fp16"));
    }
    r.FromFile("mixed_precision", *mixed, "precision");
  } else if (mixed.has_value()) {
    r.FromFile("mixed_precision", *mixed,
               "nothing: the job file's bf16/fp16 decide");
  }
  return r.Finish(
      {"distributed_type", "num_processes", "num_machines", "mixed_precision",
       "fsdp_config.fsdp_sharding_strategy", "fsdp_config.fsdp_offload_params",
       "fsdp_config.fsdp_activation_checkpointing", "fsdp_config.fsdp_version",
       "fsdp_config.fsdp_reshard_after_forward", "deepspeed_config.zero_stage",
       "deepspeed_config.offload_", "deepspeed_config.deepspeed_config_file",
       "use_cpu"});
}

}  // namespace headroom::jobs
