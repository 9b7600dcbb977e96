#ifndef HEADROOM_SERVER_SERVICE_FLEET_DISPATCH_H_
#define HEADROOM_SERVER_SERVICE_FLEET_DISPATCH_H_

// The fleet's dispatcher: one pass re-queues probes whose lease ran out,
// fails queued probes past their expiry, and claims queued probes for idle
// connected workers. Which probe a worker gets is the store's claim order
// (Store::ClaimProbe: oldest first, pinned or by GPU kind, an executor the
// worker runs, learning probes only when no other waits); how often, how
// long a lease lasts and how many hand-backs a probe survives is the
// DispatchPolicy. No gRPC here: the service is reached through the
// DispatchTarget seam.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/fleet.pb.h"
#include "server/service/learner.h"
#include "server/store/store.h"

namespace headroom {

// Timed steps a probe runs when its request says 0 (fleet.proto).
inline constexpr uint32_t kDefaultProbeSteps = 3;

// Every tunable of the fleet's dispatch, streams and replica sync, filled
// from the planner's flags (PlannerConfig); the defaults are the planner's.
struct DispatchPolicy {
  // A running probe whose worker sends nothing for this long goes back to
  // the queue (--probe_lease_ms).
  int64_t lease_ms = 30000;
  // How often workers send heartbeats, said in Welcome
  // (--worker_heartbeat_ms).
  int64_t heartbeat_ms = 5000;
  // How often the dispatcher looks at the queue and the leases when
  // nothing wakes it (--dispatch_ms).
  int64_t dispatch_ms = 250;
  // Replicas: how often probes watched here, and probes run by workers
  // connected here, are read back from the store (--store_poll_ms).
  int64_t store_poll_ms = 1000;
  // A probe handed back by workers this many times fails instead of going
  // back to the queue again (--max_handbacks).
  uint32_t max_handbacks = 3;
  // Queued probes failed for their expiry per pass: a burst of expiries is
  // spread over passes instead of stalling one (--expiries_per_pass).
  int expiries_per_pass = 100;
  // How often a connected worker's last-seen time is written to the store;
  // a worker connected to another replica counts as connected while its
  // last-seen time is under 2 x this old (--worker_last_seen_ms).
  int64_t last_seen_write_ms = 30000;
  // Messages of one worker stream read and not yet handled, at most; more:
  // the stream ends with RESOURCE_EXHAUSTED (--worker_max_unhandled).
  size_t max_unhandled_messages = 4096;
  // How often the probes-by-state gauges are read from the store
  // (--probe_counts_ms).
  int64_t probe_counts_ms = 1000;
};

// What the dispatcher sees of one connected worker.
struct IdleWorker {
  std::string worker;
  // The catalog kind of each of its devices, one entry per GPU ("" for a
  // card the catalog does not know: Store::ClaimProbe counts them), and its
  // executors.
  std::vector<std::string> gpu_kinds;
  std::vector<std::string> executors;
  std::vector<v1::GpuDevice> gpus;
};

// What a worker connected here offers, for NoWorkerFor.
struct ConnectedWorker {
  std::string worker;
  std::vector<v1::GpuDevice> gpus;
  std::vector<std::string> executors;
  bool draining = false;
};

// Why none of `workers` can take `probe` (its placement, executor and the
// GPUs of one node it needs: "needs 4 x L4 on one node; the largest node
// has 1"); empty when one can. Draining workers do not count.
std::string NoWorkerFor(const v1::Probe& probe,
                        const std::vector<ConnectedWorker>& workers);

// The GPUs of `gpus` a probe's ranks run on, rank 0 first: the first
// GpusNeeded of its kind (for a pinned probe, the worker's most numerous
// kind). Empty when the worker has none of the kind.
std::vector<uint32_t> AssignedGpuIndices(
    const v1::Probe& probe, const std::vector<v1::GpuDevice>& gpus);

// The assignment that sends `probe` (just claimed) to a worker with `gpus`:
// only the runs not measured yet (a re-queued probe resumes), the request's
// steps and timeout or their defaults (fleet.proto), the lease of `policy`.
// A probe needing N > 1 GPUs (GpusNeeded) gets gpu_indices: the first N of
// its kind (for a pinned probe, the worker's most numerous kind), rank r on
// gpu_indices[r], gpu_index the first.
// An autotune probe's candidates are added by the caller.
v1::Assignment AssignmentFor(const v1::Probe& probe,
                             const std::vector<v1::GpuDevice>& gpus,
                             const DispatchPolicy& policy);

// The service as the dispatcher reaches it. Called from the dispatcher's
// thread; implementations lock what they need.
class DispatchTarget {
 public:
  virtual ~DispatchTarget() = default;
  // Connected workers with no running assignment that are not draining.
  virtual std::vector<IdleWorker> IdleWorkers() = 0;
  // Every connected worker, for the reason an expired probe gives.
  virtual std::vector<ConnectedWorker> ConnectedWorkers() = 0;
  // Sends `assignment` of `probe` to `worker` if it is still connected and
  // idle (and marks it running); false when it is not.
  virtual bool Assign(const std::string& worker, const v1::Probe& probe,
                      const v1::Assignment& assignment) = 0;
  // `probe` changed in the store (claimed, re-queued, finished): watchers
  // hear of it.
  virtual void ProbeChanged(const v1::Probe& probe) = 0;
};

// The reason a worker is told an assignment it still runs was taken from
// it (a heartbeat's or a hello's running assignment the planner no longer
// counts as its).
inline constexpr char kNotRunningHere[] =
    "assignment no longer running here (lease expired or probe ended)";

// The message that tells a worker to stop `assignment_id`, saying why.
v1::PlannerMessage CancelMessage(const std::string& assignment_id,
                                 const std::string& reason);

// Renews the lease of `assignment_id` ("<probe id>.<attempt>") to
// `lease_until_ms` only when it is `worker`'s running assignment: the
// probe says whose it is, so a connection cannot keep another worker's
// lease alive. NOT_FOUND for a malformed id or an unknown probe;
// CheckLeased's FAILED_PRECONDITION when it is not `worker`'s.
absl::Status RenewOwnLease(Store* store, const std::string& worker,
                           const std::string& assignment_id,
                           int64_t lease_until_ms);

// The worker a learning probe goes to (Learner::WorkerFor), among
// `workers` in order: the first card the catalog knows on a worker that
// is not draining and runs the executor that builds it ("torch", or "sim"
// on a simulated card); a real card first, a simulated one only when
// `include_simulated`. FAILED_PRECONDITION says why there is none.
absl::StatusOr<Learner::Worker> LearningWorker(
    const std::vector<ConnectedWorker>& workers, bool include_simulated);

// The probes-by-state gauges' values: every state from QUEUED to
// CANCELLED by name, 0 where `counts` (Store::CountProbes) has none.
std::vector<std::pair<std::string, int64_t>> NamedProbeCounts(
    const std::vector<std::pair<v1::Probe::State, int64_t>>& counts);

class Dispatcher {
 public:
  // `store` and `target` must outlive the dispatcher; `now_ms` is the
  // clock (milliseconds since the epoch).
  Dispatcher(Store* store, DispatchTarget* target, DispatchPolicy policy,
             std::function<int64_t()> now_ms);
  Dispatcher(const Dispatcher&) = delete;
  Dispatcher& operator=(const Dispatcher&) = delete;

  // One pass: re-queues expired leases, fails expired queued probes, and
  // claims a probe for each idle worker (none tried while nothing waits).
  void Once();

  // Fails queued probes past their expiry (expiries_per_pass at most),
  // saying why no connected worker could take them.
  void FailExpired(int64_t now_ms);

  const DispatchPolicy& policy() const { return policy_; }

 private:
  Store* store_;
  DispatchTarget* target_;
  const DispatchPolicy policy_;
  std::function<int64_t()> now_ms_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_DISPATCH_H_
