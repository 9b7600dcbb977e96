#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/catalog/gpu_catalog.h"
#include "server/core/catalog/model_catalog.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(GpuCatalogTest, FindsNamesAndAliases) {
  EXPECT_EQ(FindGpu("L4")->memory_gb, 24);
  EXPECT_EQ(FindGpu("a10g")->memory_gb, 24);
  EXPECT_EQ(FindGpu("A100-40GB")->memory_gb, 40);
  EXPECT_EQ(FindGpu("h100")->arch, "hopper");
  EXPECT_EQ(FindGpu("H200")->memory_gb, 141);
  EXPECT_EQ(FindGpu("RTX PRO 6000")->name, "RTX PRO 6000 Blackwell");
  EXPECT_EQ(FindGpu("rtx-5090")->memory_gb, 32);
  EXPECT_EQ(FindGpu("T4")->arch, "turing");
  EXPECT_EQ(FindGpu("RTX 4090")->arch, "ada");
  EXPECT_EQ(FindGpu("B200")->arch, "blackwell");
}

TEST(GpuCatalogTest, UnknownGpuListsCloseNames) {
  auto gpu = FindGpu("H1000");
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gpu.status().message(), HasSubstr("H100"));
}

TEST(ModelCatalogTest, UnknownTemplateListsCloseNames) {
  auto catalog =
      ModelCatalog::LoadDirectory(std::string(HEADROOM_SOURCE_DIR) + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  auto spec = catalog->Find("bert-bse");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr("bert-base"));
}

TEST(ModelCatalogTest, MissingDirectoryIsNotFound) {
  auto catalog = ModelCatalog::LoadDirectory("/nonexistent/models");
  EXPECT_EQ(catalog.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace headroom
