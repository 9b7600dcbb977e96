// Published runs read from disk (io/published_runs.h): real rows of
// tests/data/published/ become MeasuredRuns; bad rows refuse the file,
// naming the line, the row and the field.

#include "io/published_runs.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_replace.h"
#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;
const std::string kRows = kRoot + "/tests/data/published/published-runs.jsonl";

const ModelCatalog& Catalog() {
  static const ModelCatalog* catalog = [] {
    auto loaded = LoadModelCatalog(kRoot + "/models");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return new ModelCatalog(std::move(*loaded));
  }();
  return *catalog;
}

TEST(PublishedRunsTest, RealRowsBecomeMeasuredRuns) {
  auto loaded = LoadPublishedRuns(kRows, Catalog());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // Usable: every row (a feature the setup cannot say yet keeps no row
  // out; its source names it).
  ASSERT_EQ(loaded->usable.size(), 6u);
  ASSERT_EQ(loaded->unused.size(), 0u);

  const v1::MeasuredRun& lora = loaded->usable[1];
  EXPECT_EQ(lora.measured_by(), v1::PUBLISHED);
  EXPECT_EQ(lora.metric(), v1::UNSTATED);
  EXPECT_EQ(lora.publication(), "torchtune-readme-2024-04");
  EXPECT_EQ(lora.source(),
            "published torchtune-readme-2024-04/llama2-7b/lora/2x4090");
  EXPECT_EQ(lora.framework(), "torchtune");
  EXPECT_EQ(lora.gpu(), "RTX 4090");
  EXPECT_EQ(lora.batch(), 2u);
  EXPECT_DOUBLE_EQ(lora.measured_peak_gb(), 20.95);
  EXPECT_FALSE(lora.has_oom_on_gb());
  EXPECT_TRUE(lora.excluded().empty());
  EXPECT_TRUE(lora.template_().empty());
  // Llama-2-7b-hf: 6,738,415,616 parameters; the config converted at the
  // row's 512 positions (an HF config binds none: the setup keeps them).
  EXPECT_EQ(CountParams(lora.spec()), 6738415616u);
  EXPECT_EQ(lora.params(), 6738415616u);
  EXPECT_EQ(lora.spec().positions(), 512u);
  EXPECT_EQ(lora.setup().positions(), 512u);
  EXPECT_EQ(lora.setup().gpus(), 2u);
  EXPECT_EQ(lora.setup().parallel(), v1::TrainingSetup::FSDP_FULL);
  EXPECT_EQ(lora.setup().lora().rank(), 8u);
  EXPECT_FALSE(lora.model_key().empty());

  // OOM rows: OOM on the card's catalog memory.
  EXPECT_EQ(loaded->usable[3].gpu(), "V100-16GB");
  EXPECT_DOUBLE_EQ(loaded->usable[3].oom_on_gb(), 16);
  EXPECT_FALSE(loaded->usable[3].has_measured_peak_gb());
  EXPECT_EQ(loaded->usable[3].batch(), 6u);
  EXPECT_DOUBLE_EQ(loaded->usable[4].oom_on_gb(), 32);

  // Rows with unmodelled features: used, the features in the source; a
  // template's spec is copied into the run and keeps the setup's positions.
  const v1::MeasuredRun& chunked = loaded->usable[0];
  EXPECT_TRUE(chunked.excluded().empty());
  EXPECT_THAT(chunked.source(),
              HasSubstr("(unmodelled: chunked-ce, generate-eval)"));
  EXPECT_EQ(chunked.metric(), v1::ALLOCATED);
  const v1::MeasuredRun& templated = loaded->usable[2];
  EXPECT_EQ(templated.spec().name(), "llama-3.1-70b");
  EXPECT_EQ(templated.setup().positions(), 2048u);
  EXPECT_EQ(loaded->usable[5].metric(), v1::RESERVED);
  EXPECT_DOUBLE_EQ(loaded->usable[5].measured_peak_gb(), 51.164);
}

