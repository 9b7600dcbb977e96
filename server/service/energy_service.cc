#include "server/service/energy_service.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "core/calibration/promotion.h"
#include "core/energy/energy_curves.h"
#include "core/energy/energy_refit.h"
#include "core/energy/train_energy.h"
#include "core/memory/fit_verdict.h"
#include "core/planner/fit_planner.h"
#include "pages/energy_plot.h"
#include "server/service/fleet/dispatch.h"
#include "server/service/grpc_status.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// Stored energy runs one refit reads at most.
constexpr int kMaxRefitRuns = 100000;

}  // namespace

EnergyService::EnergyService(PlannerState* state,
                             std::unique_ptr<EnergyPointSource> points)
    : state_(*state),
      points_(points != nullptr
                  ? std::move(points)
                  : std::make_unique<StoredCurveSetPoints>(state->store())) {}

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
                          PageBytes(state_.service().max_request_bytes)));
      const std::string& after = spec.after;
      // Bounded by count only: the reply holds summaries, not the sets.
      PageSpec sets_spec;
      sets_spec.after = after;
      sets_spec.max_entries = spec.max_entries;
      absl::StatusOr<Page<v1::EnergyCurveSet>> sets =
          state_.store()->ListEnergyCurveSets(sets_spec);
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
      for (const v1::EnergyCurveSet& set : sets->entries) {
        *out.add_curve_sets() = SummaryOf(set, current);
      }
      if (!sets->next_after.empty()) {
        out.set_next_page_token(
            NextPageToken("energy_curve_sets", sets->next_after));
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

namespace {

// Cuda probes looked at for a card's J/TFLOP: the newest succeeded ones.
constexpr int kCudaProbesRead = 200;

absl::StatusOr<v1::ModelRef> ModelRefOf(const v1::TrainEnergyRequest& r) {
  v1::ModelRef ref;
  switch (r.model_case()) {
    case v1::TrainEnergyRequest::kTemplate:
      ref.set_template_(r.template_());
      break;
    case v1::TrainEnergyRequest::kSpec:
      *ref.mutable_spec() = r.spec();
      break;
    case v1::TrainEnergyRequest::kHfConfig:
      ref.set_hf_config(r.hf_config());
      break;
    case v1::TrainEnergyRequest::kOnnx:
      ref.set_onnx(r.onnx());
      break;
    case v1::TrainEnergyRequest::MODEL_NOT_SET:
      return absl::InvalidArgumentError(
          "model is required: set template, spec, hf_config or onnx");
  }
  return ref;
}

// "p-12" of a run's source "probe p-12 repetition 0"; empty otherwise.
std::string ProbeIdOf(const v1::MeasuredRun& run) {
  const std::string prefix = "probe ";
  if (run.source().rfind(prefix, 0) != 0) return "";
  const std::string rest = run.source().substr(prefix.size());
  return rest.substr(0, rest.find(' '));
}

}  // namespace

absl::StatusOr<v1::TrainEnergyResponse> EnergyService::AnswerTrainEnergy(
    const v1::TrainEnergyRequest& request) const {
  if (request.batch() == 0 || request.batch() > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch = ", request.batch(),
                     " is out of range; allowed 1..", kMaxBatch));
  }
  if (request.gpu().empty()) {
    return absl::InvalidArgumentError(
        "gpu is required: a catalog GPU name (see headroom gpus)");
  }
  RETURN_IF_ERROR(CheckLength(request.gpu(), "gpu", 128));
  ASSIGN_OR_RETURN(const GpuInfo gpu, FindGpu(request.gpu()));
  ASSIGN_OR_RETURN(v1::ModelRef ref, ModelRefOf(request));
  const PlannerState::Answering from = state_.answering();
  // The key as CheckFit computes it (and its validation of the setup).
  v1::CheckFitRequest fit;
  *fit.mutable_model() = ref;
  *fit.mutable_setup() = request.setup();
  fit.add_batches(request.batch());
  fit.add_targets()->set_gpu(gpu.name);
  ASSIGN_OR_RETURN(const ModelKey key, from.planner->KeyOf(fit));
  ASSIGN_OR_RETURN(ResolvedModel model,
                   ResolveModelRef(ref, request.setup(), *state_.catalog()));

  TrainEnergyQuestion question;
  question.model_key = key.id;
  question.gpu = gpu.name;
  question.batch = request.batch();
  question.flops = FlopsPerStep(model.spec(), request.setup(), request.batch());

  // Measured: the runs of this key (every source's, as anchored fit
  // answers group them) on this card with energy over their timed steps,
  // divided by the steps their probe ran; real runs when there are any,
  // else simulated ones when asked for.
  std::vector<const Anchor*> anchors;
  if (from.evidence != nullptr) anchors = from.evidence->FindAll(key);
  int without_probe = 0;
  std::map<std::string, uint32_t> steps_of_probe;
  std::vector<TrainEnergyRun> real, simulated;
  for (const Anchor* anchor : anchors) {
    const bool sim = anchor->source == v1::SIM;
    if (sim && !request.include_simulated()) continue;
    for (size_t i : anchor->group.runs) {
      const v1::MeasuredRun& run = from.evidence->run(i);
      if (run.gpu() != gpu.name || !run.has_energy_j() ||
          !(run.energy_j() > 0) || !run.has_measured_peak_gb() ||
          !run.excluded().empty() ||
          (run.simulated() && !request.include_simulated())) {
        continue;
      }
      const std::string probe_id = ProbeIdOf(run);
      auto it = steps_of_probe.find(probe_id);
      if (it == steps_of_probe.end()) {
        absl::StatusOr<v1::Probe> probe =
            probe_id.empty() ? absl::NotFoundError("no probe")
                             : state_.store()->GetProbe(probe_id);
        if (!probe.ok()) {
          ++without_probe;
          continue;
        }
        const uint32_t steps = probe->request().steps() == 0
                                   ? kDefaultProbeSteps
                                   : probe->request().steps();
        it = steps_of_probe.emplace(probe_id, steps).first;
      }
      TrainEnergyRun measured;
      measured.batch = static_cast<uint32_t>(run.batch());
      measured.joules_per_step = run.energy_j() / it->second;
      measured.worker = run.worker();
      measured.simulated = sim || run.simulated();
      (measured.simulated ? simulated : real).push_back(std::move(measured));
    }
  }
  question.runs = real.empty() ? std::move(simulated) : std::move(real);
  if (!question.runs.empty() || without_probe > 0) {
    question.steps_source = absl::StrCat(
        "energy_j over each run's timed steps, divided by its probe's steps "
        "(request.steps, 0 = ",
        kDefaultProbeSteps, ")",
        without_probe > 0
            ? absl::StrCat("; ", without_probe,
                           " runs with energy but no stored probe left out")
            : "");
  }

  // J/TFLOP: the cuda probes measured on this card, else the datasheet.
  std::vector<CudaProbeEnergy> probes;
  ASSIGN_OR_RETURN(
      std::vector<v1::Probe> succeeded,
      state_.store()->ListProbes(v1::Probe::SUCCEEDED, kCudaProbesRead));
  for (const v1::Probe& probe : succeeded) {
    if (probe.request().executor() != "cuda" || probe.gpu() != gpu.name) {
      continue;
    }
    if (std::optional<double> j = GemmJoulesPerTflopOf(probe.details_json())) {
      probes.push_back({probe.id(), probe.worker(), *j});
    }
  }
  if (std::optional<JoulesPerTflop> measured =
          MeasuredJoulesPerTflop(probes, gpu.name)) {
    question.j_per_tflop = *measured;
  } else {
    absl::StatusOr<JoulesPerTflop> datasheet = DatasheetJoulesPerTflop(gpu);
    if (!datasheet.ok() && question.runs.empty()) return datasheet.status();
    if (datasheet.ok()) {
      question.j_per_tflop = *datasheet;
    } else {
      question.j_per_tflop.source = std::string(datasheet.status().message());
    }
  }
  return headroom::AnswerTrainEnergy(question);
}

