#ifndef HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_
#define HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_

// A probe's batch result as a measured run: what the calibration and the
// answers' evidence read. No gRPC, no store.

#include <cstdint>
#include <optional>
#include <string>

#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/fleet.pb.h"

namespace headroom {

// A multi-GPU run's rank peaks may exceed the card by this factor at most
// before they are taken for wrong numbers.
inline constexpr double kRankPeakSlack = 1.5;

// Why the per-rank peaks of `batch`, a run on `gpus` GPUs of
// `card_memory_gb` each, cannot stand (empty when they can): with more than
// one GPU, one entry per rank, each finite, >= 0 and <= the card x
// kRankPeakSlack, the largest equal to peak_allocated_gb within 1e-6; with
// one GPU none (or the peak itself). The reason names the field.
std::string RankPeaksProblem(const v1::BatchResult& batch, uint32_t gpus,
                             double card_memory_gb);

// `result` as the planner counts it measured: its gpu field replaced by
// `device`, the card the connection registered at hello (MeasuringDevice),
// whatever the worker wrote there. MeasuredRunFor and EnergyRunFor take
// the run's GPU, the card's memory and (with the batch's own flag) whether
// it is simulated from that field: pass them this, never a result as it
// arrived.
v1::ProbeResult AsMeasuredOn(const v1::ProbeResult& result,
                             const v1::GpuDevice& device);

// The measured run of one batch result of `probe`, run by `worker`: its
// model key, source, how it was measured, the setup (setup.gpus, parallel,
// offload ... with it), and the spec when the model is not a catalog
// template. A multi-GPU run keeps its rank peaks (rank_peaks_gb); peaks
// RankPeaksProblem refuses exclude the run, saying why, and none is stored
// as its peak. nullopt for a compiled-mode batch (the memory model predicts
// eager execution) or a card the catalog does not know.
std::optional<v1::MeasuredRun> MeasuredRunFor(const v1::Probe& probe,
                                              const v1::ProbeResult& result,
                                              const std::string& worker);

// The energy run of one window of an energy probe: the catalog GPU and its
// architecture, N from the model as the planner counts it, the
// quantization, the window's figures, the framework versions, simulated or
// not, the worker and `now_unix`. nullopt for a training probe, a result
// without a window (a failure record) or a card the catalog does not know.
std::optional<v1::EnergyRun> EnergyRunFor(const v1::Probe& probe,
                                          const v1::ProbeResult& result,
                                          const std::string& worker,
                                          int64_t now_unix);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_
