#include "core/memory/model_spec.h"

#include <cmath>
#include <map>

#include "base/json_io.h"
#include "core/catalog/model_catalog.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

// Every template in the measured runs has a spec whose parameter count is
// within 2% of the params column.
TEST(ModelSpecTest, EveryTemplateMatchesMeasuredParameterCount) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
  ASSERT_TRUE(runs.ok()) << runs.status();
  std::map<std::string, uint64_t> params;
  for (const auto& run : *runs) params[run.template_()] = run.params();
  EXPECT_EQ(params.size(), 44u);
  // The templates; the full models of models/hf/ are not measured runs.
  EXPECT_EQ(catalog->size() - catalog->full_models(), 44u);
  int exact = 0;
  for (const auto& [name, expected] : params) {
    auto spec = catalog->Find(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const uint64_t counted = CountParams(**spec);
    const double error =
        std::abs(static_cast<double>(counted) - static_cast<double>(expected)) /
        static_cast<double>(expected);
    EXPECT_LE(error, 0.02) << name << ": spec " << counted << " vs measured "
                           << expected;
    if (counted == expected) ++exact;
  }
  // Most templates are standard blocks and count exactly.
  EXPECT_GE(exact, 30);
}

// Standard blocks are exact: one BERT-base encoder layer.
TEST(ModelSpecTest, BertBaseEncoderLayerIsExact) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok());
  auto spec = catalog->Find("transformer-block");
  ASSERT_TRUE(spec.ok());
  // 4*768*768 + 4*768 (attention) + 2*768*3072 + 3072 + 768 (MLP) + 2*2*768.
  EXPECT_EQ(CountParams(**spec), 7087872u);
}

TEST(ModelSpecTest, CountsGroupedQueryAttentionAndGatedMlp) {
  auto spec = ParseSpecJson(R"json({
    "name": "llama-layer", "positions": 16,
    "layers": [
      {"attention": {"hidden": 4096, "heads": 32, "kv_heads": 8}},
      {"mlp": {"hidden": 4096, "ffn": 14336, "gated": true}},
      {"norm": {"kind": "RMS", "dim": 4096}, "repeat": 2}
    ]})json",
                            "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  // q,o: 2*4096*4096; k,v: 2*4096*1024; SwiGLU 3*4096*14336; norms 2*4096.
  EXPECT_EQ(CountParams(*spec), 2ull * 4096 * 4096 + 2ull * 4096 * 1024 +
                                    3ull * 4096 * 14336 + 2ull * 4096);
}

TEST(ModelSpecTest, CountsLstmAsPyTorchDoes) {
  auto spec = ParseSpecJson(R"json({
    "name": "lstm", "positions": 10,
    "layers": [{"recurrent": {"cell": "LSTM", "input_size": 300,
                              "hidden": 256, "num_layers": 2}}]})json",
                            "test");
  ASSERT_TRUE(spec.ok()) << spec.status();
  // torch.nn.LSTM(300, 256, 2): 4*256*(300+256) + 8*256 + 4*256*(256+256) +
  // 8*256.
  EXPECT_EQ(CountParams(*spec), 1097728u);
}

TEST(ModelSpecTest, RejectsSpecWithoutLayers) {
  auto spec = ParseSpecJson(R"({"name": "empty", "positions": 4})", "x.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("spec.layers is empty"));
}

TEST(ModelSpecTest, RejectsMalformedJsonNamingTheSource) {
  auto spec = ParseSpecJson(R"({"name": "x", "layers": [)", "bad.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(spec.status().message(), HasSubstr("bad.json"));
}

TEST(ModelSpecTest, RejectsNegativeSizeAsMalformed) {
  auto spec = ParseSpecJson(
      R"({"name": "x", "positions": 4, "layers": [{"linear":
          {"in_features": -3, "out_features": 4}}]})",
      "neg.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelSpecTest, RejectsZeroSizeNamingTheField) {
  auto spec = ParseSpecJson(
      R"({"name": "x", "positions": 4, "layers": [{"linear": {"in_features": 8}}]})",
      "zero.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("spec.layers[0].linear.out_features = 0"));
  EXPECT_THAT(spec.status().message(), HasSubstr("allowed 1.."));
}

TEST(ModelSpecTest, RejectsHeadsThatDoNotDivideHidden) {
  auto spec = ParseSpecJson(
      R"({"name": "x", "positions": 4, "layers": [{"attention":
          {"hidden": 100, "heads": 3}}]})",
      "heads.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(),
              HasSubstr("spec.layers[0].attention.heads = 3"));
}

TEST(ModelSpecTest, RejectsLayerWithoutPositions) {
  auto spec = ParseSpecJson(
      R"({"name": "x", "layers": [{"linear": {"in_features": 8, "out_features": 8}}]})",
      "pos.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("spec.layers[0].positions"));
}

TEST(ModelSpecTest, RejectsLayerWithoutKind) {
  auto spec = ParseSpecJson(R"({"name": "x", "positions": 2, "layers": [{}]})",
                            "kind.json");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("has no kind; allowed"));
}

