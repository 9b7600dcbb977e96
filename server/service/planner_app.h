#ifndef HEADROOM_SERVER_SERVICE_PLANNER_APP_H_
#define HEADROOM_SERVER_SERVICE_PLANNER_APP_H_

// The whole planner process minus main(): catalog, store, first fit, gRPC
// server (the domain services, health, reflection), HTTP metrics. Tests start
// it on port 0 exactly as the binary does.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "core/catalog/model_catalog.h"
#include "grpcpp/server.h"
#include "server/service/background_worker.h"
#include "server/service/calibration_service.h"
#include "server/service/configmap_reader.h"
#include "server/service/density_service.h"
#include "server/service/energy_service.h"
#include "server/service/fit_service.h"
#include "server/service/fleet_service.h"
#include "server/service/http_server.h"
#include "server/service/metrics.h"
#include "server/service/microbatch_service.h"
#include "server/service/planner_state.h"
#include "server/service/scheduler_extender.h"
#include "server/store/store.h"

namespace headroom {

struct PlannerConfig {
  // gRPC address; port 0 picks a free port.
  std::string listen = "127.0.0.1:50051";
  // HTTP address for /metrics and /healthz; empty disables it.
  std::string http_listen = "127.0.0.1:9464";
  // The store: a SQLite file (":memory:" for a throwaway one) or a
  // postgresql:// URL (libpq key=value strings too) shared by replicas.
  std::string db_path = "headroom.db";
  // Connections the store keeps: PostgreSQL's pool, SQLite's readers.
  int db_pool = 4;
  // An existing 0-byte SQLite file becomes a new store (refused without).
  bool db_init = false;
  // Model catalog directory and the calibration runs fitted on first start.
  std::string models_dir = "models";
  // One runs file or several, comma-separated.
  std::string runs_path = "data/memory-runs.jsonl";
  // Energy curves stored on first start (energy-curves.json format).
  std::string energy_curves_path = "data/energy-curves.json";
  // Coverage of the calibrated upper bound used for verdicts: 0.9 or 0.95.
  double coverage = 0.95;
  // Queue a learning probe for every prior-only answer with a BORDERLINE
  // target (CheckFitRequest.learn does it for one request).
  bool auto_probe = false;
  // Its limits: learning probes one caller's reads, and all reads, may
  // queue per minute (PlannerState::Options). 1..10000.
  int auto_probe_per_caller = 6;
  int auto_probe_total = 30;
  // The Kubernetes scheduler extender (POST /scheduler/filter and
  // /scheduler/prioritize) is served on the HTTP port, and also here when
  // set (a second port for kube-scheduler only).
  std::string extender_listen;
  // Longest an extender call may take before its nodes pass through.
  int64_t extender_budget_ms = 50;
  // Where the extender reads headroom.dev/job ConfigMaps: empty (it reads
  // none), "in-cluster" (the Pod's ServiceAccount), or an API URL.
  std::string extender_kube_api;
  SchedulerExtender::Options extender;
  // A probe whose worker is silent this long goes back to the queue.
  int64_t probe_lease_ms = 30000;
  // Heartbeat period asked of workers.
  int64_t worker_heartbeat_ms = 5000;
  // Replicas over one store: how often this planner looks for a factor set
  // or energy curves made current by another replica, and for probe changes
  // (results, cancels, re-queues) made through another replica. 10..60000.
  int64_t store_poll_ms = 1000;
  // The fleet's dispatch policy beyond the three above (DispatchPolicy,
  // server/service/fleet/dispatch.h): how often the dispatcher looks at
  // the queue unwoken; hand-backs a probe survives; queued probes expired
  // per pass; how often a connected worker's last-seen time is stored; a
  // worker stream's messages waiting to be handled, at most.
  int64_t dispatch_ms = 250;
  int max_handbacks = 3;
  int expiries_per_pass = 100;
  int64_t worker_last_seen_ms = 30000;
  int worker_max_unhandled = 4096;
  // How often the headroom_probes{state} gauges are read from the store.
  int64_t probe_counts_ms = 1000;
  // Answers that import a model run on import_threads threads of their
  // own, import_queue waiting at most, holding import_queue_bytes of
  // requests at most (PlannerState::Options).
  int import_threads = 2;
  int import_queue = 64;
  size_t import_queue_bytes = size_t{64} << 20;
  // Store reads and writes of the RPCs and worker streams run on
  // store_threads threads, store_queue jobs waiting at most (more:
  // RESOURCE_EXHAUSTED).
  int store_threads = 4;
  int store_queue = 256;
  // Largest request message accepted, in bytes.
  int max_message_bytes = 4 << 20;
  // Memory gRPC may hold for this server's connections (a resource quota).
  // gRPC checks a message against the size limit only once all of it has
  // arrived; past this budget it resets the stream instead (the client sees
  // RESOURCE_EXHAUSTED), so a 2 GB message costs the server this much at
  // most. At least 4 x max_message_bytes.
  int64_t grpc_memory_bytes = int64_t{512} << 20;