// A scratch folder holding a published runs file and its configs.
class BadRowsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("headroom-published-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / kPublishedConfigsDir);
    fs::copy_file(
        kRoot + "/tests/data/published/published-configs/llama-2-7b.json",
        dir_ / kPublishedConfigsDir / "llama-2-7b.json");
    std::ofstream(dir_ / "outside.json") << "{}";
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Loads a file of a good row, then `row` (a good row with the text
  // replacements made) on line 2.
  absl::Status Load(
      const std::vector<std::pair<std::string, std::string>>& replacements) {
    const std::string path = (dir_ / kPublishedRunsFile).string();
    std::ofstream(path) << kGood << "\n"
                        << absl::StrReplaceAll(
                               absl::StrReplaceAll(kGood,
                                                   {{"\"r1\"", "\"r2\""}}),
                               replacements)
                        << "\n";
    return LoadPublishedRuns(path, Catalog()).status();
  }

  static constexpr char kGood[] =
      R"({"publication": "p", "row": "r1", "citation": {"url": )"
      R"("https://example.org/page", "date": "2024-01-01", "quote": "12.5 GB"},)"
      R"( "model_id": "meta-llama/Llama-2-7b-hf", "config": "llama-2-7b.json",)"
      R"( "framework": "torch", "setup": {"precision": "BF16_TRUE", "optimizer":)"
      R"( "ADAMW", "positions": 512, "lora": {"rank": 8, "targets": ["q", "v"]}},)"
      R"( "batch": 1, "gpu": "L4", "metric": "allocated", "measured_gb": 12.5,)"
      R"( "setup_clear": true})";
  fs::path dir_;
};

TEST_F(BadRowsTest, GoodRowsLoad) {
  const std::string path = (dir_ / kPublishedRunsFile).string();
  EXPECT_TRUE(Load({}).ok()) << Load({});
  auto loaded = LoadPublishedRuns(path, Catalog());
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->usable.size(), 2u);
}

TEST_F(BadRowsTest, EachBadFieldIsNamedAndNothingLoads) {
  const std::string at = ":2 (row r2): ";
  struct Case {
    std::vector<std::pair<std::string, std::string>> edit;
    std::string message;
  };
  const Case cases[] = {
      {{{"\"batch\"", "\"bacth\""}}, ":2: malformed JSON"},
      {{{"\"quote\": \"12.5 GB\"", "\"quote\": \"\""}},
       at + "citation.quote is empty"},
      {{{"\"url\": \"https://example.org/page\"", "\"repo\": \"a/b\""}},
       at + "citation names no source; allowed: citation.repo + "
            "citation.path + citation.commit, or citation.url"},
      {{{"\"allocated\"", "\"peak\""}},
       at + "metric = 'peak' is unknown; allowed allocated, reserved, device, "
            "unstated"},
      {{{"\"framework\": \"torch\"", "\"framework\": \"jax\""}},
       at + "framework = 'jax' is unknown; allowed litgpt,"},
      {{{"\"setup_clear\": true", "\"setup_clear\": true, \"oom\": true"}},
       at + "measured_gb is set on an oom row"},
      {{{"\"measured_gb\": 12.5,", ""}}, at + "neither measured_gb nor oom"},
      {{{"\"setup\": {\"precision\": \"BF16_TRUE\", \"optimizer\": \"ADAMW\", "
         "\"positions\": 512, \"lora\": {\"rank\": 8, \"targets\": [\"q\", "
         "\"v\"]}},",
         ""}},
       at + "setup is missing"},
      {{{"\"publication\": \"p\"", "\"publication\": \"\""}},
       ":2 (row r2): publication is empty"},
      {{{"\"config\": \"llama-2-7b.json\"", "\"config\": \"../outside.json\""}},
       at + "config '../outside.json' is outside published-configs/"},
      {{{"\"config\": \"llama-2-7b.json\"", "\"config\": \"missing.json\""}},
       at + "config 'missing.json': "},
      {{{"\"config\": \"llama-2-7b.json\"", "\"template\": \"no-such-model\""}},
       at + "template 'no-such-model' is not in the catalog"},
      {{{"\"setup_clear\": true",
         "\"setup_clear\": true, \"unmodelled\": [\"chunky\"]"}},
       at + "unmodelled 'chunky' is unknown; allowed chunked-ce,"},
      {{{"\"r2\"", "\"r1\""}},
       ":2 (row r1): publication 'p' has this row twice"},
  };
  for (const Case& c : cases) {
    const absl::Status status = Load(c.edit);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.message << " / " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(c.message));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr((dir_ / kPublishedRunsFile).string()));
  }
}

// A card the catalog lacks, with or without its memory: listed, not used,
// and the rest of the file loads.
TEST_F(BadRowsTest, UnknownCardWithItsMemoryIsListedNotUsed) {
  ASSERT_TRUE(Load({{"\"gpu\": \"L4\"", "\"gpu\": \"unnamed\""}}).ok());

  ASSERT_TRUE(
      Load({{"\"gpu\": \"L4\"", "\"gpu\": \"48GB GPU\", \"gpu_memory_gb\": 48"},
            {"\"measured_gb\": 12.5,", ""},
            {"\"setup_clear\": true",
             "\"setup_clear\": true, "
             "\"oom\": true"}})
          .ok());
  auto loaded =
      LoadPublishedRuns((dir_ / kPublishedRunsFile).string(), Catalog());
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->unused.size(), 1u);
  EXPECT_DOUBLE_EQ(loaded->unused[0].oom_on_gb(), 48);
  EXPECT_EQ(loaded->unused[0].excluded(),
            "published: gpu '48GB GPU' is not in the catalog");
}

