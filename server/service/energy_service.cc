#include "server/service/energy_service.h"

#include <algorithm>

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
      ASSIGN_OR_RETURN(
          v1::RefitEnergyResponse refit,
          headroom::RefitEnergy(
              *base, *request,
              absl::StrCat(request->runs_size(), " measured energy runs")));
      // Under refit_mu_ like a factor-set change, so SyncWithStore never
      // reinstalls the curves this replaces.
      absl::MutexLock refit_lock(state_.refit_mu());
      ASSIGN_OR_RETURN(
          v1::EnergyCurveSet stored,
          state_.store()->AddEnergyCurveSet(refit.curve_set(), true));
      spdlog::info("event=energy_refit version={} runs={}", stored.version(),
                   request->runs_size());
      *refit.mutable_curve_set() = stored;
      state_.SetEnergyCurves(
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