// An enum value the API does not define (a newer client, or a forged
// request) is refused like an unset one, naming the field and the value.
TEST(ModelSpecTest, RejectsUnknownEnumValuesNamingTheField) {
  v1::ModelSpec spec;
  spec.set_name("x");
  spec.set_positions(2);
  v1::Layer* layer = spec.add_layers();
  layer->mutable_norm()->set_dim(8);
  layer->mutable_norm()->set_kind(static_cast<v1::Norm::Kind>(99));
  absl::Status status = ValidateSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("spec.layers[0].norm.kind = 99 is not known"));

  layer->Clear();
  layer->mutable_recurrent()->set_cell(static_cast<v1::Recurrent::Cell>(-1));
  layer->mutable_recurrent()->set_input_size(4);
  layer->mutable_recurrent()->set_hidden(4);
  status = ValidateSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("spec.layers[0].recurrent.cell = -1 is not known"));

  layer->Clear();
  layer->mutable_elementwise()->set_op(static_cast<v1::Elementwise::Op>(7));
  layer->mutable_elementwise()->set_dim(4);
  status = ValidateSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("spec.layers[0].elementwise.op = 7 is not known"));
  layer->mutable_elementwise()->set_op(v1::Elementwise::ADD);
  EXPECT_TRUE(ValidateSpec(spec).ok());
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

v1::ModelSpec OneLayer(const std::string& name) {
  v1::ModelSpec spec;
  spec.set_name("big");
  spec.set_positions(1);
  spec.add_layers()->set_name(name);
  return spec;
}

// Issue 32: an inline Linear 2^32 -> 2^32 (and an Embedding, a Conv)
// counted 2^64 = 0 parameters and was FITS on an H200. Every product is
// checked: the error names the layer, its kind and the product.
TEST(ModelSpecTest, CountsThatOverflowAreRefusedNamingLayerAndProduct) {
  const uint64_t big = uint64_t{1} << 32;
  v1::ModelSpec linear = OneLayer("fc1");
  linear.mutable_layers(0)->mutable_linear()->set_in_features(big);
  linear.mutable_layers(0)->mutable_linear()->set_out_features(big);
  absl::Status status = ValidateSpec(linear);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "spec.layers[0]: layer 'fc1' (Linear): 4294967296 x 4294967296 "
            "overflows the parameter count");
  // Counted anyway (a caller that skipped validation), it saturates.
  EXPECT_EQ(CountParams(linear), UINT64_MAX);

  v1::ModelSpec embedding = OneLayer("wte");
  embedding.mutable_layers(0)->mutable_embedding()->set_num_embeddings(big);
  embedding.mutable_layers(0)->mutable_embedding()->set_dim(big);
  EXPECT_EQ(ValidateSpec(embedding).message(),
            "spec.layers[0]: layer 'wte' (Embedding): 4294967296 x 4294967296 "
            "overflows the parameter count");

  v1::ModelSpec conv = OneLayer("stem");
  v1::Conv& c = *conv.mutable_layers(0)->mutable_conv();
  c.set_in_channels(big);
  c.set_out_channels(big);
  c.add_kernel(3);
  EXPECT_EQ(ValidateSpec(conv).message(),
            "spec.layers[0]: layer 'stem' (Conv): 4294967296 x 4294967296 "
            "overflows the parameter count");

  // A repeat that overflows names the repeated layer; one inside a block
  // names the inner layer.
  v1::ModelSpec repeated = OneLayer("wide");
  repeated.mutable_layers(0)->set_repeat(100000);
  repeated.mutable_layers(0)->mutable_linear()->set_in_features(big);
  repeated.mutable_layers(0)->mutable_linear()->set_out_features(big / 2);
  EXPECT_EQ(ValidateSpec(repeated).message(),
            "spec.layers[0]: layer 'wide' (Linear): 100000 x "
            "9223372036854775808 overflows the parameter count");
  v1::ModelSpec nested = OneLayer("blocks");
  v1::Layer& inner = *nested.mutable_layers(0)->mutable_block()->add_layers();
  inner.set_name("experts");
  v1::Moe& moe = *inner.mutable_moe();
  moe.set_hidden(big);
  moe.set_ffn(big);
  moe.set_experts(8);
  moe.set_top_k(2);
  EXPECT_THAT(ValidateSpec(nested).message(),
              HasSubstr("spec.layers[0]: layer 'experts' (Moe): "));
}

// A count that fits 64 bits but no machine is refused too: at most 10^14.
TEST(ModelSpecTest, CountsPastKMaxParamsAreRefused) {
  v1::ModelSpec spec = OneLayer("fc1");
  spec.mutable_layers(0)->mutable_linear()->set_in_features(uint64_t{1} << 32);
  spec.mutable_layers(0)->mutable_linear()->set_out_features(uint64_t{1} << 20);
  EXPECT_EQ(ValidateSpec(spec).message(),
            "spec 'big' has 4503599627370496 parameters; allowed up to "
            "100000000000000");
  spec.mutable_layers(0)->mutable_linear()->set_out_features(20000);
  EXPECT_TRUE(ValidateSpec(spec).ok());
  EXPECT_EQ(CountParams(spec), uint64_t{20000} << 32);
}

}  // namespace
}  // namespace headroom
