#ifndef HEADROOM_SERVER_SERVICE_FLEET_WORKER_ROSTER_H_
#define HEADROOM_SERVER_SERVICE_FLEET_WORKER_ROSTER_H_

// The workers connected to this planner, by id: each one's Connect stream
// and what the planner keeps of it (its registration: hello, running
// assignment, draining, samples, GPU series). The newest stream of an id
// replaces older ones (RefuseHello says when it may). Thread-safe; the
// FleetService's stream handlers, unary calls, dispatcher and replica sync
// all go through it. Nothing here touches the store.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "headroom/v1/fleet.pb.h"
#include "server/service/fleet/dispatch.h"
#include "server/service/fleet/replica_sync.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/fleet/worker_stream.h"
#include "server/service/metrics.h"

namespace headroom {

class WorkerRoster {
 public:
  // `metrics` must outlive the roster: it counts the connected workers and
  // keeps a series per registered GPU.
  explicit WorkerRoster(PlannerMetrics* metrics);
  WorkerRoster(const WorkerRoster&) = delete;
  WorkerRoster& operator=(const WorkerRoster&) = delete;

  // Registers `stream` as the worker of `hello` (CheckHello passed it, its
  // GPUs stamped: `gpu_kinds` is StampCatalogGpus's) at `now_ms`, unless
  // RefuseHello refuses it given the stream that holds the id now (silent
  // since its last message); that stream is ended (ABORTED) and marked
  // replaced. After Close every hello is refused (UNAVAILABLE).
  std::optional<HelloRefusal> Register(WorkerStream* stream,
                                       const v1::WorkerHello& hello,
                                       std::vector<std::string> gpu_kinds,
                                       int64_t now_ms, int64_t heartbeat_ms);

  // The hello `stream` registered with; nullopt before it registered.
  std::optional<v1::WorkerHello> HelloOf(const WorkerStream* stream);

  // What a heartbeat of a registered stream leaves to do (Heard).
  struct Heard {
    std::string worker;
    // The status to store: its last-seen time was written more than
    // last_seen_write_ms ago.
    std::optional<v1::WorkerStatus> refresh;
  };
  // A heartbeat of `stream` at `now_ms`; `draining` (the worker is
  // stopping) keeps new assignments from it from now on. nullopt when the
  // stream has not registered.
  std::optional<Heard> Heartbeat(WorkerStream* stream, bool draining,
                                 int64_t now_ms, int64_t last_seen_write_ms);

  // Counts the samples of `stream` and sets its GPUs' series to each one's
  // latest reading in `samples` (a series lives 2 x `heartbeat_ms` until a
  // GPU's second batch says its period); false when the stream has not
  // registered (nothing counted).
  bool Samples(WorkerStream* stream, const v1::SampleBatch& samples,
               int64_t heartbeat_ms);

  // The worker of `stream` is done with `assignment_id`: no longer its
  // running assignment (if it was).
  void AssignmentDone(WorkerStream* stream, const std::string& assignment_id);

  // `stream` ended: its GPUs' series go, and it leaves the roster (unless a
  // newer stream of its id took its place). The status to store for it
  // (disconnected at `now_ms`), unless it was replaced or never registered.
  std::optional<v1::WorkerStatus> Remove(WorkerStream* stream, int64_t now_ms);

  // `workers` as stored, made live: one connected here is connected, seen
  // at `now_ms`, with its samples and running probe; one connected
  // elsewhere (another replica) counts only while its last-seen time is
  // under 2 x `last_seen_write_ms` old: a planner that died cannot say
  // goodbye.
  void MarkLive(std::vector<v1::WorkerStatus>* workers, int64_t now_ms,
                int64_t last_seen_write_ms);

  // The registered workers' hellos, by worker id.
  std::vector<v1::WorkerHello> Hellos();
  // Changes whenever a worker registers or leaves (what Hellos returns may
  // then differ); a cache of something made from the hellos is current
  // while this is unchanged.
  uint64_t generation();
  // Every registered worker (NoWorkerFor, LearningWorker).
  std::vector<ConnectedWorker> Connected();
  // Workers with no running assignment that are not draining.
  std::vector<IdleWorker> Idle();
  // Every running assignment of a connected worker.
  std::vector<RunningAssignment> Running();

  // Sends `assignment` of `probe` to `worker` and marks it running, when
  // the worker is connected, idle and not draining; false otherwise.
  bool Assign(const std::string& worker, const v1::Probe& probe,
              const v1::Assignment& assignment);
  // Tells `worker` to stop `assignment` (CancelMessage with `reason`) and
  // marks it idle, when `assignment` is still its running one; false when
  // it finished or was replaced meanwhile.
  bool Withdraw(const std::string& worker, const std::string& assignment,
                const std::string& reason);
  // Tells `worker`, when connected, to stop `assignment` (whatever it
  // runs) and marks it idle: an operator cancelled the probe.
  void Cancel(const std::string& worker, const std::string& assignment,
              const std::string& reason);

  // Ends every stream with `status` and refuses hellos from now on.
  void Close(const grpc::Status& status);

 private:
  WorkerStream::Registration& Of(WorkerStream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream->registration_;
  }
  const WorkerStream::Registration& Of(const WorkerStream* stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream->registration_;
  }

  PlannerMetrics* metrics_;
  mutable absl::Mutex mu_;
  std::map<std::string, WorkerStream*> workers_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_WORKER_ROSTER_H_
