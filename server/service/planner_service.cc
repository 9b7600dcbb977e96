#include "server/service/planner_service.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <set>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "server/core/calibration/calibrate.h"
#include "server/core/calibration/fit_inputs.h"
#include "server/core/calibration/promotion.h"
#include "server/core/common/deterministic_bytes.h"
#include "server/core/common/input_limits.h"
#include "server/core/common/status_macros.h"
#include "server/core/density/density_rank.h"
#include "server/core/energy/energy_curves.h"
#include "server/core/energy/energy_refit.h"
#include "server/core/microbatch/cache_key.h"
#include "server/core/microbatch/plan.h"
#include "server/core/microbatch/select.h"
#include "server/service/grpc_status.h"
#include "server/service/pages/calibration_plot.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {

namespace {

// A planner built without access rules (tests) treats every caller as
// admin, as an open planner does.
bool CallerIsAdmin(const Access* access,
                   const grpc::CallbackServerContext* context) {
  return access == nullptr ||
         access->Holds(access->Identify(*context), Role::kAdmin);
}

// Runs stored before the length limits existed may carry longer strings:
// they are cut rather than the ranking refused, an id keeping a digest of
// the whole so that ids stay distinct.
bool CutStoredDensityRun(v1::DensityRawRun* run) {
  bool cut = false;
  if (run->id().size() > kMaxNameChars) {
    cut = true;
    char digest[17];
    std::snprintf(digest, sizeof digest, "%016zx",
                  std::hash<std::string>()(run->id()));
    run->set_id(
        absl::StrCat(run->id().substr(0, kMaxNameChars - 20), "...", digest));
  }
  for (std::string* field : {run->mutable_mode(), run->mutable_dtype(),
                             run->mutable_format(), run->mutable_arch()}) {
    if (field->size() > kMaxNameChars) {
      field->resize(kMaxNameChars);
      cut = true;
    }
  }
  return cut;
}

}  // namespace

PlannerService::PlannerService(std::shared_ptr<const ModelCatalog> catalog,
                               std::shared_ptr<const FitPlanner> planner,
                               Store* store, PlannerMetrics* metrics,
                               Options options)
    : catalog_(std::move(catalog)),
      planner_(std::move(planner)),
      store_(store),
      metrics_(metrics),
      options_(options),
      import_pool_(options.import_threads, /*nice=*/10) {}

void PlannerService::SetPlanner(std::shared_ptr<const FitPlanner> planner) {
  absl::MutexLock lock(&mu_);
  planner_ = std::move(planner);
}

std::shared_ptr<const FitPlanner> PlannerService::planner() const {
  absl::MutexLock lock(&mu_);
  return planner_;
}

std::shared_ptr<const Evidence> PlannerService::evidence() const {
  absl::MutexLock lock(&mu_);
  return evidence_;
}

PlannerService::Answering PlannerService::answering() const {
  absl::MutexLock lock(&mu_);
  return {planner_, evidence_};
}

void PlannerService::SetLearner(Learner* learner) {
  absl::MutexLock lock(&mu_);
  learner_ = learner;
}

void PlannerService::Quiesce() {
  SetLearner(nullptr);
  auto done = std::make_shared<absl::Notification>();
  // Jobs run in order: once this one runs, none before it still holds the
  // learner. Unbounded queue for this one job, so it is always accepted.
  if (evidence_worker_.Post([done] { done->Notify(); },
                            std::numeric_limits<size_t>::max())) {
    done->WaitForNotification();
  }
}

absl::Status PlannerService::RefreshEvidence() {
  const std::shared_ptr<const FitPlanner> current = planner();
  ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> runs, store_->ListRuns());
  const auto start = std::chrono::steady_clock::now();
  const int64_t count = static_cast<int64_t>(runs.size());
  std::shared_ptr<const Evidence> built =
      Evidence::Build(runs, *catalog_, current->priors());
  spdlog::info(
      "event=evidence_built runs={} keys={} seconds={:.3f} factor_set={}",
      count, built->groups(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      current->factor_set().version());
  absl::MutexLock lock(&mu_);
  // A planner installed meanwhile rebuilds again; keep the newer priors.
  if (planner_ == current) {
    evidence_ = std::move(built);
    evidence_runs_ = count;
  }
  return absl::OkStatus();
}

void PlannerService::EvidenceStale() {
  if (evidence_refresh_queued_.exchange(true)) return;
  const bool posted = evidence_worker_.Post([this] {
    evidence_refresh_queued_ = false;
    if (absl::Status refreshed = RefreshEvidence(); !refreshed.ok()) {
      spdlog::warn("event=evidence_refresh_failed error=\"{}\"",
                   std::string(refreshed.message()));
    }
  });
  if (!posted) evidence_refresh_queued_ = false;
}

