#ifndef HEADROOM_CORE_MEMORY_DEVICE_MEMORY_H_
#define HEADROOM_CORE_MEMORY_DEVICE_MEMORY_H_

// What a device holds beyond the allocator's peak (issue 30): PyTorch's
// caching allocator reserves whole segments (block rounding, fragmentation),
// so reserved = allocated x a ratio; the process adds the CUDA context and
// the cuBLAS / cuDNN handles and workspaces, and with several GPUs NCCL's
// communicators. Each is fitted from measured runs that carry the figures
// (MeasuredRun.peak_reserved_gb, device_peak_gb, device_context_gb), per
// measurement source and GPU kind, with a prior over every run for a kind
// without any; nothing is typed in.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/model.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// Runs below this allocator peak leave the reserved ratio unfitted: on a
// tiny peak one 2 MB segment is a large ratio no real job sees.
inline constexpr double kDeviceFitMinGb = 0.5;

// The costs on one card, with where each came from.
struct DeviceCosts {
  double reserved_ratio = 1.0;
  double context_gb = 0;
  double nccl_gb = 0;
  std::string reserved_basis =
      "no run carries a reserved peak: reserved = allocated";
  std::string context_basis = "no run carries device memory: no context added";
  std::string nccl_basis = "one GPU: no communicator";

  double ReservedGb(double allocated_gb) const {
    return allocated_gb * reserved_ratio;
  }
  double DeviceGb(double allocated_gb) const {
    return ReservedGb(allocated_gb) + context_gb + nccl_gb;
  }
  // The allocator peak a figure of `metric` corresponds to (the inverse;
  // UNSTATED reads as DEVICE, the largest). Never below 0.
  double AllocatedFrom(double gb, v1::MemoryMetric metric) const;

  void ToProto(v1::DeviceCosts* out) const;
};

// Fits the ratio (with and without expandable_segments), the context per
// GPU kind and the NCCL cost per parallel strategy from the usable, real
// (not simulated, not published) completed runs that carry the figures:
// each value the median over its group, its held-out error the median
// |error| of the figure it predicts with the run's own template left out.
// Groups are (source, gpu), then ("*", gpu) and ("*", "*") as priors.
std::vector<v1::DeviceCostFit> FitDeviceCosts(
    const std::vector<v1::MeasuredRun>& runs);

// The costs an answer on `gpu` (a catalog name, or "" for a bare size)
// uses: the most specific fit of `source` ("torch-harness", ...), then any
// source on that GPU, then the prior; NCCL by the setup's strategy when it
// runs on several GPUs.
DeviceCosts DeviceCostsFor(
    const google::protobuf::RepeatedPtrField<v1::DeviceCostFit>& fits,
    absl::string_view source, absl::string_view gpu,
    const v1::TrainingSetup& setup);

// A model's own runs correct the ratio and context on their GPU (the
// anchor): the median of their reserved / allocated over runs of at least
// kDeviceFitMinGb, and of device - reserved; unchanged where none carries
// the figure.
void AnchorDeviceCosts(const std::vector<const v1::MeasuredRun*>& runs,
                       absl::string_view gpu, DeviceCosts* costs);

// The metric's name as published rows spell it ("allocated", ...), and
// back (nullopt for any other word).
const char* MetricName(v1::MemoryMetric metric);
std::optional<v1::MemoryMetric> MetricFromName(absl::string_view name);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_DEVICE_MEMORY_H_
