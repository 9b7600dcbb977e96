#ifndef HEADROOM_CORE_MEMORY_MEMORY_PROFILE_H_
#define HEADROOM_CORE_MEMORY_MEMORY_PROFILE_H_

// The memory model: the six component byte counts of a training step, as a
// part independent of batch plus a part per sample, so that any batch (and
// the largest batch that fits) is O(1) once a profile is built.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/memory/parallel.h"
#include "core/memory/training_setup.h"
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

// The two moments of a training step where memory can peak.
enum class Moment {
  kBackward,  // backward start: weights, gradients, state, every saved
              // activation, the backward's first buffer
  kUpdate,    // optimizer update: weights, gradients, state, the update's
              // temporaries; no activations
};
const char* MomentName(Moment moment);

// The moment whose sum of factor * bytes is larger (backward on a tie).
Moment PeakMoment(const ComponentArray& backward, const ComponentArray& update,
                  const ComponentArray& factors);

// The step at batch B peaks at the larger of two moments, each a sum of
// factor * bytes over the six components: backward start, whose bytes are
// fixed[c] + B * per_sample[c] (the transient is the largest per-sample
// buffer, logits and their gradient, a convolution's or attention's
// gradients, times B), and the optimizer update, whose bytes do not depend
// on B. Every component is non-decreasing in B, and so is the peak.
struct MemoryProfile {
  uint64_t params = 0;
  // The weights, gradients and optimizer state the optimizer component
  // sums, by kind (training_setup.h).
  ModelStates states;
  ComponentArray fixed_bytes{};
  ComponentArray per_sample_bytes{};
  ComponentArray update_bytes{};
  // The largest single activation tensor per sample: with the fp32 weights
  // a lower bound of any measured peak of this model.
  double largest_tensor_per_sample = 0;
  // Under activation offloading: the saved activations per sample that
  // live in host memory (pinned) instead of on the GPU; not in any
  // component. Host bytes at batch B: B times this.
  double host_activation_bytes_per_sample = 0;
  // Under a parallel setup (parallel.h), what it did to the optimizer
  // component and activations: every byte count above is per GPU.
  ParallelBreakdown parallel;

  // Component bytes at backward start at `batch`.
  ComponentArray BytesAt(uint64_t batch) const;
  // The bytes of whichever moment peaks under `factors` at `batch`; the
  // moment is written to `moment` when given.
  ComponentArray PeakBytesAt(uint64_t batch, const ComponentArray& factors,
                             Moment* moment = nullptr) const;
};

// Builds the profile of `spec` trained as `plan` resolved it (plan.h:
// the setup validated, its framework profile applied). The spec must be
// valid (ValidateSpec).
struct Plan;
absl::StatusOr<MemoryProfile> BuildProfile(const v1::ModelSpec& spec,
                                           const Plan& plan);

// The same for a setup not yet resolved: ResolvePlan, then the above;
// INVALID_ARGUMENT for an unusable setup.
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

// Remarks on what the profile moved off the GPU that no component holds:
// under activation offloading, the saved activations per sample in pinned
// host memory (empty otherwise). The planner adds them to the answer's
// assumptions beside SetupAssumptions and ParallelAssumptions.
std::vector<std::string> ProfileAssumptions(const MemoryProfile& profile);

// Factors as an array in Component order, and back.
ComponentArray FactorArray(const v1::Factors& factors);
v1::Factors FactorsFromArray(const ComponentArray& values);

// Predicted peak in GB (10^9 bytes): sum of factor * bytes.
double PeakGb(const ComponentArray& bytes, const ComponentArray& factors);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_MEMORY_PROFILE_H_