namespace {

// Learning helps an answer that rests on the prior alone and leaves some
// target undecided.
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

}  // namespace

std::string PlannerService::Learn(const v1::CheckFitRequest& request,
                                  const v1::CheckFitResponse& answer) {
  std::string why;
  if (!NeedsLearning(answer, &why)) return why;
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
  absl::StatusOr<std::string> id =
      learner->QueueLearning(request, batches, *worker, key->id);
  if (!id.ok()) return absl::StrCat("no probe queued: ", id.status().message());
  return absl::StrCat("probe ", *id, " queued on worker ", worker->id, " (",
                      worker->gpu, ", batches ", absl::StrJoin(batches, ","),
                      ")");
}

grpc::ServerUnaryReactor* PlannerService::CheckFit(
    grpc::CallbackServerContext* context, const v1::CheckFitRequest* request,
    v1::CheckFitResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/CheckFit")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status size = CheckSize(*request, options_.max_request_bytes);
      !size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  // A catalog answer runs inline (it blocks on nothing); an import runs on
  // its own pool, so a queue of large graphs never delays catalog answers.
  if (ImportsModel(request->model())) {
    return DeferImport(reactor, [this, reactor, request, response] {
      AnswerCheckFit(reactor, request, response);
    });
  }
  AnswerCheckFit(reactor, request, response);
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::DeferImport(
    grpc::ServerUnaryReactor* reactor, std::function<void()> job) {
  if (!import_pool_.Post(std::move(job), options_.import_queue)) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the model import queue is full (", options_.import_queue,
                     " imports wait, --import_queue); retry later, or ask "
                     "about a catalog template")));
  }
  return reactor;
}

void PlannerService::AnswerCheckFit(grpc::ServerUnaryReactor* reactor,
                                    const v1::CheckFitRequest* request,
                                    v1::CheckFitResponse* response) {
  // Pure computation on an immutable planner and evidence: microseconds for
  // a catalog template, up to seconds for an imported model.
  const Answering from = answering();
  absl::StatusOr<v1::CheckFitResponse> answer =
      from.planner->CheckFit(*request, from.evidence.get());
  if (!answer.ok()) {
    spdlog::debug("event=check_fit_rejected code={} message=\"{}\"",
                  absl::StatusCodeToString(answer.status().code()),
                  std::string(answer.status().message()));
    reactor->Finish(ToGrpcStatus(answer.status()));
    return;
  }
  metrics_->CountVerdicts(*answer);
  std::string why;
  const bool learn = request->learn() || options_.auto_probe;
  if (learn && NeedsLearning(*answer, &why)) {
    // Deciding reads and writes the probe queue: off this thread. With
    // learn the answer waits for it and says what happened; with
    // --auto_probe alone it does not wait.
    if (request->learn()) {
      *response = std::move(*answer);
      const bool posted =
          evidence_worker_.Post([this, reactor, request, response] {
            response->set_learning(Learn(*request, *response));
            reactor->Finish(grpc::Status::OK);
          });
      if (!posted) {
        response->set_learning("no probe queued: the planner is busy");
        reactor->Finish(grpc::Status::OK);
      }
      return;
    }
    auto copy = std::make_shared<v1::CheckFitRequest>(*request);
    auto seen = std::make_shared<v1::CheckFitResponse>(*answer);
    evidence_worker_.Post([this, copy, seen] { Learn(*copy, *seen); });
  } else if (request->learn()) {
    answer->set_learning(why);
  }
  *response = std::move(*answer);
  reactor->Finish(grpc::Status::OK);
}

grpc::ServerUnaryReactor* PlannerService::GetCalibration(
    grpc::CallbackServerContext* context,
    const v1::GetCalibrationRequest* request,
    v1::GetCalibrationResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/GetCalibration")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->version().empty()) {
    *response->mutable_factor_set() = planner()->factor_set();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  if (request->version().size() > 64) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "version is longer than 64 characters; "
                                 "factor-set versions look like fs-1"));
    return reactor;
  }
  absl::StatusOr<v1::FactorSet> set = store_->GetFactorSet(request->version());
  if (!set.ok()) {
    reactor->Finish(ToGrpcStatus(set.status()));
    return reactor;
  }
  *response->mutable_factor_set() = std::move(*set);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::Ping(
    grpc::CallbackServerContext* context, const v1::PingRequest* /*request*/,
    v1::PingResponse* /*response*/) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/Ping")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

