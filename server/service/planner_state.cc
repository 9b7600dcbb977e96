#include "server/service/planner_state.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "base/status_macros.h"
#include "server/service/store_executor.h"
#include "spdlog/spdlog.h"

namespace headroom {

bool NeedsLearning(const v1::CheckFitResponse& answer, std::string* why) {
  if (answer.estimates_size() > 0 &&
      answer.estimates(0).basis().kind() == v1::Basis::ANCHORED) {
    *why = "nothing to learn: the answer is anchored on measured runs";
    return false;
  }
  for (const v1::TargetResult& target : answer.targets()) {
    for (int verdict : target.verdicts()) {
      if (verdict == v1::BORDERLINE) return true;
    }
  }
  *why = "nothing to learn: no target is BORDERLINE";
  return false;
}

PlannerState::PlannerState(std::shared_ptr<const ModelCatalog> catalog,
                           std::shared_ptr<const FitPlanner> planner,
                           Store* store, PlannerMetrics* metrics,
                           BackgroundWorker* executor, ServiceOptions service,
                           Options options)
    : catalog_(std::move(catalog)),
      planner_(std::move(planner)),
      learn_limit_({options.auto_probe_per_caller, options.auto_probe_total,
                    /*window_ms=*/60000},
                   options.now_ms ? options.now_ms : NowMsFn(SteadyNowMs)),
      store_(store),
      metrics_(metrics),
      executor_(executor),
      service_(std::move(service)),
      options_(options),
      worker_(1, /*nice=*/10),
      evidence_worker_(1, /*nice=*/10),
      update_worker_(1),
      import_pool_(options.import_threads, /*nice=*/10) {}

void PlannerState::SetPlanner(std::shared_ptr<const FitPlanner> planner) {
  absl::MutexLock lock(&mu_);
  planner_ = std::move(planner);
}

std::shared_ptr<const FitPlanner> PlannerState::planner() const {
  absl::MutexLock lock(&mu_);
  return planner_;
}

std::shared_ptr<const Evidence> PlannerState::evidence() const {
  absl::MutexLock lock(&mu_);
  return evidence_;
}

PlannerState::Answering PlannerState::answering() const {
  absl::MutexLock lock(&mu_);
  return {planner_, evidence_};
}

void PlannerState::SetLearner(Learner* learner) {
  absl::MutexLock lock(&mu_);
  learner_ = learner;
}

void PlannerState::Quiesce() {
  SetLearner(nullptr);
  auto done = std::make_shared<absl::Notification>();
  // Jobs run in order: once this one runs, none before it still holds the
  // learner. Unbounded queue for this one job, so it is always accepted.
  if (evidence_worker_.Post([done] { done->Notify(); },
                            std::numeric_limits<size_t>::max())) {
    done->WaitForNotification();
  }
}

absl::Status PlannerState::RefreshEvidence() {
  const std::shared_ptr<const FitPlanner> current = planner();
  std::string after;
  ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> runs,
                   store_->ListRunsAfter(&after));
  const auto start = std::chrono::steady_clock::now();
  const int64_t count = static_cast<int64_t>(runs.size());
  AnchorOptions options;
  options.device_costs = &current->factor_set().device_costs();
  std::shared_ptr<const Evidence> built =
      Evidence::Build(runs, *catalog_, current->priors(), options);
  const auto end = std::chrono::steady_clock::now();
  const double seconds = std::chrono::duration<double>(end - start).count();
  spdlog::info(
      "event=evidence_built runs={} keys={} seconds={:.3f} factor_set={}",
      count, built->groups(), seconds, current->factor_set().version());
  absl::MutexLock lock(&mu_);
  // A planner installed meanwhile rebuilds again; keep the newer priors.
  if (planner_ == current) {
    evidence_ = std::move(built);
    evidence_runs_ = count;
    evidence_after_ = std::move(after);
    evidence_planner_ = current;
    evidence_rebuild_wanted_ = false;
    ++evidence_rebuilds_;
    evidence_rebuild_after_ =
        end +
        std::max(std::chrono::milliseconds(options_.evidence_rebuild_min_ms),
                 std::chrono::duration_cast<std::chrono::milliseconds>(
                     4 * (end - start)));
  }
  return absl::OkStatus();
}

PlannerState::~PlannerState() {
  evidence_stopping_ = true;
  // A job that read the flag before it was set may still queue one on the
  // other thread: once both have run what they hold, none can.
  for (BackgroundWorker* worker : {&evidence_worker_, &update_worker_}) {
    auto done = std::make_shared<absl::Notification>();
    if (worker->Post([done] { done->Notify(); },
                     std::numeric_limits<size_t>::max())) {
      done->WaitForNotification();
    }
  }
}