// The data helpers list rows whose source gives no batch, setup_clear
// false; a clear row must have one.
TEST_F(BadRowsTest, OnlyAnUnclearRowMayLackItsBatch) {
  EXPECT_THAT(std::string(Load({{"\"batch\": 1,", ""}}).message()),
              HasSubstr(":2 (row r2): batch = 0; allowed"));
  ASSERT_TRUE(Load({{"\"batch\": 1,", ""},
                    {"\"setup_clear\": true", "\"setup_clear\": false"}})
                  .ok());
  auto loaded =
      LoadPublishedRuns((dir_ / kPublishedRunsFile).string(), Catalog());
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(loaded->unused.size(), 1u);
  EXPECT_EQ(loaded->unused[0].batch(), 0u);
  EXPECT_EQ(loaded->unused[0].excluded(),
            "published: setup not clear (see its notes)");
}

// The row's batch is the per-GPU micro-batch; the run's is the step's:
// 3 microbatches of 2 are a step of 6, which CheckFit divides back.
TEST_F(BadRowsTest, AStepIsGradAccumMicroBatches) {
  ASSERT_TRUE(
      Load({{"\"positions\": 512,", "\"positions\": 512, \"gradAccum\": 3,"},
            {"\"batch\": 1,", "\"batch\": 2,"}})
          .ok());
  auto loaded =
      LoadPublishedRuns((dir_ / kPublishedRunsFile).string(), Catalog());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->usable.size(), 2u);
  EXPECT_EQ(loaded->usable[0].batch(), 1u);
  EXPECT_EQ(loaded->usable[1].batch(), 6u);
  EXPECT_EQ(loaded->usable[1].setup().grad_accum(), 3u);
}

TEST_F(BadRowsTest, LinesAreBounded) {
  const std::string path = (dir_ / kPublishedRunsFile).string();
  std::ofstream(path) << kGood << "\n"
                      << std::string(kMaxPublishedLineBytes + 1, ' ') << "\n";
  auto loaded = LoadPublishedRuns(path, Catalog());
  EXPECT_THAT(std::string(loaded.status().message()),
              HasSubstr(":2: 65537 bytes; allowed at most 65536 a line"));
}

// The shipped file (37 rows of bench/published/ converted until the data
// helpers' rows are merged) loads, its configs beside it.
TEST(PublishedRunsFileTest, ShippedFileLoads) {
  auto loaded =
      LoadPublishedRuns(kRoot + "/data/published-runs.jsonl", Catalog());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_GE(loaded->usable.size() + loaded->unused.size(), 37u);
  EXPECT_GE(loaded->usable.size(), 2u);
  for (const v1::MeasuredRun& run : loaded->usable) {
    EXPECT_EQ(run.measured_by(), v1::PUBLISHED) << run.source();
    EXPECT_TRUE(run.has_spec()) << run.source();
  }
}

TEST(PublishedRunsFileTest, RecognizedByNameOrFirstLine) {
  EXPECT_TRUE(IsPublishedRunsFile("data/published-runs.jsonl", ""));
  EXPECT_TRUE(IsPublishedRunsFile("x.jsonl", R"({"publication": "p"})"));
  EXPECT_FALSE(IsPublishedRunsFile("data/memory-runs.jsonl",
                                   R"({"template": "bert-base"})"));
}

TEST(PublishedRunsFileTest, RunsFilesReadBothKinds) {
  auto reference = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
  ASSERT_TRUE(reference.ok());
  auto runs =
      LoadRunsFiles(kRoot + "/data/memory-runs.jsonl," + kRows, Catalog());
  ASSERT_TRUE(runs.ok()) << runs.status();
  // Every published row here is on a catalog card and used: all six are
  // stored, none excluded.
  ASSERT_EQ(runs->size(), reference->size() + 6);
  EXPECT_EQ(runs->back().measured_by(), v1::PUBLISHED);
  EXPECT_TRUE(runs->back().excluded().empty());
  EXPECT_NE((*runs)[0].measured_by(), v1::PUBLISHED);
  auto bad =
      LoadRunsFiles(kRoot + "/data/memory-runs.jsonl,/nonexistent", Catalog());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace headroom