void PlannerService::Install(v1::FactorSet set) {
  metrics_->FactorSetInstalled(set);
  SetPlanner(std::make_shared<const FitPlanner>(catalog_, std::move(set),
                                                options_.coverage));
  // The evidence's shapes are taken under the planner's priors.
  EvidenceStale();
}

absl::StatusOr<bool> PlannerService::SyncWithStore() {
  // A refit or promotion in progress here writes the store and installs
  // its result under refit_mu_; reading around it could reinstall what it
  // just replaced. The next sync catches up.
  if (!refit_mu_.TryLock()) return false;
  absl::Cleanup unlock = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    refit_mu_.Unlock();
  };
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
  ASSIGN_OR_RETURN(int64_t runs, store_->CountRuns());
  bool stale;
  {
    absl::MutexLock lock(&mu_);
    stale = runs != evidence_runs_;
  }
  if (stale) EvidenceStale();
  return changed;
}

absl::StatusOr<v1::RefitResponse> PlannerService::RunRefit(
    const v1::RefitRequest& request, const std::function<bool()>& live) {
  absl::MutexLock lock(&refit_mu_);
  std::vector<v1::MeasuredRun> imported(request.runs().begin(),
                                        request.runs().end());
  // Nothing is stored until every imported run is known to be usable.
  RETURN_IF_ERROR(ValidateRuns(imported, *catalog_));
  StampRuns(*catalog_, &imported);
  v1::RefitResponse response;
  ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> runs, store_->ListRuns());
  // Runs identical to stored ones (or to each other) are not imported twice;
  // the new ones are stored only when the refit commits.
  std::set<std::string> seen;
  for (const v1::MeasuredRun& run : runs) seen.insert(DeterministicBytes(run));
  std::vector<v1::MeasuredRun> fresh;
  for (v1::MeasuredRun& run : imported) {
    if (seen.insert(DeterministicBytes(run)).second) {
      fresh.push_back(std::move(run));
    }
  }
  runs.insert(runs.end(), fresh.begin(), fresh.end());
  response.set_runs_imported(static_cast<int32_t>(fresh.size()));
  // Simulated measurements never enter a calibration unless asked.
  if (!request.include_simulated()) {
    runs.erase(std::remove_if(
                   runs.begin(), runs.end(),
                   [](const v1::MeasuredRun& run) { return run.simulated(); }),
               runs.end());
  }
  response.set_runs_used(static_cast<int32_t>(runs.size()));
  const std::string inputs = FitInputsSha256(runs);
  ASSIGN_OR_RETURN(std::optional<v1::FactorSet> current,
                   store_->CurrentFactorSet());
  if (current.has_value()) response.set_previous_version(current->version());
  // Nothing new: fitting the runs the current set was fitted on again would
  // store a copy of it under a new version. Only force does (a dry run
  // still fits, to show the page).
  if (fresh.empty() && !request.force() && !request.dry_run() &&
      current.has_value() && current->inputs_sha256() == inputs) {
    const std::string& version = current->version();
    response.set_reason(absl::StrCat(
        "nothing new to fit: no run imported (", request.runs_size(),
        " given, every one stored already) and the stored runs are those ",
        version, " was fitted on; no factor set stored, ", version,
        " stays current (force refits anyway)"));
    response.set_stored(false);
    response.set_promoted(false);
    spdlog::info("event=refit_nothing_new current={} runs={} given={}", version,
                 runs.size(), request.runs_size());
    *response.mutable_factor_set() = *std::move(current);
    return response;
  }

  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(CalibrationResult result,
                   Calibrate(runs, *catalog_, FitOptions{},
                             absl::StrCat("stored runs (", runs.size(), ")")));
  response.set_fit_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  result.factor_set.set_inputs_sha256(inputs);
  const PromotionDecision decision = DecidePromotion(
      result.factor_set, current ? &*current : nullptr, request.force());
  response.set_reason(decision.reason);
  if (request.dry_run()) {
    *response.mutable_factor_set() = std::move(result.factor_set);
    response.set_promoted(false);
    return response;
  }
  // The commit: only for a caller still waiting for the answer, so a
  // refit whose client gave up changes nothing it cannot see.
  if (options_.before_refit_commit) options_.before_refit_commit(live);
  if (!live()) {
    spdlog::info(
        "event=refit_abandoned runs={} imported={} seconds={:.3f} reason=\"the "
        "call ended before the commit\"",
        runs.size(), fresh.size(), response.fit_seconds());
    return absl::DeadlineExceededError(
        "refit not committed: the call's deadline passed (or it was "
        "cancelled) before the fit finished; nothing was stored; retry with "
        "a longer deadline");
  }
  if (!fresh.empty()) RETURN_IF_ERROR(store_->AddRuns(fresh).status());
  ASSIGN_OR_RETURN(
      v1::FactorSet stored,
      store_->AddFactorSet(std::move(result.factor_set), decision.promote));
  response.set_stored(true);
  response.set_promoted(decision.promote);
  if (decision.promote) Install(stored);
  spdlog::info(
      "event=refit version={} promoted={} runs={} imported={} seconds={:.3f} "
      "reason=\"{}\"",
      stored.version(), decision.promote, runs.size(), response.runs_imported(),
      response.fit_seconds(), decision.reason);
  *response.mutable_factor_set() = std::move(stored);
  return response;
}

