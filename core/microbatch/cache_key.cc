#include "core/microbatch/cache_key.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "base/deterministic_bytes.h"
#include "core/microbatch/plan.h"
#include "core/microbatch/select.h"

namespace headroom {
namespace {

// 64-bit FNV-1a as 16 hex digits.
std::string Fnv1aHex(const std::string& bytes) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace

std::string CacheKeyBytes(const v1::AutotuneCacheKey& key) {
  return DeterministicBytes(key);
}

std::string CacheKeyId(const v1::AutotuneCacheKey& key) {
  return Fnv1aHex(CacheKeyBytes(key));
}

std::string SourceHash(const v1::ModelSpec& spec,
                       const v1::TrainingSetup& setup) {
  // An unset precision is fp32 and an unset optimizer AdamW (model.proto):
  // written as those, so a client that sends only what the user gave hits
  // the entries of one that sent the defaults (as model keys do).
  v1::TrainingSetup normalized = setup;
  if (normalized.precision() == v1::TrainingSetup::PRECISION_UNSPECIFIED) {
    normalized.set_precision(v1::TrainingSetup::FP32);
  }
  if (normalized.optimizer() == v1::TrainingSetup::OPTIMIZER_UNSPECIFIED) {
    normalized.set_optimizer(v1::TrainingSetup::ADAMW);
  }
  return Fnv1aHex(DeterministicBytes(spec) + DeterministicBytes(normalized));
}

v1::AutotuneCacheKey AutotuneKeyFor(
    const v1::AutotunePlan& autotune, const v1::ModelSpec& spec,
    const v1::GpuDevice& gpu,
    const google::protobuf::Map<std::string, std::string>& framework_versions) {
  const v1::PlanMicrobatchRequest& request = autotune.request();
  v1::AutotuneCacheKey key;
  key.set_version(1);
  key.set_kind(gpu.simulated() ? "sim" : "gpu");
  key.mutable_gpu()->set_name(gpu.name());
  key.mutable_gpu()->set_total_memory(gpu.memory_bytes());
  const std::vector<std::string> parts =
      absl::StrSplit(gpu.compute_capability(), '.');
  int major = 0, minor = 0;
  if (parts.size() == 2 && absl::SimpleAtoi(parts[0], &major) &&
      absl::SimpleAtoi(parts[1], &minor)) {
    key.mutable_gpu()->add_capability(major);
    key.mutable_gpu()->add_capability(minor);
  }
  key.set_cuda(gpu.cuda_version());
  for (const auto& [name, version] : framework_versions) {
    if (name == "torch") {
      key.set_torch(version);
    } else if (name == "cuda") {
      key.set_cuda(version);
    } else if (name == "python") {
      key.set_python(version);
    } else {
      (*key.mutable_packages())[name] = version;
    }
  }
  v1::AutotuneSettings& settings = *key.mutable_settings();
  settings.set_context(request.context());
  settings.set_global_batch(request.global_batch());
  std::vector<uint32_t> candidates(request.microbatch_candidates().begin(),
                                   request.microbatch_candidates().end());
  std::sort(candidates.begin(), candidates.end());
  for (uint32_t c : candidates) settings.add_microbatch_candidates(c);
  settings.set_batch_selection(autotune.policy());
  settings.set_gradient_checkpointing(
      request.setup().activation_checkpointing());
  settings.set_compile_model(request.compile_model());
  settings.set_autotune_microbatch(true);
  settings.set_attention_backend(request.attention_backend());
  settings.set_vram_fraction(request.vram_fraction());
  const absl::StatusOr<v1::TrainingSetup> setup = MicrobatchSetup(request);
  key.set_source(SourceHash(spec, setup.ok() ? *setup : request.setup()));
  if (!candidates.empty()) {
    key.set_requested_microbatch_ceiling(candidates.back());
  }
  return key;
}

}  // namespace headroom
