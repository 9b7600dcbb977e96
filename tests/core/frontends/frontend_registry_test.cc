// The front-end registry: which front-end a ModelRef or a model file is
// for, decided in one place (core/frontends/frontend_registry.h).

#include "core/frontends/frontend_registry.h"

#include <string>

#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "tests/core/frontends/onnx_test_graphs.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const std::string kHfDir = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

std::string Read(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

v1::ModelRef::SourceCase SourceOfFile(const std::string& path,
                                      const std::string& contents) {
  absl::StatusOr<const ModelFrontend*> frontend =
      FrontendForFile(path, contents);
  EXPECT_TRUE(frontend.ok()) << frontend.status();
  return frontend.ok() ? (*frontend)->source() : v1::ModelRef::SOURCE_NOT_SET;
}

TEST(FrontendRegistryTest, EverySourceHasOneFrontend) {
  for (v1::ModelRef::SourceCase source :
       {v1::ModelRef::kTemplate, v1::ModelRef::kSpec, v1::ModelRef::kHfConfig,
        v1::ModelRef::kOnnx}) {
    const ModelFrontend* frontend = FrontendFor(source);
    ASSERT_NE(frontend, nullptr) << source;
    EXPECT_EQ(frontend->source(), source);
  }
  EXPECT_EQ(FrontendFor(v1::ModelRef::SOURCE_NOT_SET), nullptr);
  EXPECT_EQ(ModelFrontends().size(), 4u);
}

// A file's kind: a config names model_type, a spec has layers, an ONNX model
// is named .onnx or starts with ModelProto's first tag whatever its name.
TEST(FrontendRegistryTest, FilesAreJudgedByContent) {
  EXPECT_EQ(SourceOfFile("config.json", Read(kHfDir + "gpt2.json")),
            v1::ModelRef::kHfConfig);
  EXPECT_EQ(
      SourceOfFile("simple-cnn.json", Read(std::string(HEADROOM_SOURCE_DIR) +
                                           "/models/simple-cnn.json")),
      v1::ModelRef::kSpec);
  testing::GraphBuilder g("tiny");
  g.Output(g.Linear(g.Input("x", {"batch", 8}), 8, 8, true, "/fc"));
  EXPECT_EQ(SourceOfFile("tiny.model", g.Serialize()), v1::ModelRef::kOnnx);
  EXPECT_EQ(SourceOfFile("weights.ONNX", "anything"), v1::ModelRef::kOnnx);

  absl::StatusOr<const ModelFrontend*> none =
      FrontendForFile("config.json", R"({"hidden_size": 768})");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(),
              HasSubstr("config.json is not a model file"));
  EXPECT_THAT(none.status().message(), HasSubstr("\"model_type\""));
  EXPECT_THAT(none.status().message(), HasSubstr("\"layers\""));
  EXPECT_THAT(none.status().message(), HasSubstr(".onnx"));
}

TEST(FrontendRegistryTest, FileContentsFillTheFrontendsField) {
  v1::ModelRef ref;
  const ModelFrontend* spec = FrontendFor(v1::ModelRef::kSpec);
  ASSERT_TRUE(spec->SetFromFile("simple-cnn.json",
                                Read(std::string(HEADROOM_SOURCE_DIR) +
                                     "/models/simple-cnn.json"),
                                &ref)
                  .ok());
  EXPECT_EQ(ref.spec().name(), "simple-cnn");
  absl::Status bad =
      spec->SetFromFile("broken.json", R"({"name": "x", "layers": 3})", &ref);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.message(), HasSubstr("broken.json"));
  EXPECT_FALSE(FrontendFor(v1::ModelRef::kTemplate)
                   ->SetFromFile("gpt2", "{}", &ref)
                   .ok());
}

TEST(FrontendRegistryTest, BareNamesAreCatalogEntries) {
  EXPECT_FALSE(NamesAFile("llama-3-8b"));
  EXPECT_FALSE(NamesAFile("qwen2.5-7b"));
  EXPECT_TRUE(NamesAFile("models/gpt2.json"));
  EXPECT_TRUE(NamesAFile("config.json"));
  EXPECT_TRUE(NamesAFile("model.onnx"));
}