void PlannerState::QueueRebuild() {
  if (evidence_stopping_ || evidence_rebuild_queued_.exchange(true)) return;
  const bool posted = evidence_worker_.Post([this] {
    evidence_rebuild_queued_ = false;
    if (absl::Status rebuilt = RefreshEvidence(); !rebuilt.ok()) {
      spdlog::warn("event=evidence_rebuild_failed error=\"{}\"",
                   std::string(rebuilt.message()));
    }
    // Runs stored while it read and built.
    EvidenceStale();
  });
  if (!posted) evidence_rebuild_queued_ = false;
}

absl::Status PlannerState::UpdateEvidence() {
  const std::shared_ptr<const FitPlanner> current = planner();
  std::shared_ptr<const Evidence> evidence;
  std::string after;
  int64_t held = 0;
  {
    absl::MutexLock lock(&mu_);
    if (evidence_ == nullptr || evidence_planner_ != current) {
      evidence = nullptr;
    } else {
      evidence = evidence_;
      after = evidence_after_;
      held = evidence_runs_;
    }
  }
  if (evidence == nullptr) {
    QueueRebuild();
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> runs,
                   store_->ListRunsAfter(&after));
  if (!runs.empty()) {
    const auto start = std::chrono::steady_clock::now();
    AnchorOptions options;
    options.device_costs = &current->factor_set().device_costs();
    EvidenceUpdate update;
    std::shared_ptr<const Evidence> next = evidence->WithRuns(
        runs, *catalog_, current->priors(), options, &update);
    spdlog::debug(
        "event=evidence_updated runs={} groups={} held={} constants_moved={} "
        "seconds={:.6f}",
        update.runs, update.anchors, next->run_count(), update.constants_moved,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count());
    absl::MutexLock lock(&mu_);
    // Only this thread replaces the evidence; a planner installed meanwhile
    // has queued a rebuild.
    if (planner_ != current || evidence_ != evidence) return absl::OkStatus();
    evidence_ = std::move(next);
    held += static_cast<int64_t>(runs.size());
    evidence_runs_ = held;
    evidence_after_ = std::move(after);
    evidence_rebuild_wanted_ |= update.constants_moved;
  }
  // Runs the listing did not return (committed out of key order by another
  // replica's transaction, or removed) are only seen by a rebuild; the
  // count that finds them is linear in the store, so it runs at most every
  // evidence_count_ms.
  const auto now = std::chrono::steady_clock::now();
  bool count;
  {
    absl::MutexLock lock(&mu_);
    count = now >= evidence_count_after_;
    if (count) {
      evidence_count_after_ =
          now + std::chrono::milliseconds(options_.evidence_count_ms);
    }
  }
  int64_t stored = held;
  if (count) {
    ASSIGN_OR_RETURN(stored, store_->CountRuns());
  }
  bool rebuild;
  {
    absl::MutexLock lock(&mu_);
    evidence_rebuild_wanted_ |= stored != held;
    rebuild = evidence_rebuild_wanted_ && now >= evidence_rebuild_after_;
  }
  if (rebuild) QueueRebuild();
  return absl::OkStatus();
}

void PlannerState::WaitForEvidence() {
  auto done = std::make_shared<absl::Notification>();
  if (update_worker_.Post([done] { done->Notify(); },
                          std::numeric_limits<size_t>::max())) {
    done->WaitForNotification();
  }
}

void PlannerState::EvidenceStale() {
  if (evidence_stopping_ || evidence_refresh_queued_.exchange(true)) return;
  const bool posted = update_worker_.Post([this] {
    evidence_refresh_queued_ = false;
    if (absl::Status updated = UpdateEvidence(); !updated.ok()) {
      spdlog::warn("event=evidence_update_failed error=\"{}\"",
                   std::string(updated.message()));
    }
  });
  if (!posted) evidence_refresh_queued_ = false;
}