grpc::ServerUnaryReactor* PlannerService::Refit(
    grpc::CallbackServerContext* context, const v1::RefitRequest* request,
    v1::RefitResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/Refit")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->runs_size() > 1000000) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "runs has more than 1,000,000 entries"));
    return reactor;
  }
  // A refit takes milliseconds to seconds: it runs on the background worker
  // and finishes the call from there. The context lives until Finish, so
  // the worker may ask it whether the caller still waits.
  return Defer(reactor, [this, context, reactor, request, response] {
    const auto live = [context] {
      return !context->IsCancelled() &&
             std::chrono::system_clock::now() < context->deadline();
    };
    Reply(reactor, RunRefit(*request, live), response);
  });
}

grpc::ServerUnaryReactor* PlannerService::Defer(
    grpc::ServerUnaryReactor* reactor, std::function<void()> job) {
  if (!worker_.Post(std::move(job))) {
    reactor->Finish(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                 "too many refits queued; retry later"));
  }
  return reactor;
}

grpc::ServerUnaryReactor* PlannerService::ListFactorSets(
    grpc::CallbackServerContext* context,
    const v1::ListFactorSetsRequest* request,
    v1::ListFactorSetsResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/ListFactorSets")) {
    return refused;
  }
  auto answer = [&]() -> absl::StatusOr<v1::ListFactorSetsResponse> {
    // The budget counts whole stored sets; their summaries are smaller.
    ASSIGN_OR_RETURN(const PageSpec spec,
                     PageFromRequest("factor_sets", request->page_size(),
                                     request->page_token(),
                                     PageBytes(options_.max_request_bytes)));
    ASSIGN_OR_RETURN(Page<v1::FactorSet> sets, store_->ListFactorSets(spec));
    v1::ListFactorSetsResponse out;
    const std::string current = planner()->factor_set().version();
    out.set_current_version(current);
    out.set_next_page_token(NextPageToken("factor_sets", sets.next_after));
    for (const v1::FactorSet& set : sets.entries) {
      v1::FactorSetSummary* summary = out.add_factor_sets();
      summary->set_version(set.version());
      summary->set_created_unix(set.created_unix());
      summary->set_current(set.version() == current);
      summary->set_trained_on(set.trained_on());
      *summary->mutable_factors() = set.factors();
      summary->set_k95(set.k95());
      auto it = set.page().summary().find("ours_heldout");
      if (it != set.page().summary().end()) {
        summary->set_heldout_median_abs_err(it->second.median_abs_err());
        summary->set_heldout_said_fits_but_oom(it->second.said_fits_but_oom());
      }
      BoundEntry(summary, PageBytes(options_.max_request_bytes));
    }
    return out;
  }();
  return Reply(context->DefaultReactor(), std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::PromoteFactorSet(
    grpc::CallbackServerContext* context,
    const v1::PromoteFactorSetRequest* request,
    v1::PromoteFactorSetResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/PromoteFactorSet")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto answer = [&]() -> absl::StatusOr<v1::PromoteFactorSetResponse> {
    absl::MutexLock lock(&refit_mu_);
    if (request->rollback() == !request->version().empty()) {
      return absl::InvalidArgumentError(
          "set exactly one of version (e.g. fs-2) and rollback");
    }
    if (request->version().size() > 64) {
      return absl::InvalidArgumentError(
          "version is longer than 64 characters; versions look like fs-1");
    }
    const std::string previous = planner()->factor_set().version();
    std::string target = request->version();
    if (request->rollback()) {
      ASSIGN_OR_RETURN(std::vector<std::string> history,
                       store_->CurrentHistory());
      ASSIGN_OR_RETURN(target, RollbackTarget(history, previous));
    }
    ASSIGN_OR_RETURN(v1::FactorSet set, store_->GetFactorSet(target));
    RETURN_IF_ERROR(store_->SetCurrentFactorSet(target));
    Install(set);
    spdlog::info("event=factor_set_promoted version={} previous={} rollback={}",
                 target, previous, request->rollback());
    v1::PromoteFactorSetResponse out;
    out.set_current_version(target);
    out.set_previous_version(previous);
    return out;
  }();
  return Reply(reactor, std::move(answer), response);
}

