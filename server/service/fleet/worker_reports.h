#ifndef HEADROOM_SERVER_SERVICE_FLEET_WORKER_REPORTS_H_
#define HEADROOM_SERVER_SERVICE_FLEET_WORKER_REPORTS_H_

// What a worker may report (issue 19, item 4): the bounds of a hello's
// inventory, the runs a batch result may name, the values it may carry,
// and the key the planner stores it under; whether a hello may register
// beside (or replace) the connection that holds its worker id. Plain
// functions over the API messages; FleetService checks the lease, stores
// and answers.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/fleet.pb.h"
#include "headroom/v1/planner.pb.h"
#include "server/service/metrics.h"
#include "server/service/rate_limit.h"

namespace headroom {

// Inventory bounds of a hello.
inline constexpr int kMaxGpusPerWorker = 64;
inline constexpr int kMaxExecutorsPerWorker = 16;
inline constexpr int kMaxNotesPerWorker = 64;
inline constexpr int kMaxFrameworkVersions = 64;
// Names, versions, uuids, host names: one line of a log, at most.
inline constexpr size_t kMaxHelloStringLength = 256;
inline constexpr size_t kMaxNoteLength = 4096;
// A GPU's memory at most this many GB (0 = not known): several times
// today's largest card.
inline constexpr double kMaxGpuMemoryGb = 1024;
// A node's host memory at most this many GB (0 = not known): several
// times today's largest servers.
inline constexpr double kMaxHostMemoryGb = 65536;
// A GPU's index (as CUDA numbers a node's devices) is under this.
inline constexpr uint32_t kMaxGpuIndex = 1024;
// A measured peak may exceed the card's memory by this factor at most
// (allocator rounding, NVML's binary units): beyond it the number is wrong.
inline constexpr double kPeakSlack = 1.05;

// Ids the fleet takes from outside (worker ids, node names, probe ids):
// 1..kMaxIdLength characters.
inline constexpr size_t kMaxIdLength = 128;
// A result's key, as the worker names it, at most this long.
inline constexpr size_t kMaxResultKeyLength = 256;

// OK when `id` is 1..kMaxIdLength letters, digits, '.', '_', '-' or ':'
// (ids name hosts and pods); INVALID_ARGUMENT naming `field` otherwise.
absl::Status CheckFleetId(const std::string& id, const char* field);

// OK when every part of `hello` is within the bounds above (the worker id
// and node name are checked by the caller): at most kMaxGpusPerWorker GPUs
// with indices under kMaxGpuIndex and distinct uuids, card and host memory
// sane;
// INVALID_ARGUMENT names the field, its value and the bound.
absl::Status CheckHelloInventory(const v1::WorkerHello& hello);

// Why a worker message was refused: the reason (a fixed label) and what
// was wrong, for the worker and the log.
struct Rejection {
  WorkerRejection reason;
  std::string detail;
};

// nullopt when `hello` may register on a stream whose caller proved
// `identity` (empty on a planner running open): its worker id and node
// name are ids (malformed otherwise), its inventory is within bounds
// (inventory_too_large), every card agrees with the catalog
// (CheckHelloCards: implausible_value), and a worker credential
// "cert:<id>" or "token:<id>" says hello as that worker only
// (identity_mismatch).
std::optional<Rejection> CheckHello(const v1::WorkerHello& hello,
                                    const std::string& identity);

// OK when every card of `hello` whose name the catalog knows reports no
// memory (0 = not known) or memory the catalog's agrees with (MemoryAgrees,
// the tolerance the scheduler extender gives a node's memory label);
// INVALID_ARGUMENT naming hello.gpus[i] (its index), the field and the
// catalog's figure otherwise. Cards the catalog does not know pass (no run of
// them is stored under a catalog GPU).
absl::Status CheckHelloCards(const v1::WorkerHello& hello);

// The card of `hello` the planner counts a result of `probe` as measured
// on: the first of the kind the dispatcher gave the probe (AssignmentFor's
// gpu_index: the probe's GPU, or for a pinned probe the worker's most
// numerous kind), with its catalog_gpu filled in. nullptr when the hello
// has none of it. Never what a result says of itself.
const v1::GpuDevice* MeasuringDevice(const v1::Probe& probe,
                                     const v1::WorkerHello& hello);

// nullopt when `result` names itself well enough to be looked up: a key of
// 1..kMaxResultKeyLength characters and a probe id (malformed otherwise).
std::optional<Rejection> CheckResultIds(const v1::ProbeResult& result);

// The memory, GB, of `device` (MeasuringDevice's card, or null) running
// `probe`: what the device reported (as CheckHelloCards holds it, near the
// catalog's); the catalog's memory for the
// device's kind, else the probe's GPU, when it reported none; nullopt when
// neither is known.
std::optional<double> CardMemoryGb(const v1::Probe& probe,
                                   const v1::GpuDevice* device);

// nullopt when `batch` names a run of `probe`'s request (a requested batch
// and repetition with mode "", a planned autotune candidate and its mode at
// repetition 0, or an energy probe's quantization at batch 1; an energy
// window within energy_refit.h's bounds) and carries plausible values: every
// number finite; peaks >= 0 and at most `card_memory_gb` x kPeakSlack (when
// known); not both OOM and an allocator peak; step seconds and energy within
// the value table's bounds (kStepSecondsBound, kMeasuredRunEnergyBound).
// Otherwise unknown_batch or implausible_value, saying which field.
std::optional<Rejection> CheckBatchResult(const v1::Probe& probe,
                                          const v1::BatchResult& batch,
                                          std::optional<double> card_memory_gb);

// nullopt when the runs a batch result becomes may be stored: the training
// run (MeasuredRunFor) as CheckMeasuredRun and the energy run (EnergyRunFor)
// as CheckEnergyRun check a Refit's, from the one table of bounds
// (base/value_bounds.h); implausible_value naming the field otherwise.
std::optional<Rejection> CheckStoredRuns(
    const std::optional<v1::MeasuredRun>& run,
    const std::optional<v1::EnergyRun>& energy, const ModelCatalog& catalog);

// The key a batch result is stored under, derived by the planner (never
// the worker's): "<probe>/<assignment>/<batch>/<repetition>/<mode>".
std::string StoredResultKey(const std::string& probe_id,
                            const std::string& assignment_id,
                            const v1::BatchResult& batch);

// The connection that holds the worker id a hello names: what a second
// connection of the id is weighed against (RefuseHello).
struct HeldConnection {
  // The worker credential it proved; empty on a planner running open.
  std::string identity;
  std::string peer;
  // Since it last sent anything.
  int64_t silent_ms = 0;
};

// Why a hello that CheckHello passed may still not register: the reason
// counted and the status the stream ends with (UNAVAILABLE: only ended,
// the planner is stopping).
struct HelloRefusal {
  WorkerRejection reason;
  absl::Status status;
};

// nullopt when a hello of worker `id` on a stream that proved `identity`
// (empty when open) may register, replacing `held` (the connection that
// holds the id now; nullopt: none): the planner is not `stopping`, the
// stream is not `registered` already, and `held` may give way. When both
// proved who they are, only the same identity replaces (PERMISSION_DENIED
// otherwise); else anyone could claim an id, so a live connection keeps it
// and one silent over 2 x `heartbeat_ms` (a half-open TCP connection)
// gives way (ALREADY_EXISTS). UNAVAILABLE while stopping,
// FAILED_PRECONDITION for a second hello on one stream.
std::optional<HelloRefusal> RefuseHello(
    const std::string& id, const std::string& identity, bool stopping,
    bool registered, const std::optional<HeldConnection>& held,
    int64_t heartbeat_ms);

// Sets each GPU's catalog_gpu in `hello` from its driver name and returns
// them, one entry per GPU ("" for a card the catalog does not know): the
// claim counts GPUs per kind (Store::ClaimProbe).
std::vector<std::string> StampCatalogGpus(v1::WorkerHello* hello);

// The card of each node the workers of `hellos` run on (a hello's
// node_name, else its host name; the first hello of a node counts): the
// first GPU the catalog knows, else the first GPU's memory as a bare size.
// Hellos without GPUs or a node name are left out, and simulated GPUs
// unless `include_simulated` (the extender's --extender_include_simulated).
std::map<std::string, v1::Target> NodeTargets(
    const std::vector<v1::WorkerHello>& hellos, bool include_simulated);

// The message that tells a worker one of its messages was refused: the
// `key` it named (cut to kMaxResultKeyLength), the reason's label and
// what was wrong.
v1::PlannerMessage RejectedMessage(WorkerRejection reason,
                                   const std::string& key,
                                   const std::string& detail);

// The warning lines of refused worker messages: per reason and caller (one
// worker's flood hides no other's rejections), at most `lines_per_second`
// lines each, then a line saying how many were held back. Thread-safe.
class RejectionLog {
 public:
  explicit RejectionLog(int lines_per_second);

  // A message of `worker` (as it named itself), on a stream that proved
  // `identity` from `peer`, was refused for `reason`: the `key` it named
  // and what was wrong (`detail`), cut for the log.
  void Note(WorkerRejection reason, const std::string& worker,
            const std::string& identity, const std::string& peer,
            const std::string& key, const std::string& detail);

 private:
  LogLimiter limiter_;
};

// `text` cut to `max` characters (with "..." when cut), for echoing a
// worker's values into a log line or a reply.
std::string Cut(const std::string& text, size_t max = 200);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_WORKER_REPORTS_H_