LearnGrant PlannerState::GrantLearning(
    const Caller* caller, const v1::CheckFitRequest& request) const {
  LearnGrant grant;
  grant.wanted = request.learn() || options_.auto_probe;
  if (!grant.wanted) return grant;
  if (caller != nullptr) {
    grant.caller = caller->Name();
    grant.peer = caller->peer;
  } else {
    grant.caller = "anonymous";
  }
  const bool operator_role = caller == nullptr || access() == nullptr ||
                             access()->Holds(*caller, Role::kOperator);
  if (request.learn() && operator_role) {
    grant.allowed = true;
  } else if (options_.auto_probe) {
    grant.allowed = true;
    grant.rate_limited = true;
  } else {
    // A reader's learn would spend GPU time on a read.
    std::string who = "anonymous";
    if (caller->token_role.has_value()) {
      who = std::string(RoleName(*caller->token_role));
    } else if (!caller->identity.empty()) {
      who = absl::StrCat(caller->identity, " without a token");
    }
    grant.refused = absl::StrCat(
        "no probe queued: learning needs an operator token (this caller is ",
        who, "), or a planner with --auto_probe=on");
  }
  return grant;
}

std::string PlannerState::Learn(const v1::CheckFitRequest& request,
                                const v1::CheckFitResponse& answer,
                                const LearnGrant& grant) {
  std::string why;
  if (!NeedsLearning(answer, &why)) return why;
  if (!grant.allowed) return grant.refused;
  Learner* learner;
  {
    absl::MutexLock lock(&mu_);
    learner = learner_;
  }
  if (learner == nullptr) return "no probe queued: this planner has no fleet";
  const std::shared_ptr<const FitPlanner> current = planner();
  absl::StatusOr<ModelKey> key = current->KeyOf(request);
  if (!key.ok()) return std::string(key.status().message());
  absl::MutexLock lock(&learn_mu_);
  absl::StatusOr<std::optional<std::string>> outstanding =
      learner->Outstanding(key->id);
  if (!outstanding.ok()) {
    return absl::StrCat("no probe queued: ", outstanding.status().message());
  }
  if (outstanding->has_value()) {
    return absl::StrCat("probe ", **outstanding,
                        " for this model is already queued or running");
  }
  absl::StatusOr<Learner::Worker> worker =
      learner->WorkerFor(request.include_simulated());
  if (!worker.ok()) {
    return absl::StrCat("no probe queued: ", worker.status().message());
  }
  // Batches the prior calls FITS on that worker's card, so the probe
  // measures without going OOM: the largest such and a half and a quarter.
  v1::CheckFitRequest sizing = request;
  sizing.clear_targets();
  sizing.add_targets()->set_gpu(worker->gpu);
  absl::StatusOr<v1::CheckFitResponse> sized = current->CheckFit(sizing);
  if (!sized.ok()) {
    return absl::StrCat("no probe queued: ", sized.status().message());
  }
  const uint32_t largest = sized->targets(0).max_batch_fits();
  if (largest == 0) {
    return absl::StrCat(
        "no probe queued: even batch 1 is not FITS by the upper bound on ",
        worker->gpu, " (worker ", worker->id, ")");
  }
  std::vector<uint32_t> batches;
  for (uint32_t batch :
       {std::max(1u, largest / 4), std::max(1u, largest / 2), largest}) {
    if (batches.empty() || batches.back() != batch) batches.push_back(batch);
  }
  if (grant.rate_limited) {
    if (std::string limited = learn_limit_.Take(grant.caller);
        !limited.empty()) {
      spdlog::debug(
          "event=learning_probe_refused identity={} peer={} key={} "
          "reason=\"{}\"",
          grant.caller, grant.peer, key->id, limited);
      return absl::StrCat("no probe queued: ", limited);
    }
  }
  absl::StatusOr<std::string> id =
      learner->QueueLearning(request, batches, *worker, key->id);
  if (!id.ok()) return absl::StrCat("no probe queued: ", id.status().message());
  // Who spent GPU time, as the audit interceptor says it for mutating calls.
  spdlog::info(
      "event=audit method=/headroom.v1.Fit/CheckFit action=learn identity={} "
      "peer={} outcome=queued probe={} key={} worker={} auto_probe={}",
      grant.caller, grant.peer, *id, key->id, worker->id, grant.rate_limited);
  return absl::StrCat("probe ", *id, " queued on worker ", worker->id, " (",
                      worker->gpu, ", batches ", absl::StrJoin(batches, ","),
                      ")");
}

