#ifndef HEADROOM_SERVER_SERVICE_PLANNER_STATE_H_
#define HEADROOM_SERVER_SERVICE_PLANNER_STATE_H_

// What the domain services (Fit, Calibration, Energy, Density, Microbatch)
// share: the planner and energy curves answers come from, the evidence
// answers are anchored on, the store, and the threads that keep long or
// blocking work off the gRPC callback threads. It holds no gRPC service
// itself; each domain's service is a small class around it.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/evidence/evidence.h"
#include "core/planner/fit_planner.h"
#include "grpcpp/support/server_callback.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/planner.pb.h"
#include "server/service/access.h"
#include "server/service/background_worker.h"
#include "server/service/learner.h"
#include "server/service/metrics.h"
#include "server/service/rate_limit.h"
#include "server/service/service_options.h"
#include "server/store/store.h"

namespace headroom {

// Whether probing would help `answer`: it rests on the prior alone and
// leaves some target undecided. Otherwise `why` says why not.
bool NeedsLearning(const v1::CheckFitResponse& answer, std::string* why);

// Whether a CheckFit call may queue a learning probe (reads do not spend
// GPU time unless the planner says so): an operator's learn may; with
// --auto_probe every read may, within its rate limits.
struct LearnGrant {
  bool wanted = false;        // learn asked, or --auto_probe
  bool allowed = false;       // a probe may be queued
  bool rate_limited = false;  // by --auto_probe's limits, per caller
  std::string caller;         // Caller::Name(), for the limits and audit
  std::string peer;
  std::string refused;  // when wanted and not allowed: why, for `learning`
};

class PlannerState {
 public:
  struct Options {
    // Coverage of the upper bound for planners built after a refit.
    double coverage = 0.95;
    // Learn by probing for every prior-only answer with a BORDERLINE target,
    // as CheckFitRequest.learn asks for one (--auto_probe=on).
    bool auto_probe = false;
    // --auto_probe's limits: learning probes the reads of one caller
    // (Caller::Name) may queue, and those of all callers together, per
    // minute (--auto_probe_per_caller, --auto_probe_total). An operator's
    // CheckFitRequest.learn is not counted.
    int auto_probe_per_caller = 6;
    int auto_probe_total = 30;
    // Tests only: the clock those limits count by; null: steady clock.
    NowMsFn now_ms;
    // Tests only: runs on the refit worker when a refit is ready to commit,
    // just before the call's liveness is checked; `live` says whether the
    // call still is (not cancelled, deadline not passed).
    std::function<void(const std::function<bool()>& live)> before_refit_commit;
    // Answers that import a model (HF config, ONNX graph, inline spec) run
    // on this many threads of their own, at most import_queue waiting
    // (more: RESOURCE_EXHAUSTED), so catalog answers keep their latency
    // while imports queue (--import_threads, --import_queue).
    int import_threads = 2;
    size_t import_queue = 64;
    // Bytes of requests (as sent) that may wait for or run on the import
    // pool at once; past it RESOURCE_EXHAUSTED, as past import_queue. One
    // import is always admitted when none is in the pool. A parsed inline
    // spec of named layers holds over 10x its bytes, so the count alone let
    // 66 specs of 4 MB wait at once: 80 of them took the planner from 32 MB
    // to 2.3 GB; with 64 MiB, 16 wait and it peaks at 0.96 GB
    // (bench/memory_burst.cc, bench/README.md).
    size_t import_queue_bytes = size_t{64} << 20;
    // Tests only: runs on the import pool before each import.
    std::function<void()> before_import;
    // The least time between two evidence rebuilds not asked for by a new
    // planner (UpdateEvidence); stored runs reach answers at once anyway.
    int64_t evidence_rebuild_min_ms = 2000;
    // How often an update counts the stored runs to find any its listing
    // missed (UpdateEvidence); a count is linear in the store.
    int64_t evidence_count_ms = 30000;
  };

  // `store`, `metrics` and `executor` must outlive the state. Handlers'
  // store I/O runs on `executor` (DeferStore), never on a gRPC thread.
  // `service` is what the FleetService is given too (PlannerApp).
  PlannerState(std::shared_ptr<const ModelCatalog> catalog,
               std::shared_ptr<const FitPlanner> planner, Store* store,
               PlannerMetrics* metrics, BackgroundWorker* executor,
               ServiceOptions service, Options options);
  // Stops queueing evidence work, then joins the threads (the jobs queued
  // still run).
  ~PlannerState();
  PlannerState(const PlannerState&) = delete;
  PlannerState& operator=(const PlannerState&) = delete;

