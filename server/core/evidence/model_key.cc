#include "server/core/evidence/model_key.h"

#include <openssl/sha.h>

#include <cstdio>

#include "absl/strings/match.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace headroom {
namespace {

std::string DeterministicBytes(const google::protobuf::Message& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&coded);
  }
  return bytes;
}

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

ModelKey ModelKeyOf(const v1::ModelSpec& spec, const v1::TrainingSetup& setup) {
  v1::ModelSpec architecture = spec;
  architecture.clear_name();
  architecture.clear_family();
  architecture.clear_source();
  architecture.clear_input_source();
  architecture.clear_notes();
  for (v1::Layer& layer : *architecture.mutable_layers()) StripLayer(&layer);

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
  normalized.set_fused_attention(setup.fused_attention());
  normalized.set_positions(setup.positions() != 0 ? setup.positions()
                                                  : spec.positions());

  const std::string spec_bytes = DeterministicBytes(architecture);
  const std::string setup_bytes = DeterministicBytes(normalized);
  ModelKey key;
  // Length-prefixed, so no spec's bytes can run into the setup's.
  key.canonical = "headroom-model-key-1:" + std::to_string(spec_bytes.size()) +
                  ":" + spec_bytes + setup_bytes;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.canonical.data()),
         key.canonical.size(), digest);
  char hex[17];
  for (int i = 0; i < 8; ++i) {
    std::snprintf(hex + 2 * i, 3, "%02x", digest[i]);
  }
  key.id = std::string("mk-") + hex;
  return key;
}

v1::MeasurementSource MeasuredBy(const v1::MeasuredRun& run) {
  if (run.measured_by() != v1::MEASUREMENT_SOURCE_UNSPECIFIED) {
    return run.measured_by();
  }
  if (run.simulated()) return v1::SIM;
  if (absl::StartsWith(run.source(), "probe ")) return v1::TORCH_HARNESS;
  return v1::REFERENCE;
}

const char* SourceName(v1::MeasurementSource source) {
  switch (source) {
    case v1::TORCH_HARNESS:
      return "torch-harness";
    case v1::CUDA_PROBE:
      return "cuda-probe";
    case v1::SIM:
      return "sim";
    default:
      return "reference";
  }
}

}  // namespace headroom
