#include "server/service/calibration_service.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/deterministic_bytes.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "core/calibration/calibrate.h"
#include "core/calibration/fit_inputs.h"
#include "core/calibration/promotion.h"
#include "pages/calibration_plot.h"
#include "server/service/grpc_status.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {

grpc::ServerUnaryReactor* CalibrationService::GetCalibration(
    grpc::CallbackServerContext* context,
    const v1::GetCalibrationRequest* request,
    v1::GetCalibrationResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Calibration/GetCalibration")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (request->version().empty()) {
    *response->mutable_factor_set() = state_.planner()->factor_set();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  if (request->version().size() > 64) {
    reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "version is longer than 64 characters; "
                                 "factor-set versions look like fs-1"));
    return reactor;
  }
  // A stored set is read on the store executor.
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    absl::StatusOr<v1::FactorSet> set =
        state_.store()->GetFactorSet(request->version());
    if (!set.ok()) {
      reactor->Finish(ToGrpcStatus(set.status()));
      return;
    }
    *response->mutable_factor_set() = std::move(*set);
    reactor->Finish(grpc::Status::OK);
  });
}

absl::StatusOr<v1::RefitResponse> CalibrationService::RunRefit(
    const v1::RefitRequest& request, const std::function<bool()>& live) {
  absl::MutexLock lock(state_.refit_mu());
  std::vector<v1::MeasuredRun> imported(request.runs().begin(),
                                        request.runs().end());
  // Nothing is stored until every imported run is known to be usable.
  RETURN_IF_ERROR(ValidateRuns(imported, *state_.catalog()));
  StampRuns(*state_.catalog(), &imported);
  v1::RefitResponse response;
  ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> runs,
                   state_.store()->ListRuns());
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
                   state_.store()->CurrentFactorSet());
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
                   Calibrate(runs, *state_.catalog(), FitOptions{},
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
  if (state_.options().before_refit_commit)
    state_.options().before_refit_commit(live);
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
  if (!fresh.empty()) RETURN_IF_ERROR(state_.store()->AddRuns(fresh).status());
  ASSIGN_OR_RETURN(v1::FactorSet stored,
                   state_.store()->AddFactorSet(std::move(result.factor_set),
                                                decision.promote));
  response.set_stored(true);
  response.set_promoted(decision.promote);
  if (decision.promote) state_.Install(stored);
  spdlog::info(
      "event=refit version={} promoted={} runs={} imported={} seconds={:.3f} "
      "reason=\"{}\"",
      stored.version(), decision.promote, runs.size(), response.runs_imported(),
      response.fit_seconds(), decision.reason);
  *response.mutable_factor_set() = std::move(stored);
  return response;
}

grpc::ServerUnaryReactor* CalibrationService::Refit(
    grpc::CallbackServerContext* context, const v1::RefitRequest* request,
    v1::RefitResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Calibration/Refit")) {
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
  return state_.DeferRefit(
      reactor, [this, context, reactor, request, response] {
        const auto live = [context] {
          return !context->IsCancelled() &&
                 std::chrono::system_clock::now() < context->deadline();
        };
        Reply(reactor, RunRefit(*request, live), response);
      });
}

grpc::ServerUnaryReactor* CalibrationService::ListFactorSets(
    grpc::CallbackServerContext* context,
    const v1::ListFactorSetsRequest* request,
    v1::ListFactorSetsResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Calibration/ListFactorSets")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::ListFactorSetsResponse> {
      // The budget counts whole stored sets; their summaries are smaller.
      ASSIGN_OR_RETURN(
          const PageSpec spec,
          PageFromRequest("factor_sets", request->page_size(),
                          request->page_token(),
                          PageBytes(state_.service().max_request_bytes)));
      ASSIGN_OR_RETURN(Page<v1::FactorSet> sets,
                       state_.store()->ListFactorSets(spec));
      v1::ListFactorSetsResponse out;
      const std::string current = state_.planner()->factor_set().version();
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
          summary->set_heldout_said_fits_but_oom(
              it->second.said_fits_but_oom());
        }
        BoundEntry(summary, PageBytes(state_.service().max_request_bytes));
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* CalibrationService::PromoteFactorSet(
    grpc::CallbackServerContext* context,
    const v1::PromoteFactorSetRequest* request,
    v1::PromoteFactorSetResponse* response) {
  if (auto* refused =
          RefuseUnary(state_.access(), context,
                      "/headroom.v1.Calibration/PromoteFactorSet")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::PromoteFactorSetResponse> {
      absl::MutexLock lock(state_.refit_mu());
      if (request->rollback() == !request->version().empty()) {
        return absl::InvalidArgumentError(
            "set exactly one of version (e.g. fs-2) and rollback");
      }
      if (request->version().size() > 64) {
        return absl::InvalidArgumentError(
            "version is longer than 64 characters; versions look like fs-1");
      }
      const std::string previous = state_.planner()->factor_set().version();
      std::string target = request->version();
      if (request->rollback()) {
        ASSIGN_OR_RETURN(std::vector<std::string> history,
                         state_.store()->CurrentHistory());
        ASSIGN_OR_RETURN(target, RollbackTarget(history, previous));
      }
      ASSIGN_OR_RETURN(v1::FactorSet set, state_.store()->GetFactorSet(target));
      RETURN_IF_ERROR(state_.store()->SetCurrentFactorSet(target));
      state_.Install(set);
      spdlog::info(
          "event=factor_set_promoted version={} previous={} rollback={}",
          target, previous, request->rollback());
      v1::PromoteFactorSetResponse out;
      out.set_current_version(target);
      out.set_previous_version(previous);
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

std::string CalibrationService::CalibrationHtml(bool include_simulated) const {
  const std::shared_ptr<const FitPlanner> current = state_.planner();
  const v1::FactorSet& set = current->factor_set();
  absl::StatusOr<std::vector<v1::MeasuredRun>> runs =
      state_.store()->ListRuns();
  if (!runs.ok()) {
    return absl::StrCat("<p>cannot read stored runs: ", runs.status().message(),
                        "</p>");
  }
  const Predictions predictions =
      PredictRuns(*runs, *state_.catalog(), set.factors());
  return headroom::CalibrationHtml(set, *runs, predictions, include_simulated);
}

}  // namespace headroom