grpc::ServerUnaryReactor* EnergyService::TrainEnergy(
    grpc::CallbackServerContext* context, const v1::TrainEnergyRequest* request,
    v1::TrainEnergyResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Energy/TrainEnergy")) {
    return refused;
  }
  if (auto* refused = RefuseOversized(context, *request,
                                      state_.service().max_request_bytes)) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto job = [this, reactor, request, response] {
    Reply(reactor, AnswerTrainEnergy(*request), response);
  };
  // Store reads either way; an import (HF config, ONNX, a large spec) on
  // the import pool, so it never delays the store executor's jobs.
  absl::StatusOr<v1::ModelRef> ref = ModelRefOf(*request);
  if (ref.ok() && ImportsModel(*ref)) {
    return state_.DeferImport(reactor, job, request->ByteSizeLong());
  }
  return state_.DeferStore(reactor, job);
}

absl::StatusOr<v1::PlotEnergyResponse> EnergyService::Plot(
    const v1::PlotEnergyRequest& request) const {
  RETURN_IF_ERROR(CheckLength(request.arch(), "arch", 64));
  if (request.arch().empty()) {
    return absl::InvalidArgumentError("arch is required, e.g. ampere");
  }
  const std::shared_ptr<const v1::EnergyCurveSet> curves = state_.energy();
  if (curves == nullptr) {
    return absl::FailedPreconditionError("no energy curves are loaded");
  }
  ASSIGN_OR_RETURN(std::vector<MeasuredEnergyPoint> points,
                   points_->Points(request.include_simulated()));
  ASSIGN_OR_RETURN(std::string svg,
                   EnergyPlotSvg(*curves, request.arch(), points));
  v1::PlotEnergyResponse out;
  out.set_svg(std::move(svg));
  out.set_curves_version(curves->version());
  out.set_points(CountDrawnPoints(*curves, request.arch(), points));
  return out;
}

