#ifndef HEADROOM_CORE_MEMORY_PLAN_H_
#define HEADROOM_CORE_MEMORY_PLAN_H_

// The resolved plan (issue 31 item 2): a request's setup and its framework
// profile resolved once into the value every memory component reads: each
// tensor class's dtype, the LoRA targets, the parallel layout, the phases
// and the loss, with where each came from (the setup, the profile and its
// source, or the model's default). ResolvePlan is the only reader of the
// request's setup; BuildProfile, ApplyParallel and PhasePeaks read the
// plan's effective setup and resolved values, and `headroom fit --explain`
// prints its lines.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/memory/framework_profile.h"
#include "core/memory/parallel.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

struct Plan {
  // The request's setup with the profile's decisions filled in where it was
  // silent: what the memory components read.
  v1::TrainingSetup setup;
  AppliedProfile profile;
  // Resolved once.
  uint64_t positions = 0;    // the length the job runs at
  double weight_bytes = 4;   // trained weights as stored (4 or 2)
  double compute_bytes = 4;  // one activation element
  double adapter_bytes = 4;  // LoRA's A and B
  std::set<std::string> lora_targets;
  bool parallel = false;  // HasParallel
  ParallelLayout layout;
  std::vector<v1::JobPhase> phases;
  uint32_t accum = 1;  // microbatches per step
  // One line per decision, "what [where it came from]".
  std::vector<std::string> lines;
};

// Validates `setup` (ValidateSetup, ValidateFramework: INVALID_ARGUMENT
// naming the field) and resolves it with its framework's profile for a
// model of `spec` (valid, ValidateSpec).
absl::StatusOr<Plan> ResolvePlan(const v1::ModelSpec& spec,
                                 const v1::TrainingSetup& setup);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_PLAN_H_
