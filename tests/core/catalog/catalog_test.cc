#include <cstring>
#include <map>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "core/catalog/gpu_catalog.h"
#include "core/catalog/model_catalog.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"

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

TEST(GpuCatalogTest, CardsPeopleAskAbout) {
  const std::pair<const char*, double> cards[] = {
      {"V100-16GB", 16}, {"V100-32GB", 32},    {"RTX 3090", 24},
      {"rtx3090", 24},   {"A6000", 48},        {"L40S", 48},
      {"H100 NVL", 94},  {"H20", 96},          {"GH200", 96},
      {"B200", 180},     {"RTX PRO 6000", 96}, {"MI300X", 192},
      {"4090", 24},      {"rtx4090", 24},      {"RTX 4090", 24}};
  for (const auto& [name, gb] : cards) {
    auto gpu = FindGpu(name);
    ASSERT_TRUE(gpu.ok()) << name << ": " << gpu.status();
    EXPECT_EQ(gpu->memory_gb, gb) << name;
  }
  EXPECT_EQ(FindGpu("rtx4090")->name, "RTX 4090");
}

TEST(GpuCatalogTest, AmbiguousNamesAskWhich) {
  for (const char* name : {"A100", "a100", "V100"}) {
    auto gpu = FindGpu(name);
    ASSERT_FALSE(gpu.ok()) << name;
    EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(gpu.status().message(), HasSubstr("ambiguous"));
  }
  EXPECT_THAT(FindGpu("A100").status().message(),
              HasSubstr("A100-40GB or A100-80GB"));
}

TEST(GpuCatalogTest, DriverNamesMapToEntries) {
  const std::pair<const char*, const char*> names[] = {
      {"NVIDIA A100-SXM4-80GB", "A100-80GB"},
      {"NVIDIA A100-SXM4-40GB", "A100-40GB"},
      {"NVIDIA A100-PCIE-40GB", "A100-40GB"},
      {"NVIDIA A100 80GB PCIe", "A100-80GB"},
      {"Tesla V100-SXM2-16GB", "V100-16GB"},
      {"Tesla V100-PCIE-32GB", "V100-32GB"},
      {"Tesla T4", "T4"},
      {"NVIDIA H100 80GB HBM3", "H100"},
      {"NVIDIA H100 PCIe", "H100"},
      {"NVIDIA H100 NVL", "H100 NVL"},
      {"NVIDIA H200", "H200"},
      {"NVIDIA GH200 480GB", "GH200"},
      {"NVIDIA H20", "H20"},
      {"NVIDIA L40S", "L40S"},
      {"NVIDIA L4", "L4"},
      {"NVIDIA-L4", "L4"},
      {"NVIDIA A10G", "A10G"},
      {"NVIDIA RTX A6000", "RTX A6000"},
      {"NVIDIA GeForce RTX 3090", "RTX 3090"},
      {"NVIDIA GeForce RTX 4090", "RTX 4090"},
      {"NVIDIA B200", "B200"},
      {"NVIDIA RTX PRO 6000 Blackwell Server Edition",
       "RTX PRO 6000 Blackwell"},
      {"AMD Instinct MI300X", "MI300X"},
      {"NVIDIA Quadro P620", ""},
  };
  for (const auto& [driver, catalog] : names) {
    EXPECT_EQ(CatalogGpuForDriverName(driver), catalog) << driver;
  }
}

