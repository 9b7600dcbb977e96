#include "core/evidence/model_key.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/deterministic_bytes.h"
#include "core/memory/framework_profile.h"
#include "core/memory/parallel.h"

namespace headroom {
namespace {

// Names and remarks do not change what is allocated; a repeat of 0 means 1.
void StripLayer(v1::Layer* layer) {
  layer->clear_name();
  if (layer->repeat() == 0) layer->set_repeat(1);
  if (layer->has_block()) {
    for (v1::Layer& inner : *layer->mutable_block()->mutable_layers()) {
      StripLayer(&inner);
    }
  }
}

}  // namespace

std::string CanonicalArchitecture(const v1::ModelSpec& spec) {
  v1::ModelSpec architecture;
  architecture.set_positions(spec.positions());
  *architecture.mutable_layers() = spec.layers();
  for (v1::Layer& layer : *architecture.mutable_layers()) StripLayer(&layer);
  return DeterministicBytes(architecture);
}

std::string KeyId(const std::string& canonical) {
  // Fetched once: OpenSSL 3's one-shot SHA256() looks the algorithm up on
  // every call, which cost more than hashing a key.
  static const EVP_MD* const sha256 = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_bytes = 0;
  if (sha256 == nullptr ||
      EVP_Digest(canonical.data(), canonical.size(), digest, &digest_bytes,
                 sha256, nullptr) != 1 ||
      digest_bytes < 8) {
    SHA256(reinterpret_cast<const unsigned char*>(canonical.data()),
           canonical.size(), digest);
  }
  // "mk-" and the first 8 bytes in lowercase hex.
  return absl::StrCat("mk-", absl::BytesToHexString(absl::string_view(
                                 reinterpret_cast<const char*>(digest), 8)));
}

std::string CanonicalArchitectureInPlace(v1::ModelSpec* spec) {
  for (v1::Layer& layer : *spec->mutable_layers()) StripLayer(&layer);
  v1::ModelSpec architecture;
  architecture.set_positions(spec->positions());
  architecture.mutable_layers()->Swap(spec->mutable_layers());
  std::string bytes = DeterministicBytes(architecture);
  architecture.mutable_layers()->Swap(spec->mutable_layers());
  return bytes;
}

namespace {

// The framework profile's fields (framework_profile.h), written only where
// set so that the keys of setups without them stay as they were.
void NormalizeProfile(const v1::TrainingSetup& setup,
                      v1::TrainingSetup* normalized) {
  if (setup.framework() != v1::TrainingSetup::GENERIC) {
    normalized->set_framework(setup.framework());
    normalized->set_framework_version(setup.framework_version());
  }
  if (setup.loss() == v1::TrainingSetup::CHUNKED_CE) {
    normalized->set_loss(setup.loss());
    normalized->set_loss_chunks(setup.loss_chunks());
  }
  if (setup.checkpointing() == v1::TrainingSetup::FULL) {
    normalized->set_activation_checkpointing(true);
  } else if (setup.checkpointing() == v1::TrainingSetup::SELECTIVE) {
    normalized->set_activation_checkpointing(false);
    normalized->set_checkpointing(setup.checkpointing());
    normalized->set_checkpoint_every(setup.checkpoint_every());
  } else if (setup.checkpointing() == v1::TrainingSetup::NO_CHECKPOINTING) {
    normalized->set_activation_checkpointing(false);
  }
  normalized->set_activation_offloading(setup.activation_offloading());
}

}  // namespace

ModelKey ModelKeyOf(const std::string& architecture, uint64_t spec_positions,
                    const v1::TrainingSetup& asked, bool with_id) {
  // A run and an answer of a named framework are keyed as its profile runs
  // them (the profile only fills unset fields: applying it again is a
  // no-op).
  v1::TrainingSetup profiled;
  if (asked.framework() != v1::TrainingSetup::FRAMEWORK_UNSPECIFIED &&
      asked.framework() != v1::TrainingSetup::GENERIC) {
    profiled = asked;
    ApplyProfile(asked.positions() != 0 ? asked.positions() : spec_positions,
                 &profiled);
  }
  const v1::TrainingSetup& setup =
      asked.framework() == v1::TrainingSetup::FRAMEWORK_UNSPECIFIED ||
              asked.framework() == v1::TrainingSetup::GENERIC
          ? asked
          : profiled;
  v1::TrainingSetup normalized;
  normalized.set_precision(setup.precision() ==
                                   v1::TrainingSetup::PRECISION_UNSPECIFIED
                               ? v1::TrainingSetup::FP32
                               : setup.precision());
  normalized.set_optimizer(setup.optimizer() ==
                                   v1::TrainingSetup::OPTIMIZER_UNSPECIFIED
                               ? v1::TrainingSetup::ADAMW
                               : setup.optimizer());
  normalized.set_activation_checkpointing(setup.activation_checkpointing());
  // SDPA and FlashAttention keep the same tensors: one key, written as the
  // deprecated flag so keys of setups without the newer fields stay as
  // they were.
  normalized.set_fused_attention(
      setup.attention() == v1::TrainingSetup::SDPA ||
      setup.attention() == v1::TrainingSetup::FLASH ||
      (setup.attention() == v1::TrainingSetup::ATTENTION_UNSPECIFIED &&
       setup.fused_attention()));
  if (setup.attention() == v1::TrainingSetup::EAGER) {
    normalized.set_attention(v1::TrainingSetup::EAGER);
  }
  normalized.set_optimizer_in_backward(setup.optimizer_in_backward());
  if (setup.lora().rank() != 0) {
    v1::Lora* lora = normalized.mutable_lora();
    lora->set_rank(setup.lora().rank());
    std::vector<std::string> targets(setup.lora().targets().begin(),
                                     setup.lora().targets().end());
    std::sort(targets.begin(), targets.end());
    targets.erase(std::unique(targets.begin(), targets.end()), targets.end());
    for (std::string& target : targets) lora->add_targets(std::move(target));
    lora->set_dropout(setup.lora().dropout());
    normalized.set_quant_base(setup.quant_base());
  }
  if (setup.freeze().layers_size() != 0 ||
      setup.freeze().train_last_blocks() != 0) {
    v1::Freeze* freeze = normalized.mutable_freeze();
    std::vector<std::string> layers(setup.freeze().layers().begin(),
                                    setup.freeze().layers().end());
    std::sort(layers.begin(), layers.end());
    layers.erase(std::unique(layers.begin(), layers.end()), layers.end());
    for (std::string& layer : layers) freeze->add_layers(std::move(layer));
    freeze->set_train_last_blocks(setup.freeze().train_last_blocks());
  }
  if (setup.grad_accum() > 1) normalized.set_grad_accum(setup.grad_accum());
  normalized.set_compile(setup.compile());
  // A parallel setup is keyed by its layout (strategy, GPUs, tensor
  // parallel, nodes) and offload: a 4-GPU FSDP run anchors 4-GPU FSDP
  // answers only. One-GPU setups write none of it, so their keys stay.
  if (HasParallel(setup)) {
    const ParallelLayout layout = LayoutOf(setup);
    normalized.set_parallel(layout.strategy);
    normalized.set_gpus(layout.gpus);
    normalized.set_offload(setup.offload());
    if (layout.tensor_parallel > 1) {
      normalized.set_tensor_parallel(layout.tensor_parallel);
    }
    normalized.set_nodes(layout.nodes);
    normalized.set_gpus_per_node(layout.gpus_per_node);
  }
  NormalizeProfile(setup, &normalized);
  normalized.set_positions(setup.positions() != 0 ? setup.positions()
                                                  : spec_positions);
  const std::string setup_bytes = DeterministicBytes(normalized);
  ModelKey key;
  // Length-prefixed, so no spec's bytes can run into the setup's.
  key.canonical = absl::StrCat("headroom-model-key-1:", architecture.size(),
                               ":", architecture, setup_bytes);
  if (with_id) key.id = KeyId(key.canonical);
  return key;
}

ModelKey ModelKeyOf(const v1::ModelSpec& spec, const v1::TrainingSetup& setup) {
  return ModelKeyOf(CanonicalArchitecture(spec), spec.positions(), setup);
}

v1::MeasurementSource MeasuredBy(const v1::MeasuredRun& run) {
  if (run.measured_by() == v1::TORCH_HARNESS && run.setup().compile()) {
    return v1::TORCH_COMPILE;
  }
  if (run.measured_by() != v1::MEASUREMENT_SOURCE_UNSPECIFIED) {
    return run.measured_by();
  }
  if (run.simulated()) return v1::SIM;
  if (absl::StartsWith(run.source(), "probe ")) {
    return run.setup().compile() ? v1::TORCH_COMPILE : v1::TORCH_HARNESS;
  }
  return v1::REFERENCE;
}

const char* SourceName(v1::MeasurementSource source) {
  switch (source) {
    case v1::TORCH_HARNESS:
      return "torch-harness";
    case v1::TORCH_COMPILE:
      return "torch-compile";
    case v1::CUDA_PROBE:
      return "cuda-probe";
    case v1::SIM:
      return "sim";
    case v1::PUBLISHED:
      return "published";
    default:
      return "reference";
  }
}

}  // namespace headroom
