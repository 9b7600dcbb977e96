#include "client/model_commands.h"

#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/common/json_io.h"
#include "server/core/memory/model_spec.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

const std::string kHfDir = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

TEST(ModelConvertCommandTest, WritesSpecAndPrintsAssumedDefaults) {
  const std::string out_path = ::testing::TempDir() + "gpt2-spec.json";
  std::ostringstream out, err;
  ASSERT_EQ(ModelConvert(kHfDir + "gpt2.json", 0, out_path, out, err), 0)
      << err.str();
  EXPECT_EQ(err.str(), "");
  EXPECT_THAT(out.str(), HasSubstr("spec gpt2: 124439808 parameters, 1024 "
                                   "positions per sample"));
  EXPECT_THAT(out.str(), HasSubstr("  n_inner=3072 (transformers GPT2Config "
                                   "default None: 4 * n_embd)"));
  absl::StatusOr<std::string> written = ReadFile(out_path);
  ASSERT_TRUE(written.ok());
  absl::StatusOr<v1::ModelSpec> spec = ParseSpecJson(*written, out_path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CountParams(*spec), 124439808u);
}

TEST(ModelConvertCommandTest, DashWritesSpecToStdout) {
  std::ostringstream out, err;
  ASSERT_EQ(ModelConvert(kHfDir + "meta-llama-3-8b.json", 4096, "-", out, err),
            0)
      << err.str();
  absl::StatusOr<v1::ModelSpec> spec = ParseSpecJson(out.str(), "stdout");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CountParams(*spec), 8030261248u);
  EXPECT_EQ(spec->positions(), 4096u);
  EXPECT_THAT(err.str(), HasSubstr("8030261248 parameters"));
}

TEST(ModelConvertCommandTest, BadInputsExitTwo) {
  std::ostringstream out, err;
  EXPECT_EQ(ModelConvert("/nonexistent/config.json", 0, "-", out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("cannot open /nonexistent/config.json"));

  const std::string bad = ::testing::TempDir() + "bad-config.json";
  std::ofstream(bad) << R"({"model_type": "llama", "hidden_size": 0})";
  err.str("");
  EXPECT_EQ(ModelConvert(bad, 0, "-", out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("hidden_size = 0 is out of range"));
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace headroom::cli
