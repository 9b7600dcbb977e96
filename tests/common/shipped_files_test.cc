#include "common/shipped_files.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// The tests run from the build tree, where models/ is not: the source tree
// (the last root) is where the shipped catalog is found.
TEST(ShippedFilesTest, ARelativePathIsFoundInTheSourceTree) {
  const auto roots = ShippedRoots();
  ASSERT_FALSE(roots.empty());
  EXPECT_EQ(roots.back(), std::string(HEADROOM_SOURCE_DIR));
  auto found = FindShipped("models/bert-base.json", "models_dir");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_TRUE(std::filesystem::exists(*found)) << *found;
}

TEST(ShippedFilesTest, APathThatExistsAsGivenWins) {
  const std::string here = std::filesystem::current_path().string();
  auto found = FindShipped(here, "runs");
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, here);
  EXPECT_EQ(*FindShipped("", "runs"), "");
}

TEST(ShippedFilesTest, ListsResolveElementByElement) {
  auto found =
      FindShipped("data/memory-runs.jsonl,data/harness-runs.jsonl", "runs");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(std::count(found->begin(), found->end(), ','), 1);
  EXPECT_THAT(*found, HasSubstr("data/harness-runs.jsonl"));
}

// The planner's default --runs: the published runs ship with the others,
// their configs beside them.
TEST(ShippedFilesTest, PublishedRunsShipWithTheirConfigs) {
  auto found = FindShipped(
      "data/memory-runs.jsonl,data/harness-runs.jsonl,"
      "data/published-runs.jsonl",
      "runs");
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_THAT(*found, HasSubstr("data/published-runs.jsonl"));
  EXPECT_TRUE(
      std::filesystem::exists(std::string(HEADROOM_SOURCE_DIR) +
                              "/data/published-configs/llama-2-7b.json"));
}

TEST(ShippedFilesTest, AMissingFileNamesTheFlagAndWhereItLooked) {
  auto missing = FindShipped("data/no-such-file.jsonl", "runs");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("--runs"));
  EXPECT_THAT(missing.status().message(),
              HasSubstr(std::string(HEADROOM_SOURCE_DIR)));
  auto absolute = FindShipped("/no/such/dir/runs.jsonl", "runs");
  EXPECT_THAT(absolute.status().message(), HasSubstr("does not exist"));
  // One missing element fails the whole list.
  EXPECT_FALSE(FindShipped("data/memory-runs.jsonl,nope.jsonl", "runs").ok());
}

}  // namespace
}  // namespace headroom
