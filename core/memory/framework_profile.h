#ifndef HEADROOM_CORE_MEMORY_FRAMEWORK_PROFILE_H_
#define HEADROOM_CORE_MEMORY_FRAMEWORK_PROFILE_H_

// Framework profiles (issue 31 item 1): how a framework runs a job, as
// data plus small rules, each citing the framework's source at a commit
// (framework_profile.cc). A profile fills what the setup leaves unset (the
// loss, the phases, the generation length, checkpointing and the strategy
// under several GPUs) and decides what a setup cannot say (the LoRA
// adapters' dtype). `generic` is the memory model's idealised framework
// and what an unnamed framework gets. Only plan.cc applies a profile: the
// memory components read the resolved plan (plan.h).

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// "generic", "hf-trainer", "litgpt", "torchtune", "deepspeed", "torch";
// and back (false for an unknown name).
const char* FrameworkName(v1::TrainingSetup::Framework framework);
bool ParseFramework(const std::string& name,
                    v1::TrainingSetup::Framework* framework);
// Every framework, in the order help text lists them.
const std::vector<v1::TrainingSetup::Framework>& AllFrameworks();

// INVALID_ARGUMENT naming setup.framework / setup.framework_version and
// the allowed values (a known enum value; a version of dot-separated
// numbers, at most 32 bytes).
absl::Status ValidateFramework(const v1::TrainingSetup& setup);

// One decision a profile took, and the source it follows.
struct ProfileRule {
  std::string what;
  std::string source;  // "repo path @ commit"
};

// What applying a profile decided.
struct AppliedProfile {
  v1::TrainingSetup::Framework framework = v1::TrainingSetup::GENERIC;
  // "litgpt", or "litgpt 0.5.10" when a version was given.
  std::string label;
  // LoRA adapters' bytes per parameter: 4 (fp32, PEFT's autocast of
  // adapters) or 0 for the trained weights' own dtype.
  double adapter_bytes = 4.0;
  std::vector<ProfileRule> rules;
};

// Applies the framework's profile to `setup` (a valid setup): every field
// the profile decides and the setup leaves unset is filled in; fields the
// setup sets stay. `positions` is the length the job runs at (the chunked
// loss of litgpt is per 128 tokens).
AppliedProfile ApplyProfile(uint64_t positions, v1::TrainingSetup* setup);

// Whether version `a` is before `b` (dot-separated numbers; a missing
// component is 0). An empty `a` is the newest: never before.
bool VersionBefore(const std::string& a, const std::string& b);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_FRAMEWORK_PROFILE_H_
