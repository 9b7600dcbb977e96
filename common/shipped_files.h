#ifndef HEADROOM_COMMON_SHIPPED_FILES_H_
#define HEADROOM_COMMON_SHIPPED_FILES_H_

// Where the catalog and data Headroom ships with are, so the planner, the
// worker and the CLI run from any directory: a path that exists as given
// (relative to the working directory) wins; else the same relative path in
// the installed share directory beside the binary
// (<exe>/../share/headroom/, as `cmake --install` lays it out); else in the
// source tree the binary was built from.

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom {

// The directories a relative shipped path is looked up in, in order.
std::vector<std::string> ShippedRoots();

// `path` resolved as above; comma-separated lists resolve element by
// element. NOT_FOUND names `flag` and every place looked in.
absl::StatusOr<std::string> FindShipped(const std::string& path,
                                        const std::string& flag);

}  // namespace headroom

#endif  // HEADROOM_COMMON_SHIPPED_FILES_H_