namespace {

// Keeps a ranking under `max_bytes`, whatever runs it ranked: first the long
// strings of every run are cut, then list entries are dropped from the
// tail of the longest list. `truncated` says what was left out.
void BoundRanking(v1::RankDensityResponse* response, size_t max_bytes) {
  if (response->ByteSizeLong() <= max_bytes) return;
  v1::DensityLeaderboard* board = response->mutable_leaderboard();
  std::vector<std::string> notes;
  // The rules paragraph is ours, not a run's: it stays whole.
  std::string formula = std::move(*board->mutable_formula());
  board->clear_formula();
  if (CutLongStrings(board)) {
    notes.push_back("run fields longer than 1 KiB are cut");
  }
  board->set_formula(std::move(formula));
  using Runs = google::protobuf::RepeatedPtrField<v1::DensityRun>;
  Runs* lists[] = {board->mutable_top(), board->mutable_top_speed(),
                   board->mutable_top_avail(), board->mutable_top_mix()};
  int dropped = 0;
  while (response->ByteSizeLong() > max_bytes) {
    Runs* longest = lists[0];
    for (Runs* list : lists) {
      if (list->size() > longest->size()) longest = list;
    }
    if (board->gold_modes_size() > longest->size()) {
      board->mutable_gold_modes()->RemoveLast();
    } else if (!longest->empty()) {
      longest->RemoveLast();
    } else {
      break;
    }
    ++dropped;
  }
  if (dropped > 0) {
    notes.push_back(absl::StrCat(dropped,
                                 " list entries are left out (the longest "
                                 "lists' tails) to stay under ",
                                 max_bytes, " bytes"));
  }
  response->set_truncated(absl::StrJoin(notes, "; "));
}

}  // namespace

