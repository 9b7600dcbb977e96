#include "server/core/catalog/gpu_catalog.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/catalog/close_names.h"

namespace headroom {
namespace {

struct Alias {
  const char* alias;
  const char* name;
};

// Datasheet figures (NVIDIA product briefs): memory as marketed in GB,
// bandwidth in GB/s, dense fp16 tensor TFLOP/s.
const std::vector<GpuInfo>& Entries() {
  static const std::vector<GpuInfo> entries = {
      {"T4", 16, "turing", 320, 65},
      {"A10G", 24, "ampere", 600, 70},
      {"A100-40GB", 40, "ampere", 1555, 312},
      {"A100-80GB", 80, "ampere", 2039, 312},
      {"A800", 80, "ampere", 2039, 312},
      {"L4", 24, "ada", 300, 121},
      {"RTX 4090", 24, "ada", 1008, 165},
      {"RTX 4090D", 24, "ada", 1008, 147},
      {"H100", 80, "hopper", 3350, 989},
      {"H200", 141, "hopper", 4800, 989},
      {"RTX 5090", 32, "blackwell", 1792, 209},
      {"RTX PRO 6000 Blackwell", 96, "blackwell", 1792, 252},
      {"B200", 180, "blackwell", 8000, 2250},
  };
  return entries;
}

const std::vector<Alias>& Aliases() {
  static const std::vector<Alias> aliases = {
      {"A100", "A100-80GB"},
      {"A100 80GB", "A100-80GB"},
      {"A100 40GB", "A100-40GB"},
      {"H100 80GB", "H100"},
      {"H100 SXM", "H100"},
      {"H200 141GB", "H200"},
      {"RTX PRO 6000", "RTX PRO 6000 Blackwell"},
      {"4090", "RTX 4090"},
      {"5090", "RTX 5090"},
      {"GeForce RTX 4090", "RTX 4090"},
      {"GeForce RTX 5090", "RTX 5090"},
      {"Tesla T4", "T4"},
  };
  return aliases;
}

}  // namespace

const std::vector<GpuInfo>& GpuCatalog() { return Entries(); }

absl::Status CheckCardGb(double gb, absl::string_view field) {
  if (gb > 0 && gb <= kMaxCardGb) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " = ", gb, " is out of range; allowed (0, ", kMaxCardGb, "]"));
}

absl::StatusOr<GpuInfo> FindGpu(absl::string_view name) {
  const std::string key = NormalizeName(name);
  for (const GpuInfo& gpu : Entries()) {
    if (NormalizeName(gpu.name) == key) return gpu;
  }
  for (const Alias& alias : Aliases()) {
    if (NormalizeName(alias.alias) == key) {
      for (const GpuInfo& gpu : Entries()) {
        if (gpu.name == alias.name) return gpu;
      }
    }
  }
  std::vector<std::string> names;
  for (const GpuInfo& gpu : Entries()) names.push_back(gpu.name);
  return absl::NotFoundError(absl::StrCat(
      "GPU '", name.substr(0, 64), "' is not in the catalog; closest: ",
      absl::StrJoin(CloseNames(name, names, 3), ", "),
      " (or give a bare size in GB)"));
}

std::string CatalogGpuForDriverName(std::string name) {
  if (absl::StartsWithIgnoreCase(name, "NVIDIA ")) name = name.substr(7);
  absl::StatusOr<GpuInfo> gpu = FindGpu(name);
  if (gpu.ok()) return gpu->name;
  // Driver names add the memory and form factor: try the first words.
  for (size_t space = name.rfind(' '); space != std::string::npos;
       space = name.rfind(' ')) {
    name = name.substr(0, space);
    gpu = FindGpu(name);
    if (gpu.ok()) return gpu->name;
  }
  return "";
}

}  // namespace headroom
