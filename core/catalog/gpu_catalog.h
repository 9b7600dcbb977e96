#ifndef HEADROOM_CORE_CATALOG_GPU_CATALOG_H_
#define HEADROOM_CORE_CATALOG_GPU_CATALOG_H_

// The one GPU catalog: datasheet memory, architecture, bandwidth, fp16
// throughput and board power of the cards Headroom knows by name.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/value_bounds.h"

namespace headroom {

struct GpuInfo {
  std::string name;  // canonical, e.g. "A100-80GB"
  double memory_gb;  // datasheet memory in GB (10^9 bytes, as marketed)
  std::string arch;  // volta, turing, ampere, ada, hopper, blackwell, cdna3
  double memory_bandwidth_gb_s;
  double fp16_dense_tflops;  // dense (no sparsity) fp16 tensor throughput
  // Board power limit as the datasheet prints it ("max thermal design
  // power"), W, and the typical draw of an idle board (idle P-state, no
  // process), W. NVIDIA publishes no idle figure: idle_w is a typical
  // reading, used by the simulated card and never by a fit.
  double tdp_w;
  double idle_w;
};

// OK when `gb` is a usable bare card size, (0, kMaxCardGb]; otherwise
// INVALID_ARGUMENT naming `field` (e.g. "targets[0].memory_gb").
absl::Status CheckCardGb(double gb, absl::string_view field);

// A card's reported memory agrees with its catalog entry when within this
// fraction of the catalog's: drivers report binary units or keep some back
// (a real L4 reports 23.0 GB of 24), a node label rounds to MiB.
inline constexpr double kCardMemoryTolerance = 0.1;

// Whether `memory_gb`, what a card or a node label reports, agrees with
// `card`'s datasheet memory (within kCardMemoryTolerance).
bool MemoryAgrees(const GpuInfo& card, double memory_gb);

// Every catalog entry, in a stable order.
const std::vector<GpuInfo>& GpuCatalog();

// Looks a GPU up by name, ignoring case, spaces, dashes and underscores, and
// accepting common aliases ("H100 80GB", "RTX PRO 6000", "4090") and the
// names nvidia-smi and GPU Feature Discovery print, with or without the
// vendor ("NVIDIA L4", "nvidia a100-sxm4-80gb", "NVIDIA-L4"; as
// CatalogGpuForDriverName). A name of several cards ("A100", "V100") is
// INVALID_ARGUMENT naming them; NOT_FOUND lists the closest names.
absl::StatusOr<GpuInfo> FindGpu(absl::string_view name);

// The catalog GPU a driver name denotes ("NVIDIA H100 80GB HBM3" -> H100,
// "NVIDIA A100-SXM4-40GB" -> A100-40GB, "Tesla V100-PCIE-32GB" -> V100-32GB,
// "AMD Instinct MI300X" -> MI300X; Kubernetes GPU Feature Discovery's
// "NVIDIA-L4"), or empty when the catalog does not know it.
std::string CatalogGpuForDriverName(std::string name);

}  // namespace headroom

#endif  // HEADROOM_CORE_CATALOG_GPU_CATALOG_H_
