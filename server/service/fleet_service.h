#ifndef HEADROOM_SERVER_SERVICE_FLEET_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_FLEET_SERVICE_H_

// headroom.v1.Fleet: worker daemons connect here, operators submit probes,
// and a dispatcher thread hands queued probes to idle workers and re-queues
// those whose lease ran out. All state that must survive a restart is in
// the store; what lives here (open streams, watchers) is per process.
//
// The parts, in server/service/fleet/: the Connect stream (worker_stream),
// what a worker may send (worker_reports), dispatch and its policy
// (dispatch), and replicas' changes read back (replica_sync). This class
// wires them: the unary handlers, the stream callbacks, the watches.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "server/service/access.h"
#include "server/service/background_worker.h"
#include "server/service/fleet/dispatch.h"
#include "server/service/fleet/probe_watches.h"
#include "server/service/fleet/replica_sync.h"
#include "server/service/fleet/worker_stream.h"
#include "server/service/learner.h"
#include "server/service/metrics.h"
#include "server/service/rate_limit.h"
#include "server/store/store.h"

namespace headroom {

class FleetService final : public v1::Fleet::CallbackService,
                           public Learner,
                           private WorkerStreamHandler,
                           private DispatchTarget,
                           private ReplicaTarget {
 public:
  struct Options {
    // Leases, heartbeats, dispatch and replica-sync periods, hand-backs,
    // stream backlog: the planner's flags.
    DispatchPolicy policy;
    std::string planner_version;
    // The message limit: SubmitProbe requests larger than this get
    // INVALID_ARGUMENT, and list pages stay well under it (PageBytes).
    size_t max_request_bytes = 4 << 20;
    // Who may call what; null allows everything.
    std::shared_ptr<const Access> access;
    // Store jobs that may wait on the executor; more: RESOURCE_EXHAUSTED.
    size_t store_queue = 256;
  };

  // `store`, `metrics` and `executor` must outlive the service. Store work
  // of the RPCs and of the worker streams runs on `executor`, never on a
  // gRPC callback thread.
  FleetService(std::shared_ptr<const ModelCatalog> catalog, Store* store,
               PlannerMetrics* metrics, BackgroundWorker* executor,
               Options options);
  ~FleetService() override;
  FleetService(const FleetService&) = delete;
  FleetService& operator=(const FleetService&) = delete;

  // Stops the dispatcher and ends every open stream (workers reconnect to
  // whichever planner comes next). Call before the server shuts down.
  void Shutdown();

  // Called (on a gRPC thread, so it must not block) after a probe's result
  // is stored as a measured run: answers' evidence is stale.
  void OnRunStored(std::function<void()> callback);

  // The card of each node a connected worker runs on (its hello's
  // node_name, else its host name): the first GPU the catalog knows, else
  // the first GPU's memory as a bare size.
  std::map<std::string, v1::Target> NodeInventory();

  // Learner: probes to learn models answers were prior-only for.
  absl::StatusOr<Worker> WorkerFor(bool include_simulated) override;
  absl::StatusOr<std::optional<std::string>> Outstanding(
      const std::string& key_id) override;
  absl::StatusOr<std::string> QueueLearning(
      const v1::CheckFitRequest& request, const std::vector<uint32_t>& batches,
      const Worker& worker, const std::string& key_id) override;

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::PlannerMessage>* Connect(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* ListWorkers(
      grpc::CallbackServerContext* context,
      const v1::ListWorkersRequest* request,
      v1::ListWorkersResponse* response) override;
  grpc::ServerUnaryReactor* SubmitProbe(
      grpc::CallbackServerContext* context,
      const v1::SubmitProbeRequest* request,
      v1::SubmitProbeResponse* response) override;
  grpc::ServerUnaryReactor* SubmitEnergyProbe(
      grpc::CallbackServerContext* context,
      const v1::SubmitEnergyProbeRequest* request,
      v1::SubmitProbeResponse* response) override;
  grpc::ServerUnaryReactor* SubmitAutotune(
      grpc::CallbackServerContext* context,
      const v1::SubmitAutotuneRequest* request,
      v1::SubmitAutotuneResponse* response) override;
  grpc::ServerWriteReactor<v1::ProbeEvent>* WatchProbe(
      grpc::CallbackServerContext* context,
      const v1::WatchProbeRequest* request) override;
  grpc::ServerUnaryReactor* CancelProbe(
      grpc::CallbackServerContext* context,
      const v1::CancelProbeRequest* request,
      v1::CancelProbeResponse* response) override;
  grpc::ServerUnaryReactor* ListProbes(
      grpc::CallbackServerContext* context,
      const v1::ListProbesRequest* request,
      v1::ListProbesResponse* response) override;

 private:
  class ProbeWatch;

  // WorkerStreamHandler: on the store executor, in each stream's order.
  void OnHello(WorkerStream* stream, const v1::WorkerHello& hello) override;
  void OnHeartbeat(WorkerStream* stream,
                   const v1::Heartbeat& heartbeat) override;
  void OnSamples(WorkerStream* stream, const v1::SampleBatch& samples) override;
  void OnResult(WorkerStream* stream, const v1::ProbeResult& result) override;
  void OnStreamDone(WorkerStream* stream) override;

  // DispatchTarget and ReplicaTarget: snapshots of the streams under mu_,
  // and what the dispatcher and the replica sync send through them.
  std::vector<IdleWorker> IdleWorkers() override;
  std::vector<ConnectedWorker> ConnectedWorkers() override;
  bool Assign(const std::string& worker, const v1::Probe& probe,
              const v1::Assignment& assignment) override;
  void ProbeChanged(const v1::Probe& probe) override { PublishProbe(probe); }
  std::vector<std::string> WatchedProbes() override;
  std::vector<RunningAssignment> RunningAssignments() override;
  void Withdraw(const RunningAssignment& running,
                const std::string& reason) override;

  // Renews the lease of `assignment_id` only when it is `worker`'s running
  // assignment.
  absl::Status RenewOwnLease(const std::string& worker,
                             const std::string& assignment_id);
  // Refuses one message of `worker` (as it named itself): counted, logged
  // (at most kRejectedLinesPerSecond lines per reason and caller, then how
  // many were held back), nothing stored; the worker is told by a Rejected
  // naming `key`, or, with `end`, the stream ends with that code and `detail`.
  void Reject(WorkerStream* stream, const std::string& worker,
              WorkerRejection reason, const std::string& key,
              const std::string& detail, std::optional<grpc::StatusCode> end);

  // Runs `job` on the store executor, which finishes the call;
  // RESOURCE_EXHAUSTED at once when store_queue jobs wait.
  grpc::ServerUnaryReactor* DeferToStore(grpc::ServerUnaryReactor* reactor,
                                         std::function<void()> job);
  // Reads `watch`'s probe on the store executor for SendSnapshot (at once,
  // with RESOURCE_EXHAUSTED, when store_queue jobs wait).
  void ReadSnapshot(ProbeWatch* watch, bool follow);
  // WatchProbe's first event: the probe as stored now; ends the watch
  // unless it follows a probe not yet final; read again when a probe
  // published meanwhile may be newer (SnapshotToSend). On the store
  // executor.
  void SendSnapshot(ProbeWatch* watch, absl::StatusOr<v1::Probe> probe,
                    bool follow);

  absl::StatusOr<v1::Probe> Submit(const v1::SubmitProbeRequest& request);
  // Why no worker connected now can take `probe`; empty when one can.
  std::string NoWorkerFor(const v1::Probe& probe);
  absl::StatusOr<v1::SubmitAutotuneResponse> Autotune(
      const v1::SubmitAutotuneRequest& request);
  // Validates the record of an autotune probe's final result against the
  // probe and the worker's hello, stores it in the autotune cache and
  // returns it as JSON for the probe's details_json.
  absl::StatusOr<std::string> AcceptAutotuneRecord(
      const v1::Probe& probe, const v1::ProbeResult& result,
      const WorkerStream& stream);

  // The dispatcher's thread: a Dispatcher pass every dispatch_ms or when
  // woken, a ReplicaSync poll every store_poll_ms, the probe gauges;
  // Wake() runs a pass soon.
  void DispatchLoop();
  void Wake();

  // Watchers of `probe_id` get the live `samples`.
  void PublishSamples(const v1::SampleBatch& samples);
  // Watchers of `probe` get what is new to each of them in this snapshot
  // (results they have not seen, a change of state or assignment), so the
  // same snapshot published twice, or by two paths, is sent once; a probe
  // in a final state ends them.
  void PublishProbe(const v1::Probe& probe);

  std::shared_ptr<const ModelCatalog> catalog_;
  Store* store_;
  PlannerMetrics* metrics_;
  BackgroundWorker* executor_;
  const Options options_;
  const DispatchPolicy& policy_ = options_.policy;
  Dispatcher dispatch_;
  ReplicaSync replica_sync_;
  // Rejected messages' warning lines, per reason and caller: a flood of bad
  // messages writes a few lines a second, not one each.
  static constexpr int kRejectedLinesPerSecond = 10;
  LogLimiter reject_log_{kRejectedLinesPerSecond};

  absl::Mutex mu_;
  // Connected workers by id (the newest stream of an id replaces older).
  std::map<std::string, WorkerStream*> workers_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, ProbeWatch*> watches_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_run_stored_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;

  // What this service keeps about a stream (its registration), only under
  // mu_: the analysis checks every access through these.
  // What a watcher was sent (ProbeWatch's, only under mu_). Nothing is
  // published to it until its snapshot is (cursor.synced). While its first
  // snapshot is read on the store executor the call may end (done): then
  // SendSnapshot frees it. What is published meanwhile is noted in `read`.
  struct WatchState {
    WatchCursor cursor;
    bool snapshot_pending = false;
    bool done = false;
    SnapshotRead read;
  };
  WatchState& Of(ProbeWatch* watch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkerStream::Registration& Of(WorkerStream* stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream->registration_;
  }
  const WorkerStream::Registration& Of(const WorkerStream* stream) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stream->registration_;
  }
  std::thread dispatcher_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_SERVICE_H_
