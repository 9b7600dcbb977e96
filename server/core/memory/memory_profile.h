#ifndef HEADROOM_SERVER_CORE_MEMORY_MEMORY_PROFILE_H_
#define HEADROOM_SERVER_CORE_MEMORY_MEMORY_PROFILE_H_

// The memory model: the six component byte counts of a training step, as a
// part independent of batch plus a part per sample, so that any batch (and
// the largest batch that fits) is O(1) once a profile is built.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// Component order everywhere in the core.
enum Component : int {
  kOptimizer = 0,
  kOutputs = 1,
  kAttention = 2,
  kInternal = 3,
  kRecurrent = 4,
  kTransient = 5,
};
inline constexpr int kNumComponents = 6;
using ComponentArray = std::array<double, kNumComponents>;

// Lowercase component names in Component order ("optimizer", ...).
const std::array<const char*, kNumComponents>& ComponentNames();

// Bytes of each component at batch B: fixed[c] + B * per_sample[c], except
// the transient, which is one buffer, the larger of the step's fixed-size
// candidate (the optimizer's temporaries) and the largest per-sample one
// times B. Every component is non-decreasing in B.
struct MemoryProfile {
  uint64_t params = 0;
  ComponentArray fixed_bytes{};
  ComponentArray per_sample_bytes{};

  // Component bytes at `batch`.
  ComponentArray BytesAt(uint64_t batch) const;
};

// Builds the profile of `spec` trained with `setup`. The spec must be valid
// (ValidateSpec); INVALID_ARGUMENT for an unusable setup.
absl::StatusOr<MemoryProfile> BuildProfile(const v1::ModelSpec& spec,
                                           const v1::TrainingSetup& setup);

// One top-level layer's share of a model: its parameters and the
// per-sample bytes it adds to each component (the transient entry is its
// own candidate; the model's transient is the largest candidate).
struct LayerShare {
  std::string name;
  uint32_t repeat = 1;
  uint64_t params = 0;
  ComponentArray per_sample_bytes{};
};

// The profile's activations split by top-level layer (a block with its
// repeat counts as one), for `headroom model inspect`.
absl::StatusOr<std::vector<LayerShare>> LayerBreakdown(
    const v1::ModelSpec& spec, const v1::TrainingSetup& setup);

// Factors as an array in Component order, and back.
ComponentArray FactorArray(const v1::Factors& factors);
v1::Factors FactorsFromArray(const ComponentArray& values);

// Predicted peak in GB (10^9 bytes): sum of factor * bytes.
double PeakGb(const ComponentArray& bytes, const ComponentArray& factors);

}  // namespace headroom

#endif  // HEADROOM_SERVER_CORE_MEMORY_MEMORY_PROFILE_H_
