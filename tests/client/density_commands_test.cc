#include "client/density_commands.h"

#include <fstream>
#include <sstream>

#include "base/json_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/density.pb.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;
const std::string kLeaderboard = kRoot + "/data/density-leaderboard.json";

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + name;
  std::ofstream(path) << text;
  return path;
}

// Fed the leaderboard file itself, `--json` prints a leaderboard in the
// file's own field names with the file's lists in the file's order.
TEST(DensityRankCommandTest, LeaderboardFileRanksToTheSameLists) {
  std::ostringstream out, err;
  ASSERT_EQ(DensityRank(kLeaderboard, /*json=*/true, out, err), 0) << err.str();
  EXPECT_EQ(err.str(), "");
  EXPECT_THAT(out.str(), HasSubstr("\"top_speed\""));
  EXPECT_THAT(out.str(), HasSubstr("\"gold_modes\""));
  v1::DensityLeaderboard got;
  ASSERT_TRUE(
      ParseJson(out.str(), "stdout", /*ignore_unknown=*/false, &got).ok());
  v1::DensityLeaderboard file;
  ASSERT_TRUE(ParseJson(*ReadFile(kLeaderboard), "file", false, &file).ok());
  EXPECT_EQ(got.peak_acc(), file.peak_acc());
  EXPECT_EQ(got.peak_thru(), file.peak_thru());
  EXPECT_EQ(got.acc_champ().id(), file.acc_champ().id());
  ASSERT_EQ(got.top_size(), 40);
  for (int i = 0; i < got.top_size(); ++i) {
    EXPECT_EQ(got.top(i).id(), file.top(i).id()) << i;
  }
  EXPECT_EQ(got.gold_std().id(), file.gold_std().id());
}

TEST(DensityRankCommandTest, TableNamesListsAndGoldStd) {
  std::ostringstream out, err;
  ASSERT_EQ(DensityRank(kLeaderboard, /*json=*/false, out, err), 0)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("top (by lpd)"));
  EXPECT_THAT(out.str(), HasSubstr("convt2|binary|TweenSplit|lr=20k"));
  EXPECT_THAT(out.str(),
              HasSubstr("gold_std rmsnorm|uint4|TweenSplitSparse|lr=20k"));
}

TEST(DensityRankCommandTest, JsonLinesOfRawRuns) {
  const std::string path = WriteTemp(
      "density_runs.jsonl",
      R"({"id": "a", "mode": "Tween", "dtype": "f32", "arch": "x", "score": 25, "soft_acc": 1, "avg_accuracy": 50, "throughput": 100, "availability": 50, "ram_kib": 1}

{"id": "b", "mode": "Tween", "dtype": "f32", "arch": "y", "score": 50, "soft_acc": 0, "avg_accuracy": 50, "throughput": 200, "availability": 50, "ram_kib": 0.2}
)");
  std::ostringstream out, err;
  ASSERT_EQ(DensityRank(path, /*json=*/true, out, err), 0) << err.str();
  v1::DensityLeaderboard got;
  ASSERT_TRUE(ParseJson(out.str(), "stdout", false, &got).ok());
  EXPECT_EQ(got.n(), 2);
  ASSERT_EQ(got.top_size(), 2);
  EXPECT_EQ(got.top(0).id(), "b");
  EXPECT_DOUBLE_EQ(got.top(0).lpd(), 5);
  EXPECT_TRUE(got.top(0).gold());
}

TEST(DensityRankCommandTest, BadRunIsAClearError) {
  const std::string path = WriteTemp(
      "density_dup.jsonl",
      R"({"id": "a", "mode": "m", "dtype": "d", "arch": "x", "score": 1, "soft_acc": 1, "avg_accuracy": 1, "throughput": 1, "availability": 1, "ram_kib": 1}
{"id": "a", "mode": "m", "dtype": "d", "arch": "x", "score": 1, "soft_acc": 1, "avg_accuracy": 1, "throughput": 1, "availability": 1, "ram_kib": 1}
)");
  std::ostringstream out, err;
  EXPECT_EQ(DensityRank(path, false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("run 1 (a): duplicate id"));
}

TEST(DensityRankCommandTest, MalformedLineNamesTheLine) {
  const std::string path = WriteTemp(
      "density_bad.jsonl",
      R"({"id": "a", "mode": "m", "dtype": "d", "arch": "x", "score": 1, "soft_acc": 1, "avg_accuracy": 1, "throughput": 1, "availability": 1, "ram_kib": 1}
{"id": "b", "ram_kib": }
)");
  std::ostringstream out, err;
  EXPECT_EQ(DensityRank(path, false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("line 2"));
}

TEST(DensityRankCommandTest, MissingFileIsAClearError) {
  std::ostringstream out, err;
  EXPECT_EQ(DensityRank("/nonexistent/runs.jsonl", false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("/nonexistent/runs.jsonl"));
}

}  // namespace
}  // namespace headroom::cli
