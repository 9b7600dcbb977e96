#include "core/catalog/gpu_catalog.h"

#include <cmath>
#include <set>
#include <string>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/catalog/close_names.h"

namespace headroom {
namespace {

struct Alias {
  const char* alias;
  const char* name;
};

// Names that denote more than one card: the caller must say which.
struct Ambiguous {
  const char* alias;
  std::vector<const char*> names;
};

// Datasheet figures (NVIDIA and AMD product briefs): memory as marketed in
// GB, bandwidth in GB/s, dense fp16 tensor TFLOP/s (half the "with
// sparsity" figure where only that is printed), and the maximum board power
// (TDP) in W from the same datasheet: T4 70 W (T4 datasheet), V100 SXM2
// 300 W, A100 / A800 SXM 400 W (A100 datasheet), L4 72 W (L4 datasheet,
// "Max thermal design power (TDP) 72W"), L40S 350 W, RTX 4090 450 W,
// RTX 4090D 425 W, RTX 3090 350 W, RTX A6000 300 W, A10G 300 W (AWS G5),
// H100 SXM 700 W, H100 NVL 400 W, H20 400 W, GH200 1000 W (module), H200
// SXM 700 W, RTX 5090 575 W, RTX PRO 6000 Blackwell 600 W, B200 1000 W,
// MI300X 750 W (AMD). Idle power: a typical idle-state reading of the board
// (NVIDIA prints none); only the simulated card uses it.
const std::vector<GpuInfo>& Entries() {
  static const std::vector<GpuInfo> entries = {
      {"T4", 16, "turing", 320, 65, 70, 10},
      {"V100-16GB", 16, "volta", 900, 125, 300, 40},
      {"V100-32GB", 32, "volta", 900, 125, 300, 40},
      {"RTX 3090", 24, "ampere", 936, 71, 350, 25},
      {"RTX A6000", 48, "ampere", 768, 155, 300, 22},
      {"A10G", 24, "ampere", 600, 70, 300, 20},
      {"A100-40GB", 40, "ampere", 1555, 312, 400, 50},
      {"A100-80GB", 80, "ampere", 2039, 312, 400, 55},
      {"A800", 80, "ampere", 2039, 312, 400, 55},
      {"L4", 24, "ada", 300, 121, 72, 16},
      {"RTX 4090", 24, "ada", 1008, 165, 450, 20},
      {"RTX 4090D", 24, "ada", 1008, 147, 425, 20},
      {"L40S", 48, "ada", 864, 362, 350, 35},
      {"H100", 80, "hopper", 3350, 989, 700, 70},
      {"H100 NVL", 94, "hopper", 3900, 835, 400, 60},
      {"H20", 96, "hopper", 4000, 148, 400, 60},
      {"GH200", 96, "hopper", 4000, 989, 1000, 90},
      {"GH200-144GB", 144, "hopper", 4900, 989, 1000, 90},
      {"H200", 141, "hopper", 4800, 989, 700, 75},
      {"RTX 5090", 32, "blackwell", 1792, 209, 575, 25},
      {"RTX PRO 6000 Blackwell", 96, "blackwell", 1792, 252, 600, 30},
      {"B200", 180, "blackwell", 8000, 2250, 1000, 140},
      // Memory only: no energy curve knows its architecture.
      {"MI300X", 192, "cdna3", 5300, 1307, 750, 120},
  };
  return entries;
}

const std::vector<Ambiguous>& AmbiguousNames() {
  static const std::vector<Ambiguous> names = {
      {"A100", {"A100-40GB", "A100-80GB"}},
      {"V100", {"V100-16GB", "V100-32GB"}},
  };
  return names;
}

const std::vector<Alias>& Aliases() {
  static const std::vector<Alias> aliases = {
      {"A100 80GB", "A100-80GB"},
      {"A100 40GB", "A100-40GB"},
      {"V100 16GB", "V100-16GB"},
      {"V100 32GB", "V100-32GB"},
      // nvidia-smi's "NVIDIA A800-SXM4-80GB" (family and memory).
      {"A800 80GB", "A800"},
      {"3090", "RTX 3090"},
      {"A6000", "RTX A6000"},
      {"H100 80GB", "H100"},
      {"H100 SXM", "H100"},
      {"H100 SXM5", "H100"},
      {"H100 PCIe", "H100"},
      {"GH200 480GB", "GH200"},
      {"GH200 144GB", "GH200-144GB"},
      {"GH200 144G HBM3e", "GH200-144GB"},
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

namespace {

// Every entry's and alias's normalized name, to the entry it names: built
// once, entries first and then aliases in order, so that the first match a
// scan of entries then aliases would find is the one kept.
const std::unordered_map<std::string, const GpuInfo*>& ByNormalizedName() {
  static const auto* const by_name = [] {
    auto* map = new std::unordered_map<std::string, const GpuInfo*>();
    for (const GpuInfo& gpu : Entries()) {
      map->emplace(NormalizeName(gpu.name), &gpu);
    }
    for (const Alias& alias : Aliases()) {
      for (const GpuInfo& gpu : Entries()) {
        if (gpu.name == alias.name) {
          map->emplace(NormalizeName(alias.alias), &gpu);
          break;
        }
      }
    }
    return map;
  }();
  return *by_name;
}

}  // namespace

bool MemoryAgrees(const GpuInfo& card, double memory_gb) {
  return std::abs(memory_gb - card.memory_gb) <=
         kCardMemoryTolerance * card.memory_gb;
}

namespace {

// The entry `name` names exactly (an entry or alias, normalized), or null.
const GpuInfo* FindExact(absl::string_view name) {
  const auto& by_name = ByNormalizedName();
  auto it = by_name.find(NormalizeName(name));
  return it != by_name.end() ? it->second : nullptr;
}

// The vendor words drivers put before the product ("NVIDIA L4", "Tesla
// T4", "NVIDIA GeForce RTX 4090", GFD's "NVIDIA-L4"), stripped, any case.
// Sets `had_vendor` when there was one.
std::string StripVendor(std::string name, bool* had_vendor) {
  *had_vendor = false;
  for (const char* vendor :
       {"NVIDIA ", "NVIDIA-", "Tesla ", "GeForce ", "AMD Instinct ", "AMD "}) {
    if (absl::StartsWithIgnoreCase(name, vendor)) {
      name = name.substr(std::string(vendor).size());
      *had_vendor = true;
    }
  }
  return name;
}

// The card a driver name with its form factor and memory denotes
// ("A100-SXM4-80GB", "V100-PCIE-32GB", "A100 80GB PCIe": the family and
// the memory), or null.
const GpuInfo* FindByFamilyAndMemory(const std::string& name) {
  const std::vector<std::string> words =
      absl::StrSplit(name, absl::ByAnyChar(" -_"), absl::SkipEmpty());
  if (words.size() < 2) return nullptr;
  std::string memory;
  for (const std::string& word : words) {
    const std::string lower = absl::AsciiStrToLower(word);
    if (lower.size() > 2 && absl::EndsWith(lower, "gb") &&
        lower.find_first_not_of("0123456789") == lower.size() - 2) {
      memory = lower.substr(0, lower.size() - 2);
    }
  }
  if (memory.empty()) return nullptr;
  const GpuInfo* gpu = FindExact(absl::StrCat(words[0], "-", memory, "GB"));
  if (gpu == nullptr)
    gpu = FindExact(absl::StrCat(words[0], " ", memory, "GB"));
  return gpu;
}

// Words drivers append after the product that name no other card: the
// edition, the form factor, the memory type ("RTX PRO 6000 Blackwell Server
// Edition", "H100 PCIe", "H100 80GB HBM3").
bool IsEditionWord(absl::string_view word) {
  static const auto* const words = new std::set<std::string>{
      "server", "workstation", "edition", "max-q", "pcie",
      "sxm",    "sxm2",        "sxm4",    "sxm5",  "hbm2",
      "hbm2e",  "hbm3",        "hbm3e",   "lc",    "active"};
  return words->count(absl::AsciiStrToLower(word)) != 0;
}

// The card a driver name denotes: the vendor stripped, then the family and
// memory, then the name's first words ("RTX PRO 6000 Blackwell Server
// Edition"). A name a person typed (`typed`) without a vendor word is cut
// only by edition words (IsEditionWord): the typo "H100 NVLL" must not
// become an H100. Null when none.
const GpuInfo* FindDriverName(std::string name, bool typed) {
  bool had_vendor = false;
  name = StripVendor(std::move(name), &had_vendor);
  if (const GpuInfo* gpu = FindExact(name)) return gpu;
  if (const GpuInfo* gpu = FindByFamilyAndMemory(name)) return gpu;
  const bool any_word = !typed || had_vendor;
  for (size_t space = name.rfind(' '); space != std::string::npos;
       space = name.rfind(' ')) {
    if (!any_word &&
        !IsEditionWord(absl::string_view(name).substr(space + 1))) {
      return nullptr;
    }
    name = name.substr(0, space);
    if (const GpuInfo* gpu = FindExact(name)) return gpu;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<GpuInfo> FindGpu(absl::string_view name) {
  if (const GpuInfo* gpu = FindExact(name)) return *gpu;
  bool had_vendor = false;
  const std::string key =
      NormalizeName(StripVendor(std::string(name.substr(0, 256)), &had_vendor));
  for (const Ambiguous& ambiguous : AmbiguousNames()) {
    if (NormalizeName(ambiguous.alias) == key) {
      return absl::InvalidArgumentError(
          absl::StrCat("GPU '", name.substr(0, 64), "' is ambiguous: say ",
                       absl::StrJoin(ambiguous.names, " or "),
                       " (or give the size in GB, e.g. 40GB)"));
    }
  }
  // The name as nvidia-smi or GFD prints it ("NVIDIA L4",
  // "NVIDIA A100-SXM4-80GB").
  if (const GpuInfo* gpu =
          FindDriverName(std::string(name.substr(0, 256)), /*typed=*/true)) {
    return *gpu;
  }
  std::vector<std::string> names;
  for (const GpuInfo& gpu : Entries()) names.push_back(gpu.name);
  return absl::NotFoundError(absl::StrCat(
      "GPU '", name.substr(0, 64), "' is not in the catalog; closest: ",
      absl::StrJoin(CloseNames(name, names, 3), ", "),
      " (or give a bare size in GB)"));
}

std::string CatalogGpuForDriverName(std::string name) {
  const GpuInfo* gpu = FindDriverName(std::move(name), /*typed=*/false);
  return gpu != nullptr ? gpu->name : "";
}

}  // namespace headroom
