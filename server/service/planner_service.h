#ifndef HEADROOM_SERVER_SERVICE_PLANNER_SERVICE_H_
#define HEADROOM_SERVER_SERVICE_PLANNER_SERVICE_H_

// headroom.v1.Planner over the callback API. It only translates: requests go
// to the core FitPlanner, absl statuses become gRPC statuses.

#include <atomic>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/core/evidence/evidence.h"
#include "server/core/planner/fit_planner.h"
#include "server/service/access.h"
#include "server/service/background_worker.h"
#include "server/service/learner.h"
#include "server/service/metrics.h"
#include "server/store/store.h"

namespace headroom {

class PlannerService final : public v1::Planner::CallbackService {
 public:
  struct Options {
    // Requests larger than this get INVALID_ARGUMENT (the transport allows
    // twice that, so the caller hears why, not a bare RESOURCE_EXHAUSTED).
    // Also the response limit: list pages and rankings of stored runs stay
    // well under it (PageBytes).
    size_t max_request_bytes = 4 << 20;
    // Coverage of the upper bound for planners built after a refit.
    double coverage = 0.95;
    // Learn by probing for every prior-only answer with a BORDERLINE target,
    // as CheckFitRequest.learn asks for one (--auto_probe=on).
    bool auto_probe = false;
    // Who may call what; null allows everything.
    std::shared_ptr<const Access> access;
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
  };

  // `store` and `metrics` must outlive the service.
  PlannerService(std::shared_ptr<const ModelCatalog> catalog,
                 std::shared_ptr<const FitPlanner> planner, Store* store,
                 PlannerMetrics* metrics, Options options);

  // Replaces the planner answers come from (after a refit or promotion).
  void SetPlanner(std::shared_ptr<const FitPlanner> planner);
  std::shared_ptr<const FitPlanner> planner() const;

  // The measured runs answers are anchored on, as of the last refresh.
  std::shared_ptr<const Evidence> evidence() const;
  // Rebuilds the evidence from every stored run under the current planner's
  // priors.
  absl::Status RefreshEvidence();
  // Queues a RefreshEvidence on the evidence thread (at most one waits):
  // never blocks, so a gRPC thread may call it after storing a run.
  void EvidenceStale();

  // Where learning probes go (the fleet); null: learn answers say no
  // probe can be queued. `learner` must outlive the service.
  void SetLearner(Learner* learner);

  // Drops the learner and waits for the learning and evidence jobs already
  // queued: call before the learner (the fleet) goes away.
  void Quiesce();

  grpc::ServerUnaryReactor* CheckFit(grpc::CallbackServerContext* context,
                                     const v1::CheckFitRequest* request,
                                     v1::CheckFitResponse* response) override;
  grpc::ServerUnaryReactor* GetCalibration(
      grpc::CallbackServerContext* context,
      const v1::GetCalibrationRequest* request,
      v1::GetCalibrationResponse* response) override;
  grpc::ServerUnaryReactor* Ping(grpc::CallbackServerContext* context,
                                 const v1::PingRequest* request,
                                 v1::PingResponse* response) override;
  grpc::ServerUnaryReactor* Refit(grpc::CallbackServerContext* context,
                                  const v1::RefitRequest* request,
                                  v1::RefitResponse* response) override;
  grpc::ServerUnaryReactor* ListFactorSets(
      grpc::CallbackServerContext* context,
      const v1::ListFactorSetsRequest* request,
      v1::ListFactorSetsResponse* response) override;
  grpc::ServerUnaryReactor* PromoteFactorSet(
      grpc::CallbackServerContext* context,
      const v1::PromoteFactorSetRequest* request,
      v1::PromoteFactorSetResponse* response) override;

  grpc::ServerUnaryReactor* RankDensity(
      grpc::CallbackServerContext* context,
      const v1::RankDensityRequest* request,
      v1::RankDensityResponse* response) override;

  grpc::ServerUnaryReactor* SubmitDensityRuns(
      grpc::CallbackServerContext* context,
      const v1::SubmitDensityRunsRequest* request,
      v1::SubmitDensityRunsResponse* response) override;
  grpc::ServerUnaryReactor* EstimateEnergy(
      grpc::CallbackServerContext* context,
      const v1::EstimateEnergyRequest* request,
      v1::EstimateEnergyResponse* response) override;
  grpc::ServerUnaryReactor* RefitEnergy(
      grpc::CallbackServerContext* context,
      const v1::RefitEnergyRequest* request,
      v1::RefitEnergyResponse* response) override;

  grpc::ServerUnaryReactor* ListEnergyCurveSets(
      grpc::CallbackServerContext* context,
      const v1::ListEnergyCurveSetsRequest* request,
      v1::ListEnergyCurveSetsResponse* response) override;
  grpc::ServerUnaryReactor* PromoteEnergyCurveSet(
      grpc::CallbackServerContext* context,
      const v1::PromoteEnergyCurveSetRequest* request,
      v1::PromoteEnergyCurveSetResponse* response) override;