grpc::ServerUnaryReactor* PlannerService::RankDensity(
    grpc::CallbackServerContext* context, const v1::RankDensityRequest* request,
    v1::RankDensityResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/RankDensity")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status size = CheckSize(*request, options_.max_request_bytes);
      !size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  const size_t budget = PageBytes(options_.max_request_bytes);
  if (!request->use_stored()) {
    absl::StatusOr<v1::RankDensityResponse> answer =
        headroom::RankDensity(*request);
    if (answer.ok()) BoundRanking(&*answer, budget);
    return Reply(reactor, std::move(answer), response);
  }
  auto answer = [&]() -> absl::StatusOr<v1::RankDensityResponse> {
    if (!request->runs().empty()) {
      return absl::InvalidArgumentError(
          "runs must be empty with use_stored; rank either the request's "
          "runs or the stored ones");
    }
    ASSIGN_OR_RETURN(std::vector<v1::DensityRawRun> stored,
                     store_->ListDensityRuns(request->arch(), request->dtype(),
                                             request->mode()));
    v1::RankDensityRequest ranked = *request;
    ranked.set_use_stored(false);
    bool cut = false;
    for (v1::DensityRawRun& run : stored) {
      cut = CutStoredDensityRun(&run) || cut;
      *ranked.add_runs() = std::move(run);
    }
    ASSIGN_OR_RETURN(v1::RankDensityResponse out,
                     headroom::RankDensity(ranked));
    BoundRanking(&out, budget);
    if (cut) {
      out.set_truncated(
          absl::StrCat(out.truncated(), out.truncated().empty() ? "" : "; ",
                       "stored run strings longer than ", kMaxNameChars,
                       " characters are cut (ids keep a digest)"));
    }
    return out;
  }();
  return Reply(reactor, std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::SubmitDensityRuns(
    grpc::CallbackServerContext* context,
    const v1::SubmitDensityRunsRequest* request,
    v1::SubmitDensityRunsResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/SubmitDensityRuns")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto answer = [&]() -> absl::StatusOr<v1::SubmitDensityRunsResponse> {
    RETURN_IF_ERROR(CheckSize(*request, options_.max_request_bytes));
    if (request->runs_size() > kMaxDensityRunsPerRequest) {
      return absl::InvalidArgumentError(absl::StrCat(
          "runs has ", request->runs_size(), " entries; allowed up to ",
          kMaxDensityRunsPerRequest, " per request"));
    }
    const std::vector<v1::DensityRawRun> runs(request->runs().begin(),
                                              request->runs().end());
    // Nothing is stored unless every run is valid.
    RETURN_IF_ERROR(ValidateDensityRuns(runs));
    ASSIGN_OR_RETURN(int64_t stored, store_->AddDensityRuns(runs));
    v1::SubmitDensityRunsResponse out;
    out.set_stored(static_cast<int32_t>(stored));
    return out;
  }();
  return Reply(reactor, std::move(answer), response);
}

void PlannerService::SetEnergyCurves(
    std::shared_ptr<const v1::EnergyCurveSet> curves) {
  absl::MutexLock lock(&mu_);
  energy_ = std::move(curves);
}

grpc::ServerUnaryReactor* PlannerService::EstimateEnergy(
    grpc::CallbackServerContext* context,
    const v1::EstimateEnergyRequest* request,
    v1::EstimateEnergyResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/EstimateEnergy")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<const v1::EnergyCurveSet> curves;
  {
    absl::MutexLock lock(&mu_);
    curves = energy_;
  }
  if (curves == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "no energy curves are loaded"));
    return reactor;
  }
  absl::StatusOr<v1::EstimateEnergyResponse> answer =
      headroom::EstimateEnergy(*curves, *request);
  return Reply(reactor, std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::RefitEnergy(
    grpc::CallbackServerContext* context, const v1::RefitEnergyRequest* request,
    v1::RefitEnergyResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/RefitEnergy")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return Defer(reactor, [this, reactor, request, response] {
    auto answer = [&]() -> absl::StatusOr<v1::RefitEnergyResponse> {
      std::shared_ptr<const v1::EnergyCurveSet> base;
      {
        absl::MutexLock lock(&mu_);
        base = energy_;
      }
      if (base == nullptr) {
        return absl::FailedPreconditionError("no energy curves are loaded");
      }
      ASSIGN_OR_RETURN(
          v1::RefitEnergyResponse refit,
          headroom::RefitEnergy(
              *base, *request,
              absl::StrCat(request->runs_size(), " measured energy runs")));
      // Under refit_mu_ like a factor-set change, so SyncWithStore never
      // reinstalls the curves this replaces.
      absl::MutexLock refit_lock(&refit_mu_);
      ASSIGN_OR_RETURN(v1::EnergyCurveSet stored,
                       store_->AddEnergyCurveSet(refit.curve_set(), true));
      spdlog::info("event=energy_refit version={} runs={}", stored.version(),
                   request->runs_size());
      *refit.mutable_curve_set() = stored;
      SetEnergyCurves(
          std::make_shared<const v1::EnergyCurveSet>(std::move(stored)));
      return refit;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

namespace {

v1::EnergyCurveSetSummary SummaryOf(const v1::EnergyCurveSet& set,
                                    const std::string& current) {
  v1::EnergyCurveSetSummary summary;
  summary.set_version(set.version());
  summary.set_created_unix(set.created_unix());
  summary.set_trained_on(set.trained_on());
  summary.set_current(set.version() == current);
  int curves = 0;
  for (const auto& [arch, quant] : set.curves()) {
    curves += quant.has_nf4() + quant.has_int8();
  }
  summary.set_curves(curves);
  double max_j = 0;
  for (const auto& [arch, fp16] : set.fp16_energy()) {
    for (const v1::Fp16Anchor& a : fp16.anchors()) {
      max_j = std::max(max_j, a.e_j1k());
    }
  }
  summary.set_max_fp16_j_per_1k(max_j);
  return summary;
}

}  // namespace

grpc::ServerUnaryReactor* PlannerService::ListEnergyCurveSets(
    grpc::CallbackServerContext* context,
    const v1::ListEnergyCurveSetsRequest* request,
    v1::ListEnergyCurveSetsResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/ListEnergyCurveSets")) {
    return refused;
  }
  auto answer = [&]() -> absl::StatusOr<v1::ListEnergyCurveSetsResponse> {
    // The same page size and token rules as every List RPC (paging.h); a
    // page of summaries stays far under the byte budget.
    ASSIGN_OR_RETURN(const PageSpec spec,
                     PageFromRequest("energy_curve_sets", request->page_size(),
                                     request->page_token(),
                                     PageBytes(options_.max_request_bytes)));
    const std::string& after = spec.after;
    const int page_size = spec.max_entries;
    // One more than the page: whether another page follows.
    absl::StatusOr<std::vector<v1::EnergyCurveSet>> sets =
        store_->ListEnergyCurveSets(after, page_size + 1);
    if (absl::IsNotFound(sets.status())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "page_token names energy curve set '", Echo(after),
          "', which is not stored; start again with an empty page_token"));
    }
    RETURN_IF_ERROR(sets.status());
    std::string current;
    {
      absl::MutexLock lock(&mu_);
      if (energy_ != nullptr) current = energy_->version();
    }
    v1::ListEnergyCurveSetsResponse out;
    out.set_current_version(current);
    const bool more = static_cast<int>(sets->size()) > page_size;
    if (more) sets->resize(page_size);
    for (const v1::EnergyCurveSet& set : *sets) {
      *out.add_curve_sets() = SummaryOf(set, current);
    }
    if (more) {
      out.set_next_page_token(
          NextPageToken("energy_curve_sets", sets->back().version()));
    }
    return out;
  }();
  return Reply(context->DefaultReactor(), std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::PromoteEnergyCurveSet(
    grpc::CallbackServerContext* context,
    const v1::PromoteEnergyCurveSetRequest* request,
    v1::PromoteEnergyCurveSetResponse* response) {
  if (auto* refused =
          RefuseUnary(options_.access.get(), context,
                      "/headroom.v1.Planner/PromoteEnergyCurveSet")) {
    return refused;
  }
  auto answer = [&]() -> absl::StatusOr<v1::PromoteEnergyCurveSetResponse> {
    if (request->rollback() == !request->version().empty()) {
      return absl::InvalidArgumentError(
          "set exactly one of version (e.g. ec-2) and rollback");
    }
    RETURN_IF_ERROR(CheckLength(request->version(), "version", 64));
    // Under refit_mu_ like an energy refit, so SyncWithStore never
    // reinstalls the curves this replaces.
    absl::MutexLock lock(&refit_mu_);
    std::string previous;
    {
      absl::MutexLock energy_lock(&mu_);
      if (energy_ != nullptr) previous = energy_->version();
    }
    std::string target = request->version();
    if (request->rollback()) {
      ASSIGN_OR_RETURN(std::vector<std::string> history,
                       store_->EnergyCurveHistory());
      ASSIGN_OR_RETURN(target,
                       RollbackTarget(history, previous, "energy curve set"));
    }
    ASSIGN_OR_RETURN(v1::EnergyCurveSet set, store_->GetEnergyCurveSet(target));
    RETURN_IF_ERROR(store_->SetCurrentEnergyCurveSet(target));
    SetEnergyCurves(std::make_shared<const v1::EnergyCurveSet>(std::move(set)));
    spdlog::info(
        "event=energy_curves_promoted version={} previous={} rollback={}",
        target, previous, request->rollback());
    v1::PromoteEnergyCurveSetResponse out;
    out.set_current_version(target);
    out.set_previous_version(previous);
    return out;
  }();
  return Reply(context->DefaultReactor(), std::move(answer), response);
}

std::string PlannerService::CalibrationHtml(bool include_simulated) const {
  const std::shared_ptr<const FitPlanner> current = planner();
  const v1::FactorSet& set = current->factor_set();
  absl::StatusOr<std::vector<v1::MeasuredRun>> runs = store_->ListRuns();
  if (!runs.ok()) {
    return absl::StrCat("<p>cannot read stored runs: ", runs.status().message(),
                        "</p>");
  }
  const Predictions predictions = PredictRuns(*runs, *catalog_, set.factors());
  return headroom::CalibrationHtml(set, *runs, predictions, include_simulated);
}

grpc::ServerUnaryReactor* PlannerService::PlanMicrobatch(
    grpc::CallbackServerContext* context,
    const v1::PlanMicrobatchRequest* request,
    v1::PlanMicrobatchResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/PlanMicrobatch")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status size = CheckSize(*request, options_.max_request_bytes);
      !size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  // An inline spec is imported (validated, profiled per candidate) on the
  // import pool, as CheckFit's are.
  if (request->model_case() == v1::PlanMicrobatchRequest::kSpec) {
    return DeferImport(reactor, [this, reactor, request, response] {
      AnswerPlanMicrobatch(reactor, request, response);
    });
  }
  AnswerPlanMicrobatch(reactor, request, response);
  return reactor;
}

void PlannerService::AnswerPlanMicrobatch(
    grpc::ServerUnaryReactor* reactor, const v1::PlanMicrobatchRequest* request,
    v1::PlanMicrobatchResponse* response) {
  const std::shared_ptr<const FitPlanner> current = planner();
  absl::StatusOr<v1::PlanMicrobatchResponse> answer =
      headroom::PlanMicrobatch(*request, *catalog_, current->factor_set());
  if (answer.ok() && request->has_cache_key()) {
    // A record under exactly this key (GPU, versions, settings, source)
    // stands: nothing needs measuring.
    absl::StatusOr<std::optional<v1::AutotuneRecord>> cached =
        store_->FindAutotuneRecord(CacheKeyId(request->cache_key()),
                                   CacheKeyBytes(request->cache_key()));
    if (!cached.ok()) {
      answer = cached.status();
    } else if (cached->has_value()) {
      v1::AutotuneRecord& record = **cached;
      record.set_cache_reused(true);
      *answer->mutable_cached() = std::move(record);
      for (v1::PlannedMicrobatch& planned : *answer->mutable_candidates()) {
        planned.set_action(v1::PlannedMicrobatch::SKIP);
        planned.set_reason(absl::StrCat(
            "cached selection ", CacheKeyId(request->cache_key()), " reused"));
      }
      answer->set_skip_count(answer->candidates_size());
      answer->set_measure_count(0);
    }
  }
  Reply(reactor, std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::PutAutotuneRecord(
    grpc::CallbackServerContext* context,
    const v1::PutAutotuneRecordRequest* request,
    v1::PutAutotuneRecordResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/PutAutotuneRecord")) {
    return refused;
  }
  auto answer = [&]() -> absl::StatusOr<v1::PutAutotuneRecordResponse> {
    RETURN_IF_ERROR(CheckSize(*request, options_.max_request_bytes));
    if (request->force() && !CallerIsAdmin(options_.access.get(), context)) {
      return absl::PermissionDeniedError(
          "force replaces a worker-measured record; only an admin may set it");
    }
    if (!request->record().has_cache_key()) {
      return absl::InvalidArgumentError(
          "record.cache_key is missing; a cached selection needs the key it "
          "was measured under");
    }
    v1::AutotuneRecord record = request->record();
    // Only the planner says a worker measured a record.
    record.clear_measured_by_probe();
    if (!record.has_selected() || record.selected().microbatch() == 0) {
      return absl::InvalidArgumentError(
          "record.selected is missing; only a record with a selection can be "
          "reused");
    }
    RETURN_IF_ERROR(CheckCacheableRecord(record));
    v1::PutAutotuneRecordResponse out;
    out.set_id(CacheKeyId(record.cache_key()));
    const std::string key_bytes = CacheKeyBytes(record.cache_key());
    ASSIGN_OR_RETURN(std::optional<v1::AutotuneRecord> stored,
                     store_->FindAutotuneRecord(out.id(), key_bytes));
    if (stored.has_value() && !stored->measured_by_probe().empty() &&
        !request->force()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the record stored under ", out.id(), " was measured by probe ",
          stored->measured_by_probe(),
          " on a worker; it is replaced only with force (admins only)"));
    }
    ASSIGN_OR_RETURN(bool replaced,
                     store_->PutAutotuneRecord(out.id(), key_bytes, record));
    out.set_replaced(replaced);
    spdlog::info("event=autotune_record_stored id={} replaced={} forced={}",
                 out.id(), replaced, request->force());
    return out;
  }();
  return Reply(context->DefaultReactor(), std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::ListAutotuneRecords(
    grpc::CallbackServerContext* context,
    const v1::ListAutotuneRecordsRequest* request,
    v1::ListAutotuneRecordsResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/ListAutotuneRecords")) {
    return refused;
  }
  auto answer = [&]() -> absl::StatusOr<v1::ListAutotuneRecordsResponse> {
    const size_t budget = PageBytes(options_.max_request_bytes);
    ASSIGN_OR_RETURN(const PageSpec spec,
                     PageFromRequest("autotune_records", request->page_size(),
                                     request->page_token(), budget));
    ASSIGN_OR_RETURN(Page<v1::AutotuneCacheEntry> entries,
                     store_->ListAutotuneRecords(spec));
    v1::ListAutotuneRecordsResponse out;
    out.set_next_page_token(
        NextPageToken("autotune_records", entries.next_after));
    for (v1::AutotuneCacheEntry& e : entries.entries) {
      BoundEntry(&e, budget);
      *out.add_entries() = std::move(e);
    }
    return out;
  }();
  return Reply(context->DefaultReactor(), std::move(answer), response);
}

grpc::ServerUnaryReactor* PlannerService::DropAutotuneRecord(
    grpc::CallbackServerContext* context,
    const v1::DropAutotuneRecordRequest* request,
    v1::DropAutotuneRecordResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Planner/DropAutotuneRecord")) {
    return refused;
  }
  auto answer = [&]() -> absl::StatusOr<v1::DropAutotuneRecordResponse> {
    if (request->id().empty() || request->id().size() > 64) {
      return absl::InvalidArgumentError(
          "id must be 1..64 characters (an id from ListAutotuneRecords)");
    }
    RETURN_IF_ERROR(store_->DropAutotuneRecord(request->id()));
    spdlog::info("event=autotune_record_dropped id={}", request->id());
    return v1::DropAutotuneRecordResponse();
  }();
  return Reply(context->DefaultReactor(), std::move(answer), response);
}

}  // namespace headroom
