#include "common/build_info.h"

#include "absl/strings/str_cat.h"

namespace headroom {

// Defined in the generated build_info_values.cc (common/build_info.cmake).
extern const char kBuildVersion[];
extern const char kBuildCommit[];
extern const char kBuildType[];

const BuildInfo& GetBuildInfo() {
  static const BuildInfo* const info =
      new BuildInfo{kBuildVersion, kBuildCommit, kBuildType};
  return *info;
}

std::string VersionLine(absl::string_view program) {
  const BuildInfo& info = GetBuildInfo();
  return absl::StrCat(program, " ", info.version, " (commit ", info.commit,
                      ", ", info.build_type, ")");
}

bool PrintVersionIfAsked(int argc, char** argv, absl::string_view program,
                         std::ostream& out) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--version" || arg == "-version") {
      out << VersionLine(program) << "\n";
      return true;
    }
  }
  return false;
}

}  // namespace headroom