  const Options& options() const { return options_; }
  // The request limit, access rules and store queue of every service.
  const ServiceOptions& service() const { return service_; }
  const Access* access() const { return service_.access.get(); }
  const std::shared_ptr<const ModelCatalog>& catalog() const {
    return catalog_;
  }
  Store* store() const { return store_; }
  PlannerMetrics* metrics() const { return metrics_; }

  // Replaces the planner answers come from (after a refit or promotion).
  void SetPlanner(std::shared_ptr<const FitPlanner> planner);
  std::shared_ptr<const FitPlanner> planner() const;

  // Replaces the energy curves answers come from; energy() is null until
  // some are set.
  void SetEnergyCurves(std::shared_ptr<const v1::EnergyCurveSet> curves);
  std::shared_ptr<const v1::EnergyCurveSet> energy() const;

  // The measured runs answers are anchored on, as of the last refresh.
  std::shared_ptr<const Evidence> evidence() const;
  // The planner and the evidence answers come from, read under one lock.
  struct Answering {
    std::shared_ptr<const FitPlanner> planner;
    std::shared_ptr<const Evidence> evidence;
  };
  Answering answering() const;
  // Rebuilds the evidence from every stored run under the current planner's
  // priors: groups, corrections, GPU constants and the calibration of
  // anchored answers. Then queues an update for runs stored meanwhile.
  absl::Status RefreshEvidence();
  // Brings the evidence up to the store: the runs stored since it last
  // read are added to their keys' groups (Evidence::WithRuns: the cost of
  // those groups, not of the store), so an answer reflects a stored run
  // as soon as this returns. Queues a rebuild (RefreshEvidence, on the
  // niced evidence thread) when a new planner's priors need it at once;
  // and, spaced evidence_rebuild_min_ms and four times the last rebuild
  // apart (at most a fifth of that thread however large the store), when
  // an added run can move the GPU constants or the store holds runs the
  // listing missed (counted at most every evidence_count_ms).
  absl::Status UpdateEvidence();
  // Queues an UpdateEvidence on the update thread (at most one waits):
  // never blocks, so a gRPC thread may call it after storing a run. The
  // update thread runs at normal priority, apart from rebuilds, so a
  // stored run reaches answers while the CPU is busy and while a rebuild
  // of a large store runs.
  void EvidenceStale();
  // Returns once every update queued before it has run.
  void WaitForEvidence();
  // Evidence rebuilds installed since start (the first included).
  int64_t evidence_rebuilds() const { return evidence_rebuilds_; }

  // Builds a planner for `set` and makes it the one answers come from.
  void Install(v1::FactorSet set);

  // Installs the store's current factor set and energy curves when they
  // differ from the ones answers come from: another replica promoted or
  // refitted. Returns whether anything changed; false also when a refit or
  // promotion here is in progress (the next call catches up).
  absl::StatusOr<bool> SyncWithStore();

  // Serializes refits and promotions (factor sets and energy curves), so
  // that SyncWithStore never reinstalls what one of them just replaced.
  absl::Mutex* refit_mu() ABSL_LOCK_RETURNED(refit_mu_) { return &refit_mu_; }

  // Where learning probes go (the fleet); null: learn answers say no
  // probe can be queued. `learner` must outlive the state.
  void SetLearner(Learner* learner);

  // Whether `caller` (null: a service built without access rules, which
  // treats everyone as admin) may queue a learning probe with `request`.
  LearnGrant GrantLearning(const Caller* caller,
                           const v1::CheckFitRequest& request) const;

  // Queues a learning probe for the request's model when its answer is
  // prior-only with a BORDERLINE target and `grant` allows it (counting
  // against --auto_probe's limits when it says so); returns what the
  // answer says about it. A queued probe is audited (event=audit, with the
  // caller). Store I/O: call off the gRPC threads.
  std::string Learn(const v1::CheckFitRequest& request,
                    const v1::CheckFitResponse& answer,
                    const LearnGrant& grant);

  // Drops the learner and waits for the learning and evidence jobs already
  // queued: call before the learner (the fleet) goes away.
  void Quiesce();

