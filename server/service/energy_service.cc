#include "server/service/energy_service.h"

#include <algorithm>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "server/core/calibration/promotion.h"
#include "server/core/common/input_limits.h"
#include "server/core/common/status_macros.h"
#include "server/core/energy/energy_curves.h"
#include "server/core/energy/energy_refit.h"
#include "server/service/grpc_status.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// Stored energy runs one refit reads at most.
constexpr int kMaxRefitRuns = 100000;

}  // namespace

grpc::ServerUnaryReactor* EnergyService::EstimateEnergy(
    grpc::CallbackServerContext* context,
    const v1::EstimateEnergyRequest* request,
    v1::EstimateEnergyResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Energy/EstimateEnergy")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  std::shared_ptr<const v1::EnergyCurveSet> curves;
  curves = state_.energy();
  if (curves == nullptr) {
    reactor->Finish(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                 "no energy curves are loaded"));
    return reactor;
  }
  absl::StatusOr<v1::EstimateEnergyResponse> answer =
      headroom::EstimateEnergy(*curves, *request);
  return Reply(reactor, std::move(answer), response);
}

grpc::ServerUnaryReactor* EnergyService::RefitEnergy(
    grpc::CallbackServerContext* context, const v1::RefitEnergyRequest* request,
    v1::RefitEnergyResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Energy/RefitEnergy")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferRefit(reactor, [this, reactor, request, response] {
    auto answer = [&]() -> absl::StatusOr<v1::RefitEnergyResponse> {
      std::shared_ptr<const v1::EnergyCurveSet> base;
      base = state_.energy();
      if (base == nullptr) {
        return absl::FailedPreconditionError("no energy curves are loaded");
      }
      if (!request->stored() && request->include_simulated()) {
        return absl::InvalidArgumentError(
            "include_simulated needs stored (it says which stored runs to "
            "use)");
      }
      // The request's runs, then (stored) the planner's own.
      v1::RefitEnergyRequest runs = *request;
      int stored_runs = 0;
      int64_t simulated_excluded = 0;
      if (request->stored()) {
        ASSIGN_OR_RETURN(std::vector<v1::EnergyRun> stored,
                         state_.store()->ListEnergyRuns(
                             request->include_simulated(), kMaxRefitRuns));
        ASSIGN_OR_RETURN(const auto counts, state_.store()->CountEnergyRuns());
        if (!request->include_simulated()) simulated_excluded = counts.second;
        // A quantized window whose fp16 partner failed (or is not stored
        // yet) has nothing to be compared with: left out, not an error.
        std::set<std::tuple<std::string, std::string, double>> fp16;
        for (const v1::EnergyRun& run : stored) {
          if (run.quant() == "fp16") {
            fp16.insert({run.gpu(), run.model(), run.params_b()});
          }
        }
        for (v1::EnergyRun& run : stored) {
          if (run.quant() != "fp16" &&
              fp16.count({run.gpu(), run.model(), run.params_b()}) == 0) {
            continue;
          }
          ++stored_runs;
          *runs.add_runs() = std::move(run);
        }
      }
      if (runs.runs().empty() && request->stored()) {
        return absl::FailedPreconditionError(
            absl::StrCat("no stored energy runs to refit from",
                         simulated_excluded > 0
                             ? absl::StrCat(" (", simulated_excluded,
                                            " simulated runs left out: pass "
                                            "include_simulated to use them)")
                             : " (submit energy probes first)",
                         "; the current curves ", base->version(), " stay"));
      }
      ASSIGN_OR_RETURN(
          v1::RefitEnergyResponse refit,
          headroom::RefitEnergy(
              *base, runs,
              absl::StrCat(request->runs_size(), " energy runs of the request",
                           request->stored()
                               ? absl::StrCat(" and ", stored_runs, " stored",
                                              request->include_simulated()
                                                  ? " (simulated included)"
                                                  : " (simulated left out)")
                               : "")));
      const EnergyPromotion decision =
          DecideEnergyPromotion(refit, request->force());
      // Under refit_mu_ like a factor-set change, so SyncWithStore never
      // reinstalls the curves this replaces.
      absl::MutexLock refit_lock(state_.refit_mu());
      ASSIGN_OR_RETURN(v1::EnergyCurveSet stored,
                       state_.store()->AddEnergyCurveSet(refit.curve_set(),
                                                         decision.promote));
      spdlog::info(
          "event=energy_refit version={} runs={} stored_runs={} promoted={} "
          "reason=\"{}\"",
          stored.version(), runs.runs_size(), stored_runs, decision.promote,
          decision.reason);
      *refit.mutable_curve_set() = stored;
      refit.set_promoted(decision.promote);
      refit.set_promotion_reason(decision.reason);
      refit.set_request_runs(request->runs_size());
      refit.set_stored_runs(stored_runs);
      refit.set_simulated_runs_excluded(static_cast<int>(simulated_excluded));
      if (decision.promote) {
        refit.set_current_version(stored.version());
        state_.SetEnergyCurves(
            std::make_shared<const v1::EnergyCurveSet>(std::move(stored)));
      } else {
        refit.set_current_version(base->version());
      }
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

grpc::ServerUnaryReactor* EnergyService::ListEnergyCurveSets(
    grpc::CallbackServerContext* context,
    const v1::ListEnergyCurveSetsRequest* request,
    v1::ListEnergyCurveSetsResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Energy/ListEnergyCurveSets")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::ListEnergyCurveSetsResponse> {
      // The same page size and token rules as every List RPC (paging.h); a
      // page of summaries stays far under the byte budget.
      ASSIGN_OR_RETURN(
          const PageSpec spec,
          PageFromRequest("energy_curve_sets", request->page_size(),
                          request->page_token(),
                          PageBytes(state_.options().max_request_bytes)));
      const std::string& after = spec.after;
      const int page_size = spec.max_entries;
      // One more than the page: whether another page follows.
      absl::StatusOr<std::vector<v1::EnergyCurveSet>> sets =
          state_.store()->ListEnergyCurveSets(after, page_size + 1);
      if (absl::IsNotFound(sets.status())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "page_token names energy curve set '", Echo(after),
            "', which is not stored; start again with an empty page_token"));
      }
      RETURN_IF_ERROR(sets.status());
      std::string current;
      if (const auto energy = state_.energy(); energy != nullptr) {
        current = energy->version();
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
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* EnergyService::PromoteEnergyCurveSet(
    grpc::CallbackServerContext* context,
    const v1::PromoteEnergyCurveSetRequest* request,
    v1::PromoteEnergyCurveSetResponse* response) {
  if (auto* refused =
          RefuseUnary(state_.access(), context,
                      "/headroom.v1.Energy/PromoteEnergyCurveSet")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::PromoteEnergyCurveSetResponse> {
      if (request->rollback() == !request->version().empty()) {
        return absl::InvalidArgumentError(
            "set exactly one of version (e.g. ec-2) and rollback");
      }
      RETURN_IF_ERROR(CheckLength(request->version(), "version", 64));
      // Under refit_mu_ like an energy refit, so SyncWithStore never
      // reinstalls the curves this replaces.
      absl::MutexLock lock(state_.refit_mu());
      std::string previous;
      if (const auto energy = state_.energy(); energy != nullptr) {
        previous = energy->version();
      }
      std::string target = request->version();
      if (request->rollback()) {
        ASSIGN_OR_RETURN(std::vector<std::string> history,
                         state_.store()->EnergyCurveHistory());
        ASSIGN_OR_RETURN(target,
                         RollbackTarget(history, previous, "energy curve set"));
      }
      ASSIGN_OR_RETURN(v1::EnergyCurveSet set,
                       state_.store()->GetEnergyCurveSet(target));
      RETURN_IF_ERROR(state_.store()->SetCurrentEnergyCurveSet(target));
      state_.SetEnergyCurves(
          std::make_shared<const v1::EnergyCurveSet>(std::move(set)));
      spdlog::info(
          "event=energy_curves_promoted version={} previous={} rollback={}",
          target, previous, request->rollback());
      v1::PromoteEnergyCurveSetResponse out;
      out.set_current_version(target);
      out.set_previous_version(previous);
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

}  // namespace headroom
