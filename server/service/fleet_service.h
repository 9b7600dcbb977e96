#ifndef HEADROOM_SERVER_SERVICE_FLEET_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_FLEET_SERVICE_H_

// headroom.v1.Fleet: worker daemons connect here, operators submit probes,
// and a dispatcher thread hands queued probes to idle workers and re-queues
// those whose lease ran out. All state that must survive a restart is in
// the store; what lives here (open streams, watchers) is per process.
//
// The parts, in server/service/fleet/: the Connect stream (worker_stream),
// the connected workers (worker_roster), what a worker may send
// (worker_reports), how its results are stored (measured_runs), dispatch
// and its policy (dispatch), the WatchProbe calls (watch_calls), and
// replicas' changes read back (replica_sync). This class wires them: the
// unary handlers, the stream callbacks, the dispatcher's thread.

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
#include "server/service/fleet/measured_runs.h"
#include "server/service/fleet/replica_sync.h"
#include "server/service/fleet/watch_calls.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/fleet/worker_roster.h"
#include "server/service/fleet/worker_stream.h"
#include "server/service/learner.h"
#include "server/service/metrics.h"
#include "server/service/rate_limit.h"
#include "server/service/service_options.h"
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
  };

  // `store`, `metrics` and `executor` must outlive the service. Store work
  // of the RPCs and of the worker streams runs on `executor`, never on a
  // gRPC callback thread. `service` is the request limit (SubmitProbe
  // requests larger get INVALID_ARGUMENT, list pages stay well under it),
  // the access rules and the store queue every service shares.
  FleetService(std::shared_ptr<const ModelCatalog> catalog, Store* store,
               PlannerMetrics* metrics, BackgroundWorker* executor,
               ServiceOptions service, Options options);
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
  // the first GPU's memory as a bare size. Made once per change of the
  // roster and shared (the scheduler extender reads it on every call that
  // names nodes only: at 5,000 workers copying the hellos and naming their
  // cards took longer than the decision).
  std::shared_ptr<const std::map<std::string, v1::Target>> NodeInventory(
      bool include_simulated);

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
  // WorkerStreamHandler: on the store executor, in each stream's order.
  void OnHello(WorkerStream* stream, const v1::WorkerHello& hello) override;
  void OnHeartbeat(WorkerStream* stream,
                   const v1::Heartbeat& heartbeat) override;
  void OnSamples(WorkerStream* stream, const v1::SampleBatch& samples) override;
  void OnResult(WorkerStream* stream, const v1::ProbeResult& result) override;
  void OnStreamDone(WorkerStream* stream) override;

  // DispatchTarget and ReplicaTarget: the roster's snapshots, and what the
  // dispatcher and the replica sync send through it.
  std::vector<IdleWorker> IdleWorkers() override { return roster_.Idle(); }
  std::vector<ConnectedWorker> ConnectedWorkers() override {
    return roster_.Connected();
  }
  bool Assign(const std::string& worker, const v1::Probe& probe,
              const v1::Assignment& assignment) override {
    return roster_.Assign(worker, probe, assignment);
  }
  void ProbeChanged(const v1::Probe& probe) override {
    watchers_.PublishProbe(probe);
  }
  std::vector<std::string> WatchedProbes() override {
    return watchers_.Watched();
  }
  std::vector<RunningAssignment> RunningAssignments() override {
    return roster_.Running();
  }
  void Withdraw(const RunningAssignment& running,
                const std::string& reason) override;

  // Renews `assignment_id`'s lease for `worker` (RenewOwnLease); when it is
  // not the worker's, tells `stream` to stop it.
  void KeepOrCancel(WorkerStream* stream, const std::string& worker,
                    const std::string& assignment_id);
  // Refuses one message of `worker` (as it named itself): counted, logged
  // (at most kRejectedLinesPerSecond lines per reason and caller, then how
  // many were held back), nothing stored; the worker is told by a Rejected
  // naming `key`, or, with `end`, the stream ends with that code and `detail`.
  void Reject(WorkerStream* stream, const std::string& worker,
              WorkerRejection reason, const std::string& key,
              const std::string& detail, std::optional<grpc::StatusCode> end);
  // Tells the worker of a result `outcome` refuses (RecordBatchResult,
  // EndAssignment); true when the result was taken: neither refused nor
  // left for the worker to send again.
  bool Taken(WorkerStream* stream, const std::string& worker,
             const v1::ProbeResult& result, const ResultOutcome& outcome);

  // A unary call of `method`: the access check, for a probe request (not
  // null) CheckProbeRequestBytes before it waits for the store, then
  // `answer` on the store executor, which finishes the call
  // (RESOURCE_EXHAUSTED at once when store_queue jobs wait).
  template <typename Response>
  grpc::ServerUnaryReactor* Serve(
      grpc::CallbackServerContext* context, const char* method,
      const google::protobuf::Message* probe_request, Response* response,
      std::function<absl::StatusOr<Response>()> answer);

  absl::StatusOr<v1::Probe> Submit(const v1::SubmitProbeRequest& request);
  // Submit, with a warning when no worker connected now can take the probe
  // (NoWorkerFor): it stays queued until one connects.
  absl::StatusOr<v1::SubmitProbeResponse> SubmitWarned(
      const v1::SubmitProbeRequest& request);

  // The dispatcher's thread: a Dispatcher pass every dispatch_ms or when
  // woken, a ReplicaSync poll every store_poll_ms, the probe gauges;
  // Wake() runs a pass soon.
  void DispatchLoop();
  void Wake();

  std::shared_ptr<const ModelCatalog> catalog_;
  Store* store_;
  PlannerMetrics* metrics_;
  BackgroundWorker* executor_;
  const ServiceOptions service_;
  const Options options_;
  const DispatchPolicy& policy_ = options_.policy;
  WorkerRoster roster_;
  ProbeWatchers watchers_;
  Dispatcher dispatch_;
  ReplicaSync replica_sync_;
  // Rejected messages' warning lines, per reason and caller: a flood of bad
  // messages writes a few lines a second, not one each.
  static constexpr int kRejectedLinesPerSecond = 10;
  RejectionLog reject_log_{kRejectedLinesPerSecond};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void()> on_run_stored_ ABSL_GUARDED_BY(mu_);
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  std::thread dispatcher_;
  // NodeInventory's, with and without simulated cards, and the roster
  // generation each was made at.
  struct Inventory {
    uint64_t generation = 0;
    std::shared_ptr<const std::map<std::string, v1::Target>> nodes;
  };
  absl::Mutex inventory_mu_;
  Inventory inventory_[2] ABSL_GUARDED_BY(inventory_mu_);
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_SERVICE_H_