// Every catalog card by the name nvidia-smi (NVML) prints for it, as the
// driver's product table spells it (NVIDIA/open-gpu-kernel-modules
// README.md @ 015742d32fa615353199b11589ecaba828040859, "Compatible GPUs":
// A100-PCIE-40GB, A800-SXM4-80GB, RTX 3090, RTX A6000, A10G, H100 NVL, H20,
// H100 80GB HBM3, H200, GH200 480GB, RTX 4090, RTX 4090 D, L40S, L4; the
// others as DriverNamesMapToEntries has them), and the same in lower case
// and without "NVIDIA ". A card added to the catalog without its driver
// name here fails.
TEST(GpuCatalogTest, FindGpuTakesEveryCardsNvidiaSmiName) {
  const std::map<std::string, std::string> smi = {
      {"T4", "Tesla T4"},
      {"V100-16GB", "Tesla V100-SXM2-16GB"},
      {"V100-32GB", "Tesla V100-PCIE-32GB"},
      {"RTX 3090", "NVIDIA GeForce RTX 3090"},
      {"RTX A6000", "NVIDIA RTX A6000"},
      {"A10G", "NVIDIA A10G"},
      {"A100-40GB", "NVIDIA A100-PCIE-40GB"},
      {"A100-80GB", "NVIDIA A100-SXM4-80GB"},
      {"A800", "NVIDIA A800-SXM4-80GB"},
      {"L4", "NVIDIA L4"},
      {"RTX 4090", "NVIDIA GeForce RTX 4090"},
      {"RTX 4090D", "NVIDIA GeForce RTX 4090 D"},
      {"L40S", "NVIDIA L40S"},
      {"H100", "NVIDIA H100 80GB HBM3"},
      {"H100 NVL", "NVIDIA H100 NVL"},
      {"H20", "NVIDIA H20"},
      {"GH200", "NVIDIA GH200 480GB"},
      {"GH200-144GB", "NVIDIA GH200 144G HBM3e"},
      {"H200", "NVIDIA H200"},
      {"RTX 5090", "NVIDIA GeForce RTX 5090"},
      {"RTX PRO 6000 Blackwell",
       "NVIDIA RTX PRO 6000 Blackwell Server Edition"},
      {"B200", "NVIDIA B200"},
      {"MI300X", "AMD Instinct MI300X"},
  };
  for (const GpuInfo& card : GpuCatalog()) {
    SCOPED_TRACE(card.name);
    auto it = smi.find(card.name);
    ASSERT_NE(it, smi.end()) << "no nvidia-smi name for " << card.name;
    const std::string& name = it->second;
    std::string bare = name;
    for (const char* vendor : {"NVIDIA ", "AMD Instinct "}) {
      if (absl::StartsWith(bare, vendor)) bare = bare.substr(strlen(vendor));
    }
    for (const std::string& asked : {name, absl::AsciiStrToLower(name),
                                     absl::AsciiStrToUpper(name), bare}) {
      absl::StatusOr<GpuInfo> gpu = FindGpu(asked);
      ASSERT_TRUE(gpu.ok()) << asked << ": " << gpu.status();
      EXPECT_EQ(gpu->name, card.name) << asked;
    }
  }
  EXPECT_EQ(smi.size(), GpuCatalog().size());
}

