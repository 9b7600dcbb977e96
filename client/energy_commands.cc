#include "client/energy_commands.h"

#include <cstdio>
#include <ctime>
#include <fstream>
#include <iomanip>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/json_io.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/commands.h"
#include "client/rpc.h"
#include "common/shipped_files.h"
#include "core/catalog/model_catalog.h"
#include "core/energy/energy_curves.h"
#include "core/energy/energy_points.h"
#include "core/energy/energy_refit.h"
#include "core/memory/model_spec.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "pages/energy_plot.h"

namespace headroom::cli {
namespace {

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string Signed(double value, int decimals) {
  return (value >= 0 ? "+" : "") + Fixed(value, decimals);
}

constexpr char kShippedCurves[] = "data/energy-curves.json";

absl::StatusOr<v1::EnergyCurveSet> LoadCurves(const EnergyOptions& options) {
  // The shipped file is found from any directory (FindShipped); a file
  // given with --curves is read as given.
  std::string path = options.curves;
  if (path.empty()) {
    path = FindShipped(kShippedCurves, "curves").value_or(kShippedCurves);
  }
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(
        absl::StrCat("cannot open the curves file ", path, " (pass --curves)"));
  }
  return ParseCurveSet(*text, path);
}

// The curves file belongs to --offline: the planner answers from its own.
int RefuseCurvesOnline(const EnergyOptions& options, std::ostream& err) {
  return Fail(err, absl::StrCat("--curves ", options.curves,
                                " needs --offline: the planner answers from "
                                "its own current curves"));
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream file(path, std::ios::binary);
  file << text;
  file.close();
  if (!file) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

std::string Optional(bool has, double value, int decimals) {
  return has ? Fixed(value, decimals) : "-";
}

}  // namespace

std::string EnergyAnswerJson(const v1::EstimateEnergyResponse& answer) {
  nlohmann::json json = CliJsonValue(answer);
  // The JSON mapping omits unset optional fields; the issue wants null.
  // Named as the mapping names them (the proto's json_name).
  const google::protobuf::Descriptor* d = answer.GetDescriptor();
  if (!answer.has_crossover_b()) {
    json[d->FindFieldByName("crossover_b")->json_name()] = nullptr;
  }
  if (!answer.has_borrowed_from()) {
    json[d->FindFieldByName("borrowed_from")->json_name()] = nullptr;
  }
  return json.dump(2);
}

void PrintEnergyAnswer(const v1::EstimateEnergyResponse& answer,
                       std::ostream& out) {
  const bool fp16 = answer.quant() == "fp16";
  out << answer.arch() << " " << answer.quant() << " at "
      << Fixed(answer.params_b(), 2) << "B";
  if (!answer.gpu().empty()) out << " (" << answer.gpu() << ")";
  out << "\n";
  if (answer.has_borrowed_from()) {
    out << "  borrowed: " << answer.arch() << " has no curve of its own; "
        << "using " << answer.borrowed_from() << "'s\n";
  }
  if (!fp16) {
    out << "  dE vs fp16      " << Signed(answer.de_pct(), 1) << " %  (band "
        << Signed(answer.de_low_pct(), 1) << " .. "
        << Signed(answer.de_high_pct(), 1) << " %, resid_std "
        << Fixed(answer.resid_std(), 2) << " pp)\n";
  }
  out << "  fp16            " << Fixed(answer.fp16_j_per_1k(), 0)
      << " J per 1k tokens (" << answer.fp16_basis();
  if (answer.fp16_rel_uncertainty() > 0) {
    out << ", +/- " << Fixed(100 * answer.fp16_rel_uncertainty(), 0) << " %";
  }
  out << ")\n";
  if (!fp16) {
    out << "  " << answer.quant()
        << std::string(16 - answer.quant().size(), ' ')
        << Fixed(answer.quant_j_per_1k(), 0) << " J per 1k tokens ("
        << Fixed(answer.quant_j_per_1k_low(), 0) << " .. "
        << Fixed(answer.quant_j_per_1k_high(), 0) << ")\n";
    out << "  crossover       ";
    if (answer.has_crossover_b()) {
      out << Fixed(answer.crossover_b(), 3) << "B (" << answer.quant()
          << (answer.params_b() >= answer.crossover_b() ? " saves" : " costs")
          << " energy at this size)\n";
    } else {
      out << "none (" << answer.quant()
          << (answer.de_pct() > 0 ? " costs" : " saves")
          << " energy at every size on this curve)\n";
    }
  }
  out << "  measured range  " << Fixed(answer.n_min(), 1) << " .. "
      << Fixed(answer.n_max(), 1) << "B";
  if (answer.extrapolated()) {
    out << "  EXTRAPOLATED: " << Fixed(answer.extrapolation_b(), 2)
        << "B outside (x" << Fixed(answer.extrapolation_ratio(), 2) << ")";
  }
  out << "\n";
  out << "  curves          " << answer.curves_version() << "\n";
  if (!answer.points_near_n().empty()) {
    out << "  points near N   " << answer.points_near_n() << " (nearest anchor "
        << Fixed(answer.nearest_anchor_b(), 2) << "B)\n";
  }
}

void PrintTrainEnergy(const v1::TrainEnergyResponse& answer,
                      std::ostream& out) {
  out << "training energy at batch " << answer.batch() << " on " << answer.gpu()
      << " (" << answer.tokens_per_step() << " tokens per step, "
      << Fixed(answer.step_tflop(), 3) << " TFLOP per step)\n";
  out << "  per step        " << Fixed(answer.answer().joules_per_step(), 2)
      << " J\n";
  out << "  per 1k tokens   "
      << Fixed(answer.answer().joules_per_1k_tokens(), 3) << " J\n";
  out << "  basis           " << answer.answer().basis() << "\n";
  if (answer.has_measured()) {
    out << "  compute model   "
        << Fixed(answer.compute_model().joules_per_step(), 2) << " J per step, "
        << Fixed(answer.compute_model().joules_per_1k_tokens(), 3)
        << " J per 1k tokens (" << answer.compute_model().basis() << ")\n";
  }
  out << "  model key       " << answer.model_key() << "\n";
}

void PrintRefit(const v1::RefitEnergyResponse& refit, std::ostream& out) {
  out << "curve            points        A        S     Nstar  resid_std "
         "(was)      loo_mae (was)    crossover  notes\n";
  for (const v1::CurveFitSummary& c : refit.curves()) {
    std::optional<double> crossover = CrossoverB(c.a(), c.s(), c.nstar());
    std::string notes;
    if (!c.refit()) notes = "carried over";
    if (c.nstar_at_edge()) notes += "Nstar at range edge ";
    if (c.s_at_zero()) notes += "S=0 ";
    if (c.saving_at_cap()) notes += "saving at s_cap ";
    char line[256];
    std::snprintf(
        line, sizeof(line),
        "%-16s %6d %8.3f %8.3f %9.4f %6.4f (%6s)  %6s (%6s)  %9s  "
        "%s\n",
        (c.arch() + " " + c.quant()).c_str(), c.points(), c.a(), c.s(),
        c.nstar(), c.resid_std(),
        Optional(c.has_previous_resid_std(), c.previous_resid_std(), 4).c_str(),
        Optional(c.has_loo_mae(), c.loo_mae(), 3).c_str(),
        Optional(c.has_previous_loo_mae(), c.previous_loo_mae(), 3).c_str(),
        crossover ? Fixed(*crossover, 3).c_str() : "none", notes.c_str());
    out << line;
    if (c.refit() && (c.has_heldout_mae() || c.has_current_heldout_mae())) {
      out << "  held out on the new points: "
          << Optional(c.has_heldout_mae(), c.heldout_mae(), 3)
          << " pp, current set "
          << Optional(c.has_current_heldout_mae(), c.current_heldout_mae(), 3)
          << " pp\n";
    }
  }
}

int EnergyEstimate(const Options& planner, const EnergyOptions& options,
                   std::ostream& out, std::ostream& err) {
  if (options.gpu.empty() == options.arch.empty()) {
    return Fail(err, "give exactly one of --gpu NAME or --arch ARCH");
  }
  if (options.quant.empty()) {
    return Fail(err, "--quant is required: fp16, nf4 or int8");
  }
  if (options.params_b == 0) {
    return Fail(err,
                "--params_b is required: the model's parameters in billions, "
                "e.g. --params_b 7");
  }
  double gb = 0;
  if (!options.gpu.empty() && absl::SimpleAtod(options.gpu, &gb)) {
    return Fail(err, absl::StrCat("--gpu ", options.gpu,
                                  ": energy needs a catalog GPU name (e.g. "
                                  "--gpu H100; see headroom gpus), not a size "
                                  "in GB; or give --arch"));
  }
  if (!options.offline && !options.curves.empty()) {
    return RefuseCurvesOnline(options, err);
  }
  v1::EstimateEnergyRequest request;
  request.set_params_b(options.params_b);
  if (!options.gpu.empty()) request.set_gpu(options.gpu);
  if (!options.arch.empty()) request.set_arch(options.arch);
  request.set_quant(options.quant);
  absl::StatusOr<v1::EstimateEnergyResponse> answer;
  if (options.offline) {
    absl::StatusOr<v1::EnergyCurveSet> set = LoadCurves(options);
    if (!set.ok()) return Fail(err, std::string(set.status().message()));
    answer = EstimateEnergy(*set, request);
    if (!answer.ok()) return Fail(err, std::string(answer.status().message()));
  } else {
    v1::EstimateEnergyResponse response;
    if (const int code = Call(planner, &v1::Energy::Stub::EstimateEnergy,
                              request, &response, err);
        code != kExitAnswer) {
      return code;
    }
    answer = std::move(response);
  }
  if (options.json) {
    out << EnergyAnswerJson(*answer) << "\n";
  } else {
    PrintEnergyAnswer(*answer, out);
  }
  return 0;
}

namespace {

// A refit short of points says where points come from.
std::string WithPointsHint(std::string message) {
  if (absl::StrContains(message, "needs at least")) {
    absl::StrAppend(
        &message,
        "; to get points: headroom energy probe --model MODEL --gpu GPU "
        "--quant fp16,nf4,int8 --watch stores one per quantization on the "
        "planner (then headroom energy refit --stored), or add energy runs "
        "(EnergyRun JSON lines, one per model size and quantization) to the "
        "--runs file");
  }
  return message;
}

}  // namespace

int EnergyRefit(const Options& planner, const EnergyOptions& options,
                std::ostream& out, std::ostream& err) {
  if (options.runs.empty() == !options.from_anchors) {
    return Fail(err, "give exactly one of --runs FILE or --from-anchors");
  }
  if (!options.offline && options.from_anchors) {
    return Fail(err,
                "--from-anchors needs --offline: it checks the fitter on a "
                "curves file's own anchors");
  }
  if (!options.offline && !options.curves.empty()) {
    return RefuseCurvesOnline(options, err);
  }
  v1::RefitEnergyRequest request;
  size_t run_count = 0;
  if (!options.from_anchors) {
    absl::StatusOr<std::string> text = ReadFile(options.runs);
    if (!text.ok()) return Fail(err, std::string(text.status().message()));
    absl::StatusOr<std::vector<v1::EnergyRun>> runs =
        ParseEnergyRunsJsonl(*text);
    if (!runs.ok()) {
      return Fail(err,
                  absl::StrCat(options.runs, ": ", runs.status().message()));
    }
    run_count = runs->size();
    for (const v1::EnergyRun& run : *runs) *request.add_runs() = run;
    request.set_subtract_idle(options.subtract_idle);
    request.set_merge_anchors(options.merge_anchors);
  }
  absl::StatusOr<v1::RefitEnergyResponse> refit;
  if (!options.offline) {
    v1::RefitEnergyResponse response;
    grpc::Status status = CallPlanner(planner, &v1::Energy::Stub::RefitEnergy,
                                      request, &response);
    if (!status.ok()) {
      return FailRpc(err, planner,
                     grpc::Status(status.error_code(),
                                  WithPointsHint(status.error_message())));
    }
    refit = std::move(response);
  } else {
    absl::StatusOr<v1::EnergyCurveSet> set = LoadCurves(options);
    if (!set.ok()) return Fail(err, std::string(set.status().message()));
    if (options.from_anchors) {
      refit = RefitFromAnchors(*set);
    } else {
      refit = RefitEnergy(
          *set, request,
          absl::StrCat(options.runs, " (", run_count, " runs",
                       options.subtract_idle ? ", idle subtracted" : "", ")"));
    }
    if (!refit.ok()) {
      return Fail(err, WithPointsHint(std::string(refit.status().message())));
    }
    // Offline there is no store to number versions.
    refit->mutable_curve_set()->set_version("local");
    refit->mutable_curve_set()->set_created_unix(
        static_cast<int64_t>(std::time(nullptr)));
  }
  if (!options.out.empty()) {
    const absl::Status written =
        WriteFile(options.out, ToJson(refit->curve_set(), /*pretty=*/true));
    if (!written.ok()) return Fail(err, std::string(written.message()), 1);
  }
  if (options.json) {
    out << CliJson(*refit) << "\n";
  } else {
    PrintRefit(*refit, out);
    if (!options.offline) {
      out << "stored as " << refit->curve_set().version() << " (current)\n";
    }
    if (!options.out.empty()) out << "wrote " << options.out << "\n";
  }
  return 0;
}

int EnergyPlot(const Options& planner, const EnergyOptions& options,
               std::ostream& out, std::ostream& err) {
  if (options.arch.empty()) return Fail(err, "--arch ARCH is required");
  if (!options.offline && (!options.curves.empty() || !options.runs.empty())) {
    return Fail(err,
                "--curves and --runs need --offline: the planner draws its "
                "own curves and stored points");
  }
  std::string svg;
  if (options.offline) {
    absl::StatusOr<v1::EnergyCurveSet> set = LoadCurves(options);
    if (!set.ok()) return Fail(err, std::string(set.status().message()));
    std::vector<MeasuredEnergyPoint> points;
    if (!options.runs.empty()) {
      absl::StatusOr<std::string> text = ReadFile(options.runs);
      if (!text.ok()) return Fail(err, std::string(text.status().message()));
      absl::StatusOr<std::vector<v1::EnergyRun>> runs =
          ParseEnergyRunsJsonl(*text);
      if (!runs.ok()) {
        return Fail(err,
                    absl::StrCat(options.runs, ": ", runs.status().message()));
      }
      // A runs file says neither worker nor date: the file names them.
      std::vector<EnergyRunRecord> records;
      for (const v1::EnergyRun& run : *runs) {
        // --include_simulated offline as through the planner: a simulated
        // run is drawn only when asked for.
        if (run.simulated() && !options.include_simulated) continue;
        EnergyRunRecord record;
        record.run = run;
        record.worker = options.runs;
        records.push_back(std::move(record));
      }
      points = PointsFromEnergyRuns(records, options.subtract_idle);
    }
    absl::StatusOr<std::string> drawn =
        EnergyPlotSvg(*set, options.arch, points);
    if (!drawn.ok()) return Fail(err, std::string(drawn.status().message()));
    svg = *std::move(drawn);
  } else {
    v1::PlotEnergyRequest request;
    request.set_arch(options.arch);
    request.set_include_simulated(options.include_simulated);
    v1::PlotEnergyResponse response;
    if (const int code = Call(planner, &v1::Energy::Stub::PlotEnergy, request,
                              &response, err);
        code != kExitAnswer) {
      return code;
    }
    svg = std::move(*response.mutable_svg());
  }
  if (options.svg.empty()) {
    out << svg;
    return 0;
  }
  const absl::Status written = WriteFile(options.svg, svg);
  if (!written.ok()) return Fail(err, std::string(written.message()), 1);
  out << "wrote " << options.svg << "\n";
  return 0;
}

int EnergyTrain(const Options& planner, std::ostream& out, std::ostream& err) {
  if (planner.batch.empty() || planner.batch.find(',') != std::string::npos) {
    return Fail(err, "--batch is required: one batch size, e.g. --batch 8");
  }
  if (planner.gpu.empty() || planner.gpu.find(',') != std::string::npos) {
    return Fail(err,
                "--gpu is required: one catalog GPU name, e.g. --gpu L4 (see "
                "headroom gpus)");
  }
  absl::StatusOr<v1::CheckFitRequest> fit = FitRequest(planner);
  if (!fit.ok()) return Fail(err, std::string(fit.status().message()));
  if (fit->targets_size() != 1 || !fit->targets(0).has_gpu()) {
    return Fail(err, absl::StrCat("--gpu ", planner.gpu,
                                  ": training energy needs a catalog GPU "
                                  "name, not a size in GB"));
  }
  v1::TrainEnergyRequest request;
  switch (fit->model().source_case()) {
    case v1::ModelRef::kTemplate:
      request.set_template_(fit->model().template_());
      break;
    case v1::ModelRef::kSpec:
      *request.mutable_spec() = fit->model().spec();
      break;
    case v1::ModelRef::kHfConfig:
      request.set_hf_config(fit->model().hf_config());
      break;
    case v1::ModelRef::kOnnx:
      request.set_onnx(fit->model().onnx());
      break;
    case v1::ModelRef::SOURCE_NOT_SET:
      return Fail(err, "give one model: --model or --onnx");
  }
  *request.mutable_setup() = fit->setup();
  request.set_batch(fit->batches(0));
  request.set_gpu(fit->targets(0).gpu());
  request.set_include_simulated(planner.include_simulated);
  v1::TrainEnergyResponse response;
  if (const int code = Call(planner, &v1::Energy::Stub::TrainEnergy, request,
                            &response, err);
      code != kExitAnswer) {
    return code;
  }
  if (planner.json) {
    out << CliJson(response) << "\n";
  } else {
    PrintTrainEnergy(response, out);
  }
  return 0;
}

int EnergyCurvesList(const Options& options, std::ostream& out,
                     std::ostream& err) {
  v1::ListEnergyCurveSetsResponse all;
  v1::ListEnergyCurveSetsRequest request;
  // Bounded: 10,000 pages of 500 sets.
  for (int page = 0; page < 10000; ++page) {
    v1::ListEnergyCurveSetsResponse response;
    if (const int code = Call(options, &v1::Energy::Stub::ListEnergyCurveSets,
                              request, &response, err);
        code != kExitAnswer) {
      return code;
    }
    all.set_current_version(response.current_version());
    for (v1::EnergyCurveSetSummary& s : *response.mutable_curve_sets()) {
      *all.add_curve_sets() = std::move(s);
    }
    if (response.next_page_token().empty()) break;
    request.set_page_token(response.next_page_token());
  }
  if (options.json) {
    out << CliJson(all) << "\n";
    return 0;
  }
  out << "  version  curves  max fp16 J/1k  trained_on\n";
  for (const v1::EnergyCurveSetSummary& s : all.curve_sets()) {
    out << (s.current() ? "* " : "  ") << std::left << std::setw(9)
        << s.version() << std::right << std::setw(6) << s.curves()
        << std::setw(15) << s.max_fp16_j_per_1k() << "  " << s.trained_on()
        << "\n";
  }
  return 0;
}

int EnergyCurvesPromote(const Options& options, bool rollback,
                        std::ostream& out, std::ostream& err) {
  if (!rollback && options.version.empty()) {
    return Fail(err, "--version is required, e.g. --version ec-2");
  }
  v1::PromoteEnergyCurveSetRequest request;
  request.set_rollback(rollback);
  if (!rollback) request.set_version(options.version);
  v1::PromoteEnergyCurveSetResponse response;
  if (const int code = Call(options, &v1::Energy::Stub::PromoteEnergyCurveSet,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  out << response.current_version() << " is now current (was "
      << response.previous_version() << ")\n";
  return 0;
}

int EnergyProbeSubmit(const Options& options, const ProbeOptions& probe,
                      const EnergyProbeOptions& energy, std::ostream& out,
                      std::ostream& err) {
  // The model and placement as `fit` reads them; generation runs at batch
  // 1, which no flag sets.
  Options model = options;
  model.batch = "1";
  absl::StatusOr<v1::CheckFitRequest> fit =
      FitRequest(model, /*require_targets=*/false);
  if (!fit.ok()) return Fail(err, std::string(fit.status().message()));
  v1::SubmitEnergyProbeRequest request;
  *request.mutable_model() = fit->model();
  absl::StatusOr<ProbePlacement> placement = PlacementOf(probe, *fit);
  if (!placement.ok()) {
    return Fail(err, std::string(placement.status().message()));
  }
  request.set_worker(placement->worker);
  request.set_gpu(placement->gpu);
  for (absl::string_view quant :
       absl::StrSplit(energy.quant, ',', absl::SkipWhitespace())) {
    request.add_quants(std::string(absl::StripAsciiWhitespace(quant)));
  }
  request.set_prompt_tokens(energy.prompt_tokens);
  request.set_new_tokens(energy.new_tokens);
  request.set_repetitions(probe.repetitions);
  request.set_executor(probe.executor);
  request.set_batch_timeout_s(energy.batch_timeout_s);
  request.set_expires_s(probe.expires_s);
  v1::SubmitProbeResponse response;
  if (const int code = Call(options, &v1::Fleet::Stub::SubmitEnergyProbe,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  const auto& plan = response.probe().request().energy();
  return AfterSubmit(options, probe, response,
                     absl::StrCat("energy probe ", response.probe().id(), " (",
                                  absl::StrJoin(plan.quants(), ","), ", ",
                                  plan.new_tokens(), " new tokens)"),
                     out, err);
}

int EnergyRefitStored(const Options& options, const EnergyOptions& energy,
                      std::ostream& out, std::ostream& err) {
  if (!energy.runs.empty() || energy.from_anchors) {
    return Fail(err,
                "--stored refits on the planner from its stored runs; "
                "--runs and --from_anchors refit a file offline (give one)");
  }
  v1::RefitEnergyRequest request;
  request.set_stored(true);
  request.set_include_simulated(energy.include_simulated);
  request.set_force(energy.force);
  request.set_subtract_idle(energy.subtract_idle);
  request.set_merge_anchors(energy.merge_anchors);
  v1::RefitEnergyResponse response;
  grpc::Status status =
      CallPlanner(options, &v1::Energy::Stub::RefitEnergy, request, &response);
  if (!status.ok()) {
    return FailRpc(err, options,
                   grpc::Status(status.error_code(),
                                WithPointsHint(status.error_message())));
  }
  if (options.json || energy.json) {
    out << CliJson(response) << "\n";
    return 0;
  }
  PrintRefit(response, out);
  out << "runs: " << response.stored_runs() << " stored";
  if (response.simulated_runs_excluded() > 0) {
    out << " (" << response.simulated_runs_excluded()
        << " simulated left out; --include_simulated uses them)";
  }
  out << "\n"
      << response.curve_set().version() << " stored; "
      << (response.promoted() ? "promoted: " : "not promoted: ")
      << response.promotion_reason() << "; current is "
      << response.current_version() << "\n";
  return 0;
}

namespace {

void AddEnergyCurves(CLI::App* app, EnergyOptions& energy) {
  app->add_flag("--offline", energy.offline,
                "compute here from a curves file instead of asking the "
                "planner");
  app->add_option("--curves", energy.curves,
                  "with --offline: the curve set file (default: the shipped "
                  "energy-curves.json)");
}

// --model NAME as billions of parameters: the catalog entry's count.
absl::StatusOr<double> CatalogParamsB(const std::string& models_dir,
                                      const std::string& name) {
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(models_dir);
  if (!catalog.ok()) return catalog.status();
  absl::StatusOr<const v1::ModelSpec*> spec = catalog->Find(name);
  if (!spec.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: ", spec.status().message(),
        "; energy takes a catalog name (see headroom models) or --params_b"));
  }
  return static_cast<double>(CountParams(**spec)) / 1e9;
}

// The flags of `headroom energy` and its subcommands.
struct EnergyFlags {
  EnergyOptions energy;
  EnergyProbeOptions energy_probe;
  ProbeOptions probe;
};

// `headroom energy probe`: queue an energy probe on a worker.
void RegisterEnergyProbeCommand(CLI::App* energy, CliContext& ctx,
                                EnergyFlags& f) {
  Options& o = ctx.options;
  CLI::App* energy_probe = ctx.Command(
      energy, "probe", "measure generation energy on a worker (queue a probe)");
  energy_probe->add_option("--model", o.model,
                           "catalog template, or a spec, config.json or ONNX "
                           "file");
  energy_probe->add_option("--gpu", o.gpu, "a catalog GPU kind, e.g. L4");
  energy_probe->add_option("--quant", f.energy_probe.quant,
                           "fp16,nf4,int8 (default: all three)");
  ShownDefault(
      energy_probe->add_option("--prompt_tokens", f.energy_probe.prompt_tokens,
                               "prompt length"),
      "64");
  ShownDefault(
      energy_probe->add_option("--new_tokens", f.energy_probe.new_tokens,
                               "tokens generated in the window"),
      "128");
  ShownDefault(energy_probe->add_option("--repetitions", f.probe.repetitions,
                                        "windows per quantization"),
               "1");
  ShownDefault(energy_probe->add_option("--batch_timeout_s",
                                        f.energy_probe.batch_timeout_s,
                                        "seconds per quantization"),
               "600");
  energy_probe->add_option("--worker", f.probe.worker, "run on this worker id");
  energy_probe->add_option("--executor", f.probe.executor,
                           "torch or sim (default: the worker's)");
  energy_probe->add_flag("--watch", f.probe.watch,
                         "follow the probe to its end (exit 1 if it fails)");
  energy_probe->add_option("--watch_timeout_s", f.probe.watch_timeout_s,
                           "longest wait in seconds");
  AddJson(energy_probe, o);
  ctx.Run(energy_probe, [&ctx, &f] {
    return EnergyProbeSubmit(ctx.options, f.probe, f.energy_probe, ctx.out,
                             ctx.err);
  });
}

}  // namespace

void RegisterEnergyCommands(CLI::App& app, CliContext& ctx) {
  EnergyFlags& f = ctx.Keep<EnergyFlags>();
  EnergyOptions& e = f.energy;
  Options& o = ctx.options;
  CLI::App* energy =
      ctx.Command(&app, "energy",
                  "energy per 1k tokens of a model on a GPU (the "
                  "planner's, or --offline), training energy, and "
                  "the server's curve sets");
  ShownDefault(energy->add_option("--params_b", e.params_b,
                                  "parameters in billions (or --model)"),
               "");
  energy->add_option("--model", o.model,
                     "a catalog template or full model (headroom models): "
                     "its parameter count as --params_b");
  energy->add_option("--gpu", e.gpu, "a catalog GPU name (headroom gpus)");
  energy->add_option("--arch", e.arch, "GPU architecture (instead of --gpu)");
  energy->add_option("--quant", e.quant, "fp16, nf4 or int8");
  AddEnergyCurves(energy, e);
  energy->add_flag("--json", e.json, "print JSON instead of a table");
  ctx.Run(energy, [&ctx, &e] {
    if (!ctx.options.model.empty()) {
      if (e.params_b != 0) {
        return Fail(ctx.err, "give one of --model or --params_b");
      }
      absl::StatusOr<double> params_b =
          CatalogParamsB(ctx.options.models_dir, ctx.options.model);
      if (!params_b.ok()) return Fail(ctx.err, params_b.status());
      e.params_b = *params_b;
    }
    return EnergyEstimate(ctx.options, e, ctx.out, ctx.err);
  });
  CLI::App* energy_refit = ctx.Command(energy, "refit", "refit the curve set");
  energy_refit->add_option("--runs", e.runs, "energy runs (JSON lines)");
  energy_refit->add_flag("--from_anchors", e.from_anchors,
                         "refit from the anchors");
  energy_refit->add_flag("--subtract_idle", e.subtract_idle,
                         "subtract idle power");
  energy_refit->add_flag("--merge_anchors", e.merge_anchors,
                         "keep existing anchors");
  energy_refit->add_option("--out", e.out, "write the new curve set here");
  energy_refit->add_flag("--stored", e.stored,
                         "refit on the planner from the energy runs it "
                         "stored (energy probes)");
  energy_refit->add_flag("--include_simulated", e.include_simulated,
                         "with --stored: use simulated runs too");
  energy_refit->add_flag("--force", e.force,
                         "with --stored: make the new set current even if "
                         "the promotion rule would keep the current one");
  AddEnergyCurves(energy_refit, e);
  energy_refit->add_flag("--json", e.json, "print JSON instead of a table");
  ctx.Run(energy_refit, [&ctx, &e] {
    if (e.stored) return EnergyRefitStored(ctx.options, e, ctx.out, ctx.err);
    if (e.include_simulated || e.force) {
      return Fail(ctx.err, "--include_simulated and --force need --stored");
    }
    return EnergyRefit(ctx.options, e, ctx.out, ctx.err);
  });
  RegisterEnergyProbeCommand(energy, ctx, f);
  CLI::App* energy_plot = ctx.Command(energy, "plot", "plot one architecture");
  energy_plot->add_option("--arch", e.arch, "GPU architecture");
  energy_plot->add_option("--svg", e.svg, "the SVG file to write");
  energy_plot->add_flag("--include_simulated", e.include_simulated,
                        "draw points measured on simulated GPUs too");
  energy_plot->add_option("--runs", e.runs,
                          "with --offline: energy runs (JSON lines) to draw");
  AddEnergyCurves(energy_plot, e);
  ctx.Run(energy_plot,
          [&ctx, &e] { return EnergyPlot(ctx.options, e, ctx.out, ctx.err); });
  CLI::App* energy_train = ctx.Command(
      energy, "train", "joules per training step and per 1k tokens");
  AddModelFlags(energy_train, o);
  energy_train->add_option("--batch", o.batch, "samples per step");
  energy_train->add_flag("--include_simulated", o.include_simulated,
                         "let runs measured on simulated GPUs answer");
  AddJson(energy_train, o);
  ctx.Run(energy_train,
          [&ctx] { return EnergyTrain(ctx.options, ctx.out, ctx.err); });
  CLI::App* curves = ctx.Command(energy, "curves", "the server's curve sets");
  AddJson(curves, o);
  ctx.Run(curves,
          [&ctx] { return EnergyCurvesList(ctx.options, ctx.out, ctx.err); });
  CLI::App* energy_promote =
      ctx.Command(energy, "promote", "make a curve set current");
  energy_promote->add_option("--version", o.version,
                             "curve-set version, e.g. ec-2");
  ctx.Run(energy_promote, [&ctx] {
    return EnergyCurvesPromote(ctx.options, false, ctx.out, ctx.err);
  });
  CLI::App* energy_rollback =
      ctx.Command(energy, "rollback", "make the previous curve set current");
  ctx.Run(energy_rollback, [&ctx] {
    return EnergyCurvesPromote(ctx.options, true, ctx.out, ctx.err);
  });
}

}  // namespace headroom::cli
