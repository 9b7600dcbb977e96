#ifndef HEADROOM_COMMON_BUILD_INFO_H_
#define HEADROOM_COMMON_BUILD_INFO_H_

// What this build is, for --version and the headroom_build_info metric: the
// project's VERSION, `git describe --always --dirty` of the checkout it was
// built from, and the CMake build type. One source: a file CMake generates
// at every build (common/build_info.cmake).

#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

namespace headroom {

struct BuildInfo {
  std::string version;     // the project's VERSION, e.g. "0.1.0"
  std::string commit;      // "027572e", "027572e-dirty"; "unknown" outside git
  std::string build_type;  // CMAKE_BUILD_TYPE, e.g. "RelWithDebInfo"
};

// This binary's build.
const BuildInfo& GetBuildInfo();

// "<program> <version> (commit <commit>, <build type>)", no newline.
std::string VersionLine(absl::string_view program);

// When the command line asks for the version (--version or -version,
// before any "--"), writes VersionLine(program) and a newline to `out` and
// returns true: the caller exits 0.
bool PrintVersionIfAsked(int argc, char** argv, absl::string_view program,
                         std::ostream& out);

}  // namespace headroom

#endif  // HEADROOM_COMMON_BUILD_INFO_H_
