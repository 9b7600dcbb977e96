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

}  // namespace
}  // namespace headroom
