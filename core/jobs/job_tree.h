#ifndef HEADROOM_CORE_JOBS_JOB_TREE_H_
#define HEADROOM_CORE_JOBS_JOB_TREE_H_

// A job file's text as one tree, whatever its syntax: YAML through
// yaml-cpp, JSON through nlohmann (the core's JSON library). The readers in
// core/jobs look keys up in the tree; none sees the syntax. Internal to
// core/jobs.

#include <cstddef>

#include "absl/status/statusor.h"
#include "headroom/v1/planner.pb.h"
#include "nlohmann/json.hpp"

namespace headroom::jobs {

using Tree = nlohmann::json;

// The most a job file may hold: its bytes, its nesting (maps and lists
// inside one another) and its nodes, counted with every YAML alias expanded
// (a billion-laughs file of a few hundred bytes expands to 10^9 nodes).
inline constexpr size_t kMaxJobFileBytes = 1 << 20;
inline constexpr int kMaxJobDepth = 32;
inline constexpr size_t kMaxJobNodes = 100000;

// The file's content as a tree whose root is a map. JSON when the content's
// first non-blank character is '{', else YAML (JSON is YAML, but nlohmann
// reports JSON's errors better). INVALID_ARGUMENT naming file.name() for
// content over the limits above, a syntax error (with its line) or a root
// that is not a map. YAML scalars are typed as PyYAML's safe loader types
// them (null, booleans yes/no/on/off/true/false in any of their three
// cases, decimal integers, floats), and "3e-4" a float as torchtune's
// OmegaConf loader reads it; a quoted scalar is always a string.
absl::StatusOr<Tree> ParseJobTree(const v1::JobFile& file);

}  // namespace headroom::jobs

#endif  // HEADROOM_CORE_JOBS_JOB_TREE_H_
