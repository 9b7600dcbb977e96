#include "common/build_info.h"

#include <regex>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

// The version is the project's VERSION (CMakeLists.txt, passed in as
// HEADROOM_PROJECT_VERSION), the commit git describe's (an abbreviated
// hash, or TAG-N-gHASH, "-dirty" with uncommitted changes) or "unknown"
// outside a checkout, the build type CMake's.
TEST(BuildInfoTest, NamesTheProjectVersionCommitAndBuildType) {
  const BuildInfo& info = GetBuildInfo();
  EXPECT_EQ(info.version, HEADROOM_PROJECT_VERSION);
  EXPECT_TRUE(std::regex_match(
      info.commit, std::regex("unknown|([^ ]+-g)?[0-9a-f]{7,40}(-dirty)?")))
      << info.commit;
  EXPECT_EQ(info.build_type, HEADROOM_PROJECT_BUILD_TYPE);
  EXPECT_EQ(VersionLine("headroom-planner"),
            "headroom-planner " + info.version + " (commit " + info.commit +
                ", " + info.build_type + ")");
}

TEST(BuildInfoTest, VersionIsPrintedOnlyWhenAskedBeforeTheDashes) {
  std::string program = "headroom-worker";
  std::string version = "--version";
  std::string dashes = "--";
  {
    char* argv[] = {program.data(), version.data()};
    std::ostringstream out;
    EXPECT_TRUE(PrintVersionIfAsked(2, argv, "headroom-worker", out));
    EXPECT_EQ(out.str(), VersionLine("headroom-worker") + "\n");
  }
  {
    char* argv[] = {program.data(), dashes.data(), version.data()};
    std::ostringstream out;
    EXPECT_FALSE(PrintVersionIfAsked(3, argv, "headroom-worker", out));
    EXPECT_EQ(out.str(), "");
  }
}

}  // namespace
}  // namespace headroom
