#ifndef HEADROOM_CORE_EVIDENCE_MODEL_KEY_H_
#define HEADROOM_CORE_EVIDENCE_MODEL_KEY_H_

// "The same model and setup" (README.md, "Answers anchored on measurements"):
// the key measured runs are stored under and answers look their evidence up by.

#include <string>

#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// A model-and-setup key. `canonical` is the architecture with every name and
// remark removed (spec and layer names, family, sources, notes) plus the
// setup fields that change memory (precision, optimizer, checkpointing,
// attention, positions), with defaults made explicit; two keys are equal
// exactly when their canonical bytes are, so specs that differ in one
// dimension never share a key. `id` is the first 16 hex digits of the
// bytes' SHA-256, for display and lookup only.
struct ModelKey {
  std::string canonical;
  std::string id;

  bool operator==(const ModelKey& other) const {
    return canonical == other.canonical;
  }
  bool operator<(const ModelKey& other) const {
    return canonical < other.canonical;
  }
};

// The key of `spec` trained with `setup`. A catalog template, an inline
// spec, an HF config or an ONNX graph that resolve to the same layers and
// lengths give the same key.
ModelKey ModelKeyOf(const v1::ModelSpec& spec, const v1::TrainingSetup& setup);

// The same in two steps, for callers that key one spec many times (a
// catalog template): the architecture's canonical bytes once, then the key
// of those bytes with a setup. `spec_positions` is the spec's positions.
// Without `with_id` the id is left empty (a lookup needs only the bytes;
// KeyId fills it in when needed).
std::string CanonicalArchitecture(const v1::ModelSpec& spec);
// The same bytes without copying the layers: strips `spec`'s layer names
// in place (a copy the caller owns) and serializes it.
std::string CanonicalArchitectureInPlace(v1::ModelSpec* spec);
ModelKey ModelKeyOf(const std::string& architecture, uint64_t spec_positions,
                    const v1::TrainingSetup& setup, bool with_id = true);

// "mk-" and the first 16 hex digits of the SHA-256 of `canonical`.
std::string KeyId(const std::string& canonical);

// How `run` was measured: its measured_by, else SIM for a simulated run,
// TORCH_HARNESS for a worker's probe ("probe p-N ..."), REFERENCE for an
// imported row.
v1::MeasurementSource MeasuredBy(const v1::MeasuredRun& run);

// "reference", "torch-harness", "cuda-probe", "sim".
const char* SourceName(v1::MeasurementSource source);

}  // namespace headroom

#endif  // HEADROOM_CORE_EVIDENCE_MODEL_KEY_H_