grpc::ServerUnaryReactor* EnergyService::PlotEnergy(
    grpc::CallbackServerContext* context, const v1::PlotEnergyRequest* request,
    v1::PlotEnergyResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Energy/PlotEnergy")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, reactor, request, response] {
    Reply(reactor, Plot(*request), response);
  });
}

absl::StatusOr<std::string> EnergyService::EnergyHtml(
    const HttpServer::Query& query) const {
  const std::shared_ptr<const v1::EnergyCurveSet> curves = state_.energy();
  if (curves == nullptr) return "<p>no energy curves are loaded</p>";
  auto simulated = query.find("include_simulated");
  const bool include_simulated =
      simulated != query.end() &&
      (simulated->second == "1" || simulated->second == "true");
  // Every architecture a query may name, those borrowing curves too: an
  // architecture without measurements says so rather than being left out.
  const std::vector<std::string> known = KnownArchs(*curves);
  std::vector<std::string> archs = known;
  if (auto it = query.find("arch"); it != query.end() && !it->second.empty()) {
    const std::string arch = absl::AsciiStrToLower(it->second.substr(0, 64));
    if (std::find(known.begin(), known.end(), arch) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("arch = '", it->second.substr(0, 64),
                       "' is not an architecture of the energy curves; "
                       "allowed ",
                       absl::StrJoin(known, ", ")));
    }
    archs = {arch};
  }
  std::string html = absl::StrCat(
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>Headroom "
      "energy</title></head><body style=\"font-family:sans-serif\">"
      "<h1>Energy per generated token vs fp16</h1><p>curves ",
      EscapeHtml(curves->version()), "; architectures: ");
  std::vector<std::string> links;
  for (const std::string& arch : known) {
    links.push_back(absl::StrCat("<a href=\"/energy?arch=", EscapeHtml(arch),
                                 "\">", EscapeHtml(arch), "</a>"));
  }
  absl::StrAppend(&html, absl::StrJoin(links, ", "),
                  " (<a href=\"/energy?include_simulated=1\">with simulated "
                  "points</a>)</p>\n");
  absl::StatusOr<std::vector<MeasuredEnergyPoint>> points =
      points_->Points(include_simulated);
  if (!points.ok()) {
    absl::StrAppend(&html, "<p>cannot read measured points: ",
                    EscapeHtml(std::string(points.status().message())),
                    "</p>\n");
    points = std::vector<MeasuredEnergyPoint>{};
  }
  for (const std::string& arch : archs) {
    if (const std::string notice = BorrowedCurveNotice(*curves, arch, *points);
        !notice.empty()) {
      absl::StrAppend(&html, "<p>", EscapeHtml(notice), "</p>\n");
    }
    absl::StatusOr<std::string> svg = EnergyPlotSvg(*curves, arch, *points);
    if (!svg.ok()) {
      absl::StrAppend(&html, "<p>",
                      EscapeHtml(std::string(svg.status().message())),
                      "</p>\n");
      continue;
    }
    absl::StrAppend(&html, "<div>", *svg, "</div>\n");
  }
  absl::StrAppend(&html, "</body></html>\n");
  return html;
}

}  // namespace headroom
