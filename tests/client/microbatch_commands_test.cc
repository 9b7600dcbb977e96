#include "client/microbatch_commands.h"

#include <fstream>
#include <sstream>

#include "base/json_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/microbatch.pb.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

const std::string kRecord =
    std::string(HEADROOM_SOURCE_DIR) + "/data/microbatch-autotune.json";

// `--json` prints selected and failures in the record's own field names, and
// they parse back as the record's own messages.
TEST(MicrobatchSelectCommandTest, JsonInTheRecordsFieldNames) {
  std::ostringstream out, err;
  ASSERT_EQ(MicrobatchSelect(kRecord, "", /*json=*/true, out, err), 0)
      << err.str();
  EXPECT_EQ(err.str(), "");
  for (const char* key :
       {"\"selection_policy\"", "\"selected\"", "\"microbatch\"",
        "\"microbatch_seconds\"", "\"peak_gb\"", "\"fits_budget\"",
        "\"estimated_update_seconds\"", "\"input_tokens_per_second\"",
        "\"failures\"", "\"reason\"", "\"budget_gb\""}) {
    EXPECT_THAT(out.str(), HasSubstr(key));
  }
  v1::MicrobatchSelection got;
  ASSERT_TRUE(
      ParseJson(out.str(), "stdout", /*ignore_unknown=*/false, &got).ok());
  EXPECT_EQ(got.selection_policy(), "max_batch");
  EXPECT_EQ(got.selected().microbatch(), 90u);
  EXPECT_EQ(got.selected().mode(), "compiled");
  ASSERT_EQ(got.failures_size(), 6);
  EXPECT_EQ(got.failures(0).microbatch(), 64u);
  EXPECT_EQ(got.failures(5).microbatch(), 90u);
  EXPECT_EQ(got.failures(5).reason(), "oom");
}

TEST(MicrobatchSelectCommandTest, TableWithMaxThroughput) {
  std::ostringstream out, err;
  ASSERT_EQ(
      MicrobatchSelect(kRecord, "max_throughput", /*json=*/false, out, err), 0)
      << err.str();
  EXPECT_THAT(out.str(), HasSubstr("selection_policy max_throughput"));
  EXPECT_THAT(out.str(), HasSubstr("selected microbatch 76  mode compiled"));
  EXPECT_THAT(out.str(), HasSubstr("failures 6"));
}

TEST(MicrobatchSelectCommandTest, BadInputIsExitCode2) {
  std::ostringstream out, err;
  EXPECT_EQ(MicrobatchSelect(kRecord, "fastest", false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("allowed max_batch, max_throughput"));
  err.str("");
  EXPECT_EQ(MicrobatchSelect("/nonexistent.json", "", false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("cannot open /nonexistent.json"));
  err.str("");
  EXPECT_EQ(MicrobatchSelect("", "", false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--record FILE is required"));
  const std::string path = ::testing::TempDir() + "bad_record.json";
  std::ofstream(path) << R"({"selection_policy": "max_batch", "bogus": 1})";
  err.str("");
  EXPECT_EQ(MicrobatchSelect(path, "", false, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("malformed JSON"));
}

}  // namespace
}  // namespace headroom::cli
