#ifndef HEADROOM_CORE_MEMORY_MODEL_SPEC_H_
#define HEADROOM_CORE_MEMORY_MODEL_SPEC_H_

// Validation and parameter counting for a ModelSpec.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/value_bounds.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// Largest value accepted for any size field (dims, counts, positions).
inline constexpr uint64_t kMaxSpecDimension = uint64_t{1} << 32;
// Deepest nesting of blocks accepted.
inline constexpr int kMaxBlockDepth = 8;

// Checks that the spec is usable: a name, at least one layer, every layer has
// a kind, every size the kind needs is set and within 1..2^32, heads divide
// where required, positions are known, and the parameter count, every
// product and sum of it checked for overflow, is at most kMaxParams.
// INVALID_ARGUMENT names the field path (e.g. "layers[3].attention.heads")
// and the allowed range, or the layer and the product that overflows
// ("spec.layers[0]: layer 'fc1' (Linear): 4294967296 x 4294967296 overflows
// the parameter count").
absl::Status ValidateSpec(const v1::ModelSpec& spec);

// Number of trainable parameters; the spec must be valid (ValidateSpec
// holds it to kMaxParams). A count that would overflow saturates at
// UINT64_MAX rather than wrapping to a small number.
uint64_t CountParams(const v1::ModelSpec& spec);

// Parameters that train: those outside frozen layers.
uint64_t CountTrainableParams(const v1::ModelSpec& spec);

// Parameters of one layer, repeat included; saturates as CountParams.
uint64_t CountLayerParams(const v1::Layer& layer);

// Parses a spec from its JSON file text and validates it. `what` names the
// source in errors (a file path or "model.spec").
absl::StatusOr<v1::ModelSpec> ParseSpecJson(absl::string_view json,
                                            absl::string_view what);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_MODEL_SPEC_H_
