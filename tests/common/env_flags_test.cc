#include "common/env_flags.h"

#include <cstdlib>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_FLAG(int, env_flags_test_port, 7, "A flag the environment can set.");
ABSL_FLAG(std::string, env_flags_test_name, "none", "Another one.");

namespace headroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

TEST(EnvFlagsTest, TheEnvironmentSetsFlagsByPrefixAndUpperCaseName) {
  ::setenv("HEADROOM_TEST_ENV_FLAGS_TEST_PORT", "8123", 1);
  ::setenv("OTHER_ENV_FLAGS_TEST_NAME", "ignored", 1);
  ApplyEnvironmentToFlags("HEADROOM_TEST_");
  EXPECT_EQ(absl::GetFlag(FLAGS_env_flags_test_port), 8123);
  // Another prefix is not read.
  EXPECT_EQ(absl::GetFlag(FLAGS_env_flags_test_name), "none");
  ::unsetenv("HEADROOM_TEST_ENV_FLAGS_TEST_PORT");
  ::unsetenv("OTHER_ENV_FLAGS_TEST_NAME");
}

TEST(EnvFlagsDeathTest, ABadValueExitsNamingTheVariable) {
  EXPECT_EXIT(
      {
        ::setenv("HEADROOM_BAD_ENV_FLAGS_TEST_PORT", "eighty", 1);
        ApplyEnvironmentToFlags("HEADROOM_BAD_");
      },
      ::testing::ExitedWithCode(2),
      HasSubstr("HEADROOM_BAD_ENV_FLAGS_TEST_PORT=eighty"));
}

TEST(EnvFlagsTest, HelpIsPrintedOnlyWhenAskedBeforeTheDashes) {
  std::string program = "headroom-test";
  std::string help = "--help";
  std::string dashes = "--";
  std::string other = "--env_flags_test_port=9";
  {
    char* argv[] = {program.data(), other.data(), help.data()};
    std::ostringstream out;
    EXPECT_TRUE(PrintHelpIfAsked(3, argv, __FILE__, out));
    // This file's flags, with their defaults.
    EXPECT_THAT(out.str(), HasSubstr("--env_flags_test_port (A flag the "
                                     "environment can set.); default: 7;"));
    EXPECT_THAT(out.str(), HasSubstr("--env_flags_test_name (Another one.); "
                                     "default: \"none\";"));
  }
  {
    char* argv[] = {program.data(), other.data()};
    std::ostringstream out;
    EXPECT_FALSE(PrintHelpIfAsked(2, argv, __FILE__, out));
    EXPECT_EQ(out.str(), "");
  }
  {
    char* argv[] = {program.data(), dashes.data(), help.data()};
    std::ostringstream out;
    EXPECT_FALSE(PrintHelpIfAsked(3, argv, __FILE__, out));
  }
}

// --help opens with the usage message and lists only the program's own
// flags: none of absl's (--flagfile, defined in absl/flags/parse.cc) and no
// source path; --helpfull lists those too.
TEST(EnvFlagsTest, HelpStartsWithTheUsageAndListsOnlyTheProgramsFlags) {
  absl::SetProgramUsageMessage("Usage: headroom-test [--flag=value ...]");
  std::string program = "headroom-test";
  std::string help = "--help";
  char* argv[] = {program.data(), help.data()};
  std::ostringstream out;
  ASSERT_TRUE(PrintHelpIfAsked(2, argv, __FILE__, out));
  EXPECT_THAT(out.str(),
              StartsWith("Usage: headroom-test [--flag=value ...]\n\nFlags:\n"
                         "    --env_flags_test_name"));
  EXPECT_THAT(out.str(), Not(HasSubstr("absl/")));
  EXPECT_THAT(out.str(), Not(HasSubstr("--flagfile")));
  EXPECT_THAT(out.str(), Not(HasSubstr("Flags from")));
  // Another program's file: none of this file's flags.
  std::ostringstream other;
  ASSERT_TRUE(PrintHelpIfAsked(2, argv, "server/main.cc", other));
  EXPECT_THAT(other.str(), Not(HasSubstr("env_flags_test")));
  std::string full = "--helpfull";
  char* full_argv[] = {program.data(), full.data()};
  std::ostringstream everything;
  ASSERT_TRUE(PrintHelpIfAsked(2, full_argv, __FILE__, everything));
  // absl's own listing, by defining file (this binary links no
  // absl/flags/parse.cc: help_test.sh finds --flagfile in the planner's).
  EXPECT_THAT(everything.str(), HasSubstr("Flags from "));
  EXPECT_THAT(everything.str(), HasSubstr("--env_flags_test_port"));
}

}  // namespace
}  // namespace headroom