  // TLS for gRPC and the HTTP ports: the planner's certificate (chain) and
  // key, PEM files, both or neither.
  std::string tls_cert;
  std::string tls_key;
  // With TLS: gRPC callers must present a certificate signed by this CA
  // (PEM); a worker's identity is then its certificate's subject CN.
  std::string tls_client_ca;
  // Bearer tokens and their roles (Access, access.h); empty: none.
  std::string tokens_file;
  bool require_token_for_reads = false;
  // /metrics answers anyone, as /healthz does; otherwise (the default) it
  // needs what reads need: open where reads are open, a token where
  // require_token_for_reads, a client certificate with tls_client_ca.
  bool metrics_open = false;
  // Without TLS the planner listens on loopback addresses only, unless
  // this is set (logged as a warning at start).
  bool allow_insecure = false;
  // Tests only: PlannerState::Options::before_import.
  std::function<void()> before_import;
  // Tests only: PlannerState::Options::before_refit_commit.
  std::function<void(const std::function<bool()>& live)> before_refit_commit;
  // Tests only: learning probes go here instead of the fleet (must outlive
  // the app).
  Learner* learner = nullptr;
  // Tests only: the clock --auto_probe's limits count by (null: steady).
  std::function<int64_t()> learn_clock_ms;
};

class PlannerApp {
 public:
  // Loads everything, fits and stores a factor set if the store has none,
  // and starts serving. Errors name what was missing or wrong.
  static absl::StatusOr<std::unique_ptr<PlannerApp>> Start(
      const PlannerConfig& config);

  ~PlannerApp();
  PlannerApp(const PlannerApp&) = delete;
  PlannerApp& operator=(const PlannerApp&) = delete;

  // Stops accepting calls, lets in-flight calls finish (up to the deadline),
  // and stops the HTTP server. Safe to call more than once.
  void Shutdown(std::chrono::milliseconds grace);
  // Blocks until the gRPC server has shut down.
  void Wait();

  int grpc_port() const { return grpc_port_; }
  // The state the services share: for benches and tests that write the
  // store directly and then say so, as the fleet does after storing a run
  // (state()->EvidenceStale()).
  PlannerState* state() const { return state_.get(); }
  int http_port() const { return http_ ? http_->port() : 0; }
  int extender_port() const {
    return extender_http_ ? extender_http_->port() : 0;
  }
  const std::string& factor_set_version() const { return version_; }

 private:
  PlannerApp() = default;

  // Before server_: the audit interceptor points at it.
  std::shared_ptr<const Access> access_;
  std::unique_ptr<Store> store_;
  std::shared_ptr<const ModelCatalog> catalog_;
  std::unique_ptr<PlannerMetrics> metrics_;
  // One service per domain, around the state they share; the state is
  // declared after them so its threads (whose jobs call into the services)
  // are joined first.
  std::unique_ptr<FitService> fit_;
  std::unique_ptr<CalibrationService> calibration_;
  std::unique_ptr<EnergyService> energy_;
  std::unique_ptr<DensityService> density_;
  std::unique_ptr<MicrobatchService> microbatch_;
  std::unique_ptr<PlannerState> state_;
  std::unique_ptr<FleetService> fleet_;
  // Runs the services' store work. After them and before the server: it
  // is joined (running what still waits, such as a closed worker stream's
  // last messages) once the server has stopped and before the services go.
  std::unique_ptr<BackgroundWorker> store_executor_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<ConfigMapReader> configmaps_;
  std::unique_ptr<SchedulerExtender> extender_;
  std::unique_ptr<HttpServer> extender_http_;
  // Follows the store's current factor set (SyncWithStore) until stopped.
  std::thread sync_;
  absl::Notification stop_sync_;
  int grpc_port_ = 0;
  std::string version_;
  std::atomic<bool> serving_{false};
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_PLANNER_APP_H_
