// The model catalog read from disk (io/catalog_files.h) and whole
// files (io/files.h).

#include "io/catalog_files.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/files.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(CatalogFilesTest, MissingDirectoryIsNotFound) {
  auto catalog = LoadModelCatalog("/nonexistent/models");
  EXPECT_EQ(catalog.status().code(), absl::StatusCode::kNotFound);
}

TEST(CatalogFilesTest, LoadsEveryShippedTemplate) {
  const std::string dir = std::string(HEADROOM_SOURCE_DIR) + "/models";
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() == ".json") ++files;
  }
  auto catalog = LoadModelCatalog(dir);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  // Templates, then the full models of models/hf/ (full_models_test.cc).
  EXPECT_EQ(catalog->size() - catalog->full_models(), files);
  EXPECT_GE(catalog->full_models(), 6u);
  EXPECT_TRUE(catalog->Find("bert-base").ok());
}

TEST(CatalogFilesTest, FileNameMustEqualSpecName) {
  char pattern[] = "/tmp/headroom-catalog-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  auto text =
      ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/models/simple-cnn.json");
  ASSERT_TRUE(text.ok()) << text.status();
  std::ofstream(dir + "/other-name.json") << *text;
  auto catalog = LoadModelCatalog(dir);
  EXPECT_EQ(catalog.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(catalog.status().message(),
              HasSubstr("other-name.json: name 'simple-cnn' must equal the "
                        "file name 'other-name'"));
  std::filesystem::remove_all(dir);
}

TEST(CatalogFilesTest, MissingFileIsNotFound) {
  auto text = ReadFile("/nonexistent/file.json");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(text.status().message(), "cannot open /nonexistent/file.json");
}

// The index is read strictly: an unknown key, aliases that are not an array
// of strings, and an alias naming two models are refused, naming the file and
// the key.
TEST(CatalogFilesTest, IndexAliasesAreCheckedByFileAndKey) {
  char pattern[] = "/tmp/headroom-aliases-XXXXXX";
  ASSERT_NE(mkdtemp(pattern), nullptr);
  const std::string dir = pattern;
  std::filesystem::create_directory(dir + "/hf");
  auto gpt2 =
      ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/models/hf/gpt2-124m.json");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  std::ofstream(dir + "/hf/one.json") << *gpt2;
  std::ofstream(dir + "/hf/two.json") << *gpt2;
  const std::string index = dir + "/hf/index.json";
  auto load = [&](const std::string& text) {
    std::ofstream(index, std::ios::trunc) << text;
    return LoadModelCatalog(dir);
  };
  absl::StatusOr<ModelCatalog> ok = load(
      R"({"models": [{"name": "one", "hub": "o/one", "aliases": ["gpt_one"]},
                     {"name": "two", "hub": "o/two", "aliases": []}]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok->ResolveId("GPT_ONE"), "one");
  ASSERT_EQ(ok->FullModelSourceOf("one")->aliases.size(), 1u);

  EXPECT_EQ(load(R"({"models": [{"name": "one", "hub": "o/one", "alias": []},
                                {"name": "two", "hub": "o/two"}]})")
                .status()
                .message(),
            index +
                " models[0]: unknown key \"alias\"; allowed: name, hub, "
                "cut_down_template, aliases");
  EXPECT_EQ(load(R"({"models": [{"name": "one", "hub": "o/one",
                                 "aliases": "gpt_one"},
                                {"name": "two", "hub": "o/two"}]})")
                .status()
                .message(),
            index + " models[0] \"aliases\": must be an array of strings");
  EXPECT_EQ(load(R"({"models": [{"name": "one", "hub": "o/one",
                                 "aliases": ["ok", "two words"]},
                                {"name": "two", "hub": "o/two"}]})")
                .status()
                .message(),
            index +
                " models[0] \"aliases\"[1]: must be a string of 1..128 "
                "characters, no spaces");
  const absl::Status twice =
      load(R"({"models": [{"name": "one", "hub": "o/one", "aliases": ["g"]},
                          {"name": "two", "hub": "o/two", "aliases": ["G"]}]})")
          .status();
  EXPECT_EQ(twice.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twice.message(),
            index + " models[1]: alias 'G' of two already names one");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace headroom