  grpc::ServerUnaryReactor* PutAutotuneRecord(
      grpc::CallbackServerContext* context,
      const v1::PutAutotuneRecordRequest* request,
      v1::PutAutotuneRecordResponse* response) override;
  grpc::ServerUnaryReactor* ListAutotuneRecords(
      grpc::CallbackServerContext* context,
      const v1::ListAutotuneRecordsRequest* request,
      v1::ListAutotuneRecordsResponse* response) override;
  grpc::ServerUnaryReactor* DropAutotuneRecord(
      grpc::CallbackServerContext* context,
      const v1::DropAutotuneRecordRequest* request,
      v1::DropAutotuneRecordResponse* response) override;

  grpc::ServerUnaryReactor* PlanMicrobatch(
      grpc::CallbackServerContext* context,
      const v1::PlanMicrobatchRequest* request,
      v1::PlanMicrobatchResponse* response) override;

  // The calibration page of the current factor set as HTML, with the global
  // factors' predictions of the stored runs plotted against the
  // measurements; simulated runs are listed apart unless
  // `include_simulated` (then they are drawn too).
  std::string CalibrationHtml(bool include_simulated) const;

  // Replaces the energy curves answers come from.
  void SetEnergyCurves(std::shared_ptr<const v1::EnergyCurveSet> curves);

  // Installs the store's current factor set and energy curves when they
  // differ from the ones answers come from: another replica promoted or
  // refitted. Returns whether anything changed; false also when a refit or
  // promotion here is in progress (the next call catches up).
  absl::StatusOr<bool> SyncWithStore();

  // The refit itself, run on the background worker. Stores nothing (runs
  // or factor set) unless `live()` still holds when the fit is done:
  // DEADLINE_EXCEEDED otherwise.
  absl::StatusOr<v1::RefitResponse> RunRefit(const v1::RefitRequest& request,
                                             const std::function<bool()>& live);

 private:
  // Runs `job` on the background worker, which finishes the call; answers
  // RESOURCE_EXHAUSTED at once when too many jobs wait.
  grpc::ServerUnaryReactor* Defer(grpc::ServerUnaryReactor* reactor,
                                  std::function<void()> job);

  // Runs `job` on the import pool, which finishes the call; answers
  // RESOURCE_EXHAUSTED at once when import_queue imports wait.
  grpc::ServerUnaryReactor* DeferImport(grpc::ServerUnaryReactor* reactor,
                                        std::function<void()> job);

  // The planner and the evidence answers come from, read under one lock.
  struct Answering {
    std::shared_ptr<const FitPlanner> planner;
    std::shared_ptr<const Evidence> evidence;
  };
  Answering answering() const;

  // CheckFit's answer and its learning decision; finishes the call.
  void AnswerCheckFit(grpc::ServerUnaryReactor* reactor,
                      const v1::CheckFitRequest* request,
                      v1::CheckFitResponse* response);
  // PlanMicrobatch's answer; finishes the call.
  void AnswerPlanMicrobatch(grpc::ServerUnaryReactor* reactor,
                            const v1::PlanMicrobatchRequest* request,
                            v1::PlanMicrobatchResponse* response);

  // Builds a planner for `set` and makes it the one answers come from.
  void Install(v1::FactorSet set);

  // Queues a learning probe for the request's model when its answer is
  // prior-only with a BORDERLINE target; returns what the answer says
  // about it. Store I/O: call off the gRPC threads.
  std::string Learn(const v1::CheckFitRequest& request,
                    const v1::CheckFitResponse& answer);

  std::shared_ptr<const ModelCatalog> catalog_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const FitPlanner> planner_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const v1::EnergyCurveSet> energy_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Evidence> evidence_ ABSL_GUARDED_BY(mu_);
  // Stored runs the evidence was built from.
  int64_t evidence_runs_ ABSL_GUARDED_BY(mu_) = -1;
  Learner* learner_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> evidence_refresh_queued_{false};
  // One learning decision at a time, so two requests never queue two
  // probes for one key.
  absl::Mutex learn_mu_;
  Store* store_;
  PlannerMetrics* metrics_;
  Options options_;
  // Serializes refits and promotions; declared last so it is destroyed
  // (and joined) first.
  absl::Mutex refit_mu_;
  BackgroundWorker worker_;
  // Evidence rebuilds and learning decisions, apart from refits.
  BackgroundWorker evidence_worker_;
  // Answers that import a model; declared last so it is joined first.
  BackgroundWorker import_pool_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_PLANNER_SERVICE_H_
