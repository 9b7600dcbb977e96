#ifndef HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_
#define HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_

// A probe's batch result as a measured run: what the calibration and the
// answers' evidence read; and how a worker's result is stored
// (RecordBatchResult, EndAssignment), which the FleetService answers the
// worker by. No gRPC.

#include <cstdint>
#include <optional>
#include <string>

#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/fleet.pb.h"
#include "server/service/fleet/worker_reports.h"
#include "server/store/store.h"

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

// What became of a worker's result (RecordBatchResult, EndAssignment);
// the service tells the worker.
struct ResultOutcome {
  // Refused: the worker is told why (a Rejected naming its key).
  std::optional<Rejection> rejected;
  // Not stored for a store error (logged): not acknowledged, so the worker
  // sends it again.
  bool retry = false;
  // The probe as the store left it, when the result changed it: its
  // watchers hear of it.
  std::optional<v1::Probe> changed;
  // A batch result: a measured run was stored (answers' evidence is
  // stale), and how it counts in headroom_probe_results_total
  // ("duplicate", "oom", "error", "measured"; empty when not counted).
  bool run_stored = false;
  std::string counted;
};

// Stores the batch of `result` (a result of `probe`, from `worker` whose
// hello is `hello`, at `now_unix`) as the probe's result under the
// planner's key (StoredResultKey), with its measured run and energy run,
// counted on the card the connection registered (MeasuringDevice), never
// the result's own. Refused, nothing stored: a batch CheckBatchResult or
// CheckStoredRuns refuses, or an assignment `worker` does not hold
// (not_leased). A duplicate is stored once, though its energy run is added
// again (the first attempt may have failed there).
ResultOutcome RecordBatchResult(Store* store, const ModelCatalog& catalog,
                                const v1::Probe& probe,
                                const v1::ProbeResult& result,
                                const v1::WorkerHello& hello, int64_t now_unix);

// Ends `worker`'s assignment of `probe` that a final or handed-back
// `result` says is over: hands it back (a probe handed back
// `max_handbacks` times fails, and the worker is told handback_limit), or
// finishes it SUCCEEDED, or FAILED with the result's error; an autotune
// probe's record is checked and stored first (AcceptAutotuneRecord; a
// record refused fails the probe). Nothing changes, with no rejection,
// when the assignment ended already with this worker's (a re-sent last
// message); not_leased when the worker does not hold it.
ResultOutcome EndAssignment(Store* store, const v1::Probe& probe,
                            const v1::ProbeResult& result,
                            const v1::WorkerHello& hello,
                            uint32_t max_handbacks);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_
