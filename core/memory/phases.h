#ifndef HEADROOM_CORE_MEMORY_PHASES_H_
#define HEADROOM_CORE_MEMORY_PHASES_H_

// The phases of a training job and the allocator bytes each holds at its
// worst (issue 30 item 3). The step is the memory model's peak
// (memory_profile.h); the others are counted here from the same profile:
//
// - load: the weights as the job stores them, on this GPU (its shard and
//   one gathered unit under sharded weights), plus one quantised weight
//   dequantised while quantising on load;
// - first-step: the optimizer's state is created inside the first update,
//   which the step's update moment already counts: the step's bytes;
// - eval: forward only at the eval batch under no_grad: the weights and the
//   optimizer's state stay, gradients are freed (zero_grad(set_to_none)),
//   the largest forward buffers (the step's transient per sample: the
//   logits and their log-softmax) at the eval batch;
// - generate: eval plus the KV cache of every attention layer over
//   positions + generate_tokens;
// - save: a full state dict: the states that stay plus, where the weights
//   are sharded, the whole model gathered in the compute dtype on this GPU
//   (FSDP FULL_STATE_DICT without CPU offload, rank 0).
//
// A framework profile (issue 31) changes what each phase holds; `generic`
// is the above.

#include <cstdint>
#include <string>
#include <vector>

#include "core/memory/memory_profile.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// The phases a setup runs: setup.phases, or LOAD and STEP when empty; STEP
// is always among them. In JobPhase order, each once.
std::vector<v1::JobPhase> PhasesOf(const v1::TrainingSetup& setup);

// "load", "first-step", "step", "eval", "generate", "save".
const char* PhaseName(v1::JobPhase phase);

struct PhaseBytes {
  v1::JobPhase phase = v1::STEP;
  // Allocator GB under the factors (the step's is `step_gb` as given).
  double allocated_gb = 0;
  std::string holds;
};

// The allocator peak of each of the setup's phases at per-GPU `batch`:
// `step_gb` is the step's answered peak (factored and anchored); the other
// phases are counted from `profile` and `spec` with the optimizer factor on
// the states and the transient factor on the forward buffers.
std::vector<PhaseBytes> PhasePeaks(const MemoryProfile& profile,
                                   const v1::ModelSpec& spec,
                                   const v1::TrainingSetup& setup,
                                   const ComponentArray& factors,
                                   uint64_t batch, double step_gb);

// Bytes of the KV cache one sample needs per position: 2 x kv heads x head
// dim x the compute dtype's bytes, summed over every attention layer.
double KvCacheBytesPerPosition(const v1::ModelSpec& spec,
                               const v1::TrainingSetup& setup);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_PHASES_H_