// Only a driver name (with its vendor word) is cut to its first words: a
// typo a person makes is not quietly another card.
TEST(GpuCatalogTest, TyposAreNotCutToAnotherCard) {
  EXPECT_EQ(FindGpu("H100 NVLL").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(FindGpu("NVIDIA H100 NVL")->name, "H100 NVL");
  EXPECT_EQ(FindGpu("NVIDIA A100").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(GpuCatalogTest, UnknownGpuListsCloseNames) {
  auto gpu = FindGpu("H1000");
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gpu.status().message(), HasSubstr("H100"));
}

TEST(ModelCatalogTest, UnknownTemplateListsCloseNames) {
  auto catalog = LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  auto spec = catalog->Find("bert-bse");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(spec.status().message(), HasSubstr("bert-base"));
}

// A job names its model as the framework does: by catalog name, Hub id
// (litgpt's checkpoint_dir is checkpoints/<hub id>) or a builder's name.
TEST(ModelCatalogTest, ResolvesNamesHubIdsAndAliases) {
  auto catalog = LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"llama-3.1-8b", "llama-3.1-8b"},
      {"LLAMA-3.1-8B", "llama-3.1-8b"},
      {"meta-llama/Llama-3.1-8B", "llama-3.1-8b"},
      {"meta-llama/llama-3.1-8b/", "llama-3.1-8b"},
      // litgpt's hf_config for Llama 3.1 8B, as its checkpoint_dir.
      {"checkpoints/meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"},
      {"Meta-Llama-3.1-8B", "llama-3.1-8b"},
      // torchtune's builders.
      {"llama3_1_8b", "llama-3.1-8b"},
      {"QLORA_LLAMA3_1_8B", "llama-3.1-8b"},
      {"qwen3_8b_instruct", "qwen3-8b"},
      {"tiny-llama-1.1b-chat", "tinyllama-1.1b-chat-v1.0"},
      {"checkpoints/meta-llama/Llama-2-7b-hf/", "llama-2-7b"},
      {"Llama-2-7b-hf", "llama-2-7b"},
      {"lora_llama2_7b", "llama-2-7b"},
      {"Meta-Llama-3-8B", "llama-3-8b"},
      {"mistralai/Mistral-7B-v0.1", "mistral-7b-v0.1"},
      {"qlora_mistral_7b", "mistral-7b-v0.1"},
      {"google/gemma-2-9b", "gemma-2-9b"},
      {"qwen3_32b", "qwen3-32b"},
      // Templates resolve to themselves.
      {"gpt2", "gpt2"},
      {"qwen3-8b-r", "qwen3-8b-r"},
  };
  for (const auto& [id, name] : cases) {
    absl::StatusOr<std::string> resolved = catalog->ResolveId(id);
    ASSERT_TRUE(resolved.ok()) << id << ": " << resolved.status();
    EXPECT_EQ(*resolved, name) << id;
  }
  absl::StatusOr<std::string> unknown =
      catalog->ResolveId("meta-llama/Llama-3.1-9B");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("model id 'meta-llama/Llama-3.1-9B' is neither a "
                        "catalog name, nor the Hugging Face hub id"));
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("closest: meta-llama/Llama-3.1-8B"));
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("give its config.json with --model FILE"));
  // A Hub id with another owner is not the model.
  EXPECT_FALSE(catalog->ResolveId("someone/Llama-3.1-8B").ok());
}

// No id names two models: a hub id or alias already taken (in any case), or
// a model named as another's alias, is refused.
TEST(ModelCatalogTest, AnIdNamesOneModel) {
  auto shipped = LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  absl::StatusOr<const v1::ModelSpec*> qwen = shipped->Find("qwen2.5-3b");
  ASSERT_TRUE(qwen.ok());
  auto add = [&](ModelCatalog& catalog, const std::string& name,
                 const std::string& hub, std::vector<std::string> aliases) {
    v1::ModelSpec spec = **qwen;
    spec.set_name(name);
    FullModelSource source;
    source.hub = hub;
    source.aliases = std::move(aliases);
    return catalog.AddFullModel(std::move(spec), std::move(source));
  };
  ModelCatalog catalog;
  ASSERT_TRUE(add(catalog, "a", "org/a", {"a_builder"}).ok());
  EXPECT_EQ(add(catalog, "b", "ORG/A", {}).message(),
            "hub 'ORG/A' of b already names a");
  EXPECT_EQ(add(catalog, "b", "org/b", {"A_Builder"}).message(),
            "alias 'A_Builder' of b already names a");
  EXPECT_EQ(add(catalog, "b", "org/b", {"x", "X"}).message(),
            "alias 'X' of b already names b");
  EXPECT_EQ(add(catalog, "b", "org/b", {"A"}).message(),
            "alias 'A' of b already names a");
  EXPECT_EQ(add(catalog, "a_builder", "org/c", {}).message(),
            "name 'a_builder' is already an id of a");
  ASSERT_TRUE(add(catalog, "b", "org/b", {"b_builder"}).ok());
  EXPECT_EQ(*catalog.ResolveId("b_builder"), "b");
  EXPECT_EQ(*catalog.ResolveId("org/a"), "a");
}

}  // namespace
}  // namespace headroom