grpc::ServerUnaryReactor* PlannerState::DeferImport(
    grpc::ServerUnaryReactor* reactor, std::function<void()> job,
    size_t request_bytes) {
  std::string full;
  {
    absl::MutexLock lock(&import_mu_);
    if (imports_ > 0 &&
        import_bytes_ + request_bytes > options_.import_queue_bytes) {
      full = absl::StrCat(
          "the model import queue is full: ", imports_, " imports hold ",
          import_bytes_, " bytes of requests, and this one's ", request_bytes,
          " would pass the ", options_.import_queue_bytes,
          " allowed; retry later, or ask about a catalog template");
    } else {
      import_bytes_ += request_bytes;
      ++imports_;
    }
  }
  if (!full.empty()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, full));
    return reactor;
  }
  auto run = [this, job = std::move(job), request_bytes] {
    if (options_.before_import) options_.before_import();
    job();
    absl::MutexLock lock(&import_mu_);
    import_bytes_ -= request_bytes;
    --imports_;
    trim_in_calls_ = 2;
  };
  if (!import_pool_.Post(std::move(run), options_.import_queue)) {
    {
      absl::MutexLock lock(&import_mu_);
      import_bytes_ -= request_bytes;
      --imports_;
    }
    reactor->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the model import queue is full (", options_.import_queue,
                     " imports wait, --import_queue); retry later, or ask "
                     "about a catalog template")));
  }
  return reactor;
}

bool PlannerState::ReturnImportMemory() {
  {
    absl::MutexLock lock(&import_mu_);
    if (imports_ > 0 || trim_in_calls_ == 0 || --trim_in_calls_ > 0) {
      return false;
    }
  }
  malloc_trim(0);
  return true;
}

void PlannerState::Install(v1::FactorSet set) {
  metrics_->FactorSetInstalled(set);
  SetPlanner(std::make_shared<const FitPlanner>(catalog_, std::move(set),
                                                options_.coverage));
  // The evidence's shapes are taken under the planner's priors.
  EvidenceStale();
}

absl::StatusOr<bool> PlannerState::SyncWithStore() {
  // A refit or promotion in progress here writes the store and installs
  // its result under refit_mu_; reading around it could reinstall what it
  // just replaced. The next sync catches up.
  if (!refit_mu_.TryLock()) return false;
  absl::StatusOr<bool> changed = SyncWithStoreLocked();
  refit_mu_.Unlock();
  return changed;
}

absl::StatusOr<bool> PlannerState::SyncWithStoreLocked() {
  bool changed = false;
  ASSIGN_OR_RETURN(std::optional<v1::FactorSet> set,
                   store_->CurrentFactorSet());
  const std::string installed = planner()->factor_set().version();
  if (set.has_value() && set->version() != installed) {
    spdlog::info("event=factor_set_synced version={} previous={}",
                 set->version(), installed);
    Install(*std::move(set));
    changed = true;
  }
  ASSIGN_OR_RETURN(std::optional<v1::EnergyCurveSet> curves,
                   store_->CurrentEnergyCurveSet());
  std::shared_ptr<const v1::EnergyCurveSet> current;
  {
    absl::MutexLock energy_lock(&mu_);
    current = energy_;
  }
  if (curves.has_value() &&
      (current == nullptr || current->version() != curves->version())) {
    spdlog::info("event=energy_curves_synced version={}", curves->version());
    SetEnergyCurves(
        std::make_shared<const v1::EnergyCurveSet>(*std::move(curves)));
    changed = true;
  }
  // Runs stored through another replica (or a refit's import) change the
  // evidence answers are anchored on.
  ASSIGN_OR_RETURN(const std::string last, store_->LastRunKey());
  bool stale;
  {
    absl::MutexLock lock(&mu_);
    stale = last != evidence_after_ || evidence_rebuild_wanted_;
  }
  if (stale) EvidenceStale();
  return changed;
}

grpc::ServerUnaryReactor* PlannerState::DeferRefit(
    grpc::ServerUnaryReactor* reactor, std::function<void()> job) {
  if (!worker_.Post(std::move(job))) {
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "too many refits queued; retry later"));
  }
  return reactor;
}

void PlannerState::SetEnergyCurves(
    std::shared_ptr<const v1::EnergyCurveSet> curves) {
  absl::MutexLock lock(&mu_);
  energy_ = std::move(curves);
}

std::shared_ptr<const v1::EnergyCurveSet> PlannerState::energy() const {
  absl::MutexLock lock(&mu_);
  return energy_;
}

grpc::ServerUnaryReactor* PlannerState::DeferStore(
    grpc::ServerUnaryReactor* reactor, std::function<void()> job) {
  return headroom::DeferStore(executor_, service_.store_queue, reactor,
                              std::move(job));
}

bool PlannerState::PostLearning(std::function<void()> job) {
  return evidence_worker_.Post(std::move(job));
}

}  // namespace headroom
