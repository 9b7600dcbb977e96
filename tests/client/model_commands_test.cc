#include "client/model_commands.h"

#include <fstream>
#include <sstream>

#include "base/json_io.h"
#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/files.h"
#include "tests/core/frontends/onnx_test_graphs.h"

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

// An ONNX model with its weights (two 512x2048 fp32 matrices, 8 MB) on
// disk, converted offline from the graph alone.
TEST(ModelConvertCommandTest, ConvertsAnOnnxFile) {
  testing::GraphBuilder g("mlp-block");
  std::string h = g.Input("x", {"batch", "tokens", 512});
  h = g.Linear(h, 512, 2048, true, "/up", /*with_data=*/true);
  h = g.Gelu(h, "/act");
  g.Output(g.Linear(h, 2048, 512, true, "/down", /*with_data=*/true));
  // No ".onnx" suffix: the content says what it is.
  const std::string path = ::testing::TempDir() + "mlp-block.model";
  std::ofstream(path, std::ios::binary) << g.Serialize();
  absl::StatusOr<v1::ModelRef> read = ReadModelFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->has_onnx());
  EXPECT_LT(read->onnx().size(), 64u << 10);  // read without its 8 MB
  read = ReadModelFile(kHfDir + "gpt2.json");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->has_hf_config());

  std::ostringstream out, err;
  ASSERT_EQ(ModelConvert(path, 256, "-", out, err), 0) << err.str();
  absl::StatusOr<v1::ModelSpec> spec = ParseSpecJson(out.str(), "stdout");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CountParams(*spec), 2u * 512 * 2048 + 2048 + 512);
  EXPECT_EQ(spec->positions(), 256u);
  ASSERT_EQ(spec->layers_size(), 1);
  EXPECT_EQ(spec->layers(0).mlp().ffn(), 2048u);
  EXPECT_THAT(err.str(), HasSubstr("spec mlp-block: 2099712 parameters, 256 "
                                   "positions per sample"));
  EXPECT_THAT(err.str(),
              HasSubstr("note: symbolic dimension 'tokens' bound to 256"));

  // Without --positions the symbolic length is named.
  std::ostringstream out2, err2;
  EXPECT_EQ(ModelConvert(path, 0, "-", out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("axis 1 is symbolic ('tokens')"));
}

TEST(ModelConvertCommandTest, BadOnnxFileExitsTwo) {
  const std::string path = ::testing::TempDir() + "broken.onnx";
  std::ofstream(path, std::ios::binary) << "\x08\x08\x3a\xff\xff";
  std::ostringstream out, err;
  EXPECT_EQ(ModelConvert(path, 0, "-", out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("broken.onnx: not an ONNX model"));
  EXPECT_EQ(out.str(), "");
}

const std::string kRoot = HEADROOM_SOURCE_DIR;

// One BERT-base-sized encoder layer at 512 tokens and batch 32: the saved
// attention probabilities are 8 heads x 512 x 512 x 4 bytes per sample, and
// their backward's two gradients the transient.
TEST(ModelInspectCommandTest, ReportsLayerShares) {
  Options options;
  options.model = "transformer-block";
  options.batch = "32";
  options.json = true;
  options.models_dir = kRoot + "/models";
  std::ostringstream out, err;
  ASSERT_EQ(ModelInspect(options, out, err), 0) << err.str();
  v1::ModelReport report;
  ASSERT_TRUE(ParseJson(out.str(), "stdout", false, &report).ok());
  EXPECT_EQ(report.params(), 7087872);
  EXPECT_EQ(report.batch(), 32u);
  ASSERT_EQ(report.layers_size(), 1);
  EXPECT_NEAR(report.layers(0).components().attention(),
              32.0 * 8 * 512 * 512 * 4 / 1e9, 1e-12);
  EXPECT_NEAR(report.components().attention(),
              report.layers(0).components().attention(), 1e-12);
  EXPECT_NEAR(report.components().transient(),
              32.0 * 8 * 512 * 512 * 2 * 4 / 1e9, 1e-12);
  // The update: 7,087,872 x 20 bytes (weights, AdamW moments, gradients,
  // the update's intermediate).
  EXPECT_NEAR(report.update_components().optimizer(), 7087872 * 20 / 1e9,
              1e-12);
  EXPECT_FALSE(report.assumptions().empty());

  options.model = "nope";
  std::ostringstream out2, err2;
  EXPECT_EQ(ModelInspect(options, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("closest"));
}

// An ONNX graph of one attention block, inspected like a template.
TEST(ModelInspectCommandTest, ReadsAnOnnxFile) {
  testing::GraphBuilder g("attention");
  const std::string x = g.Input("x", {"batch", "seq", 512});
  g.Output(
      g.Op("Add", {x, g.Attention(x, 512, 8, true, "", "/attn")}, "/residual"));
  const std::string path = ::testing::TempDir() + "attention.onnx";
  std::ofstream(path, std::ios::binary) << g.Serialize();
  Options options;
  options.model = path;
  options.batch = "32";
  options.setup["positions"] = "512";
  options.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(ModelInspect(options, out, err), 0) << err.str();
  v1::ModelReport report;
  ASSERT_TRUE(ParseJson(out.str(), "stdout", false, &report).ok());
  EXPECT_EQ(report.params(), 4 * (512 * 512 + 512));
  ASSERT_EQ(report.layers_size(), 1);
  EXPECT_EQ(report.layers(0).name(), "/attn.c_attn+c_proj");
  EXPECT_NEAR(report.layers(0).components().attention(),
              32.0 * 8 * 512 * 512 * 4 / 1e9, 1e-12);
  EXPECT_THAT(report.assumptions(),
              ::testing::Contains(HasSubstr("batch axis: symbolic dimension "
                                            "'batch' (x axis 0)")));
}

}  // namespace
}  // namespace headroom::cli