TEST(FrontendRegistryTest, ResolvesEachSourceAndRefusesAnEmptyRef) {
  ModelCatalog catalog;
  v1::ModelRef ref;
  absl::StatusOr<ResolvedModel> empty =
      ResolveModelRef(ref, v1::TrainingSetup(), catalog);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(empty.status().message(), HasSubstr("model is empty"));

  ref.set_hf_config(Read(kHfDir + "gpt2.json"));
  v1::TrainingSetup setup;
  setup.set_positions(512);
  absl::StatusOr<ResolvedModel> hf = ResolveModelRef(ref, setup, catalog);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(CountParams(hf->spec()), 124439808u);
  EXPECT_EQ(hf->spec().positions(), 512u);
  EXPECT_TRUE(ImportsModel(ref));

  ref.set_hf_config(R"({"model_type": "llama", "hidden_size": 0})");
  absl::StatusOr<ResolvedModel> bad = ResolveModelRef(ref, setup, catalog);
  EXPECT_THAT(bad.status().message(), HasSubstr("model.hf_config: "));

  ref.set_template_("no-such-model");
  absl::StatusOr<ResolvedModel> missing = ResolveModelRef(ref, setup, catalog);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(ImportsModel(ref));
}

// A model with a learned position table cannot run past it: a cut-down
// template answers with the full model it was cut from's table (bert-base
// from bert-base-uncased, max_position_embeddings 512; gpt2 from gpt2-124m,
// n_positions 1024), a full model with its own; rotary positions (qwen3-8b-r,
// cut from qwen3-8b) have no such limit.
TEST(FrontendRegistryTest, PositionsPastALearnedTableAreRefused) {
  absl::StatusOr<ModelCatalog> catalog =
      LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  const auto resolve = [&](const std::string& name, uint64_t positions) {
    v1::ModelRef ref;
    ref.set_template_(name);
    v1::TrainingSetup setup;
    setup.set_positions(positions);
    return ResolveModelRef(ref, setup, *catalog);
  };
  absl::StatusOr<ResolvedModel> refused = resolve("bert-base", 100000);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(refused.status().message(),
            "setup.positions = 100000 is past bert-base's learned position "
            "table (cut from bert-base-uncased: "
            "models/hf/bert-base-uncased.json sets max_position_embeddings "
            "512); allowed 1..512");
  EXPECT_TRUE(resolve("bert-base", 512).ok());
  EXPECT_THAT(resolve("gpt2", 1025).status().message(),
              HasSubstr("n_positions 1024); allowed 1..1024"));
  EXPECT_TRUE(resolve("gpt2", 1024).ok());
  absl::StatusOr<ResolvedModel> full = resolve("bert-base-uncased", 513);
  EXPECT_EQ(full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(full.status().message(),
              HasSubstr("setup.positions = 513 is past bert-base-uncased's "
                        "learned position table (models/hf/"
                        "bert-base-uncased.json sets max_position_embeddings "
                        "512)"));
  absl::StatusOr<ResolvedModel> rotary = resolve("qwen3-8b-r", 100000);
  EXPECT_TRUE(rotary.ok()) << rotary.status();
}

// Only a conversion that bound the lengths (ONNX) keeps the profile from
// rescaling them again.
TEST(FrontendRegistryTest, OnlyOnnxBindsPositions) {
  v1::TrainingSetup setup;
  setup.set_positions(256);
  v1::ModelRef ref;
  ref.set_onnx("x");
  EXPECT_EQ(ProfileSetup(ref, setup).positions(), 0u);
  ref.set_hf_config("{}");
  EXPECT_EQ(ProfileSetup(ref, setup).positions(), 256u);
  ref.set_template_("gpt2");
  EXPECT_EQ(ProfileSetup(ref, setup).positions(), 256u);
}

}  // namespace
}  // namespace headroom