  // Runs `job` on the refit worker, which finishes the call; answers
  // RESOURCE_EXHAUSTED at once when too many jobs wait.
  grpc::ServerUnaryReactor* DeferRefit(grpc::ServerUnaryReactor* reactor,
                                       std::function<void()> job);

  // Runs `job` on the store executor, which finishes the call; answers
  // RESOURCE_EXHAUSTED at once when store_queue jobs wait.
  grpc::ServerUnaryReactor* DeferStore(grpc::ServerUnaryReactor* reactor,
                                       std::function<void()> job);

  // Runs `job` on the import pool, which finishes the call; answers
  // RESOURCE_EXHAUSTED at once when import_queue imports wait, or when the
  // imports in the pool and `request_bytes` (the request's size) would
  // pass import_queue_bytes.
  grpc::ServerUnaryReactor* DeferImport(grpc::ServerUnaryReactor* reactor,
                                        std::function<void()> job,
                                        size_t request_bytes);

  // Returns freed heap memory to the system (glibc malloc_trim) once the
  // import pool has been idle for two calls in a row after an import: a
  // burst of large requests leaves the heap of every gRPC thread's malloc
  // arena grown, and glibc keeps it. The second call, not the first, so
  // the calls the imports finished have been destroyed and their requests
  // freed. Call periodically from one thread (the planner's store sync
  // does, every --store_poll_ms); returns whether it trimmed.
  bool ReturnImportMemory();

  // Queues `job` on the evidence thread (learning decisions); false when
  // too many wait.
  bool PostLearning(std::function<void()> job);

 private:
  absl::StatusOr<bool> SyncWithStoreLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(refit_mu_);
  // Queues a RefreshEvidence on the evidence thread (at most one waits).
  void QueueRebuild();

  std::shared_ptr<const ModelCatalog> catalog_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const FitPlanner> planner_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::EnergyCurveSet> energy_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Evidence> evidence_ ABSL_GUARDED_BY(mu_);
  // Stored runs the evidence holds, the store's key of the last one read,
  // and the planner whose priors its shapes were taken under.
  int64_t evidence_runs_ ABSL_GUARDED_BY(mu_) = -1;
  std::string evidence_after_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const FitPlanner> evidence_planner_ ABSL_GUARDED_BY(mu_);
  // A rebuild is wanted (UpdateEvidence), and not before this time.
  bool evidence_rebuild_wanted_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point evidence_rebuild_after_
      ABSL_GUARDED_BY(mu_);
  // The next update that counts the stored runs, not before this time.
  std::chrono::steady_clock::time_point evidence_count_after_
      ABSL_GUARDED_BY(mu_);
  Learner* learner_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> evidence_refresh_queued_{false};
  // One learning decision at a time, so two requests never queue two
  // probes for one key.
  absl::Mutex learn_mu_;
  // --auto_probe's limits (thread-safe of its own).
  CallerRateLimit learn_limit_;
  Store* store_;
  PlannerMetrics* metrics_;
  BackgroundWorker* executor_;
  const ServiceOptions service_;
  Options options_;
  absl::Mutex refit_mu_;
  // Refits; declared after what its jobs use so it is joined first. Like
  // the evidence worker and the import pool it runs niced (and SCHED_IDLE),
  // so a fit of every stored run yields the CPU to catalog answers at once
  // (bench/store_isolation.cc: their p99 under refits and stored results
  // went from 32-101x to about 4x of the idle planner's).
  BackgroundWorker worker_;
  // Evidence rebuilds and learning decisions, apart from refits.
  BackgroundWorker evidence_worker_;
  std::atomic<bool> evidence_rebuild_queued_{false};
  std::atomic<int64_t> evidence_rebuilds_{0};
  // Set by the destructor: no more evidence jobs are queued.
  std::atomic<bool> evidence_stopping_{false};
  // Evidence updates by the stored run (UpdateEvidence), at normal
  // priority.
  BackgroundWorker update_worker_;
  // What the import pool holds (DeferImport), and the ReturnImportMemory
  // calls left before it trims.
  absl::Mutex import_mu_;
  size_t import_bytes_ ABSL_GUARDED_BY(import_mu_) = 0;
  size_t imports_ ABSL_GUARDED_BY(import_mu_) = 0;
  int trim_in_calls_ ABSL_GUARDED_BY(import_mu_) = 0;
  // Answers that import a model; declared last so it is joined first.
  BackgroundWorker import_pool_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_PLANNER_STATE_H_
