#include "client/commands.h"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "client/catalog_commands.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/fit_advice.h"
#include "client/fit_output.h"
#include "client/job_flags.h"
#include "client/model_commands.h"
#include "client/rpc.h"
#include "client/setup_flags.h"
#include "core/calibration/calibrate.h"
#include "core/calibration/evaluate.h"
#include "core/catalog/gpu_catalog.h"
#include "core/catalog/model_catalog.h"
#include "core/evidence/evidence.h"
#include "core/frontends/hf_config.h"
#include "core/frontends/onnx_import.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/memory/parallel.h"
#include "core/planner/fit_planner.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "io/published_runs.h"
#include "nlohmann/json.hpp"
#include "pages/calibration_plot.h"

namespace headroom::cli {

int Fail(std::ostream& err, const std::string& message, int code) {
  err << "headroom: " << message << "\n";
  return code;
}

int Fail(std::ostream& err, const absl::Status& status, int code) {
  return Fail(err, std::string(status.message()), code);
}

namespace {

// --include_simulated lets simulated runs anchor the answer; an answer no
// simulated run anchored says the flag changed nothing.
void SayIncludeSimulated(const Options& options,
                         v1::CheckFitResponse& response) {
  if (!options.include_simulated || response.estimates().empty()) return;
  const v1::Basis& basis = response.estimates(0).basis();
  if (basis.kind() == v1::Basis::ANCHORED && basis.source() == "sim") return;
  response.add_assumptions(
      basis.kind() == v1::Basis::ANCHORED
          ? absl::StrCat("--include_simulated changed nothing: measured runs "
                         "(",
                         basis.source(),
                         ") anchor this answer, and they come before "
                         "simulated ones")
          : "--include_simulated changed nothing: no simulated run of this "
            "model and setup is stored (probe submit --executor sim stores "
            "some)");
}

}  // namespace

int Fit(const Options& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::CheckFitRequest> request = FitRequest(options);
  if (!request.ok()) return Fail(err, std::string(request.status().message()));
  v1::CheckFitResponse response;
  const grpc::Status status =
      CallPlanner(options, &v1::Fit::Stub::CheckFit, *request, &response);
  if (status.error_code() == grpc::StatusCode::NOT_FOUND &&
      request->model().has_template_()) {
    return Fail(err,
                absl::StrCat("--model: ", status.error_message(),
                             "; see headroom models"),
                kExitUsage);
  }
  if (!status.ok()) return FailRpc(err, options, status);
  SayIncludeSimulated(options, response);
  if (options.json) {
    out << CliJson(response) << "\n";
  } else {
    if (response.has_job()) PrintJob(response.job(), out);
    PrintFit(response, options.explain, out);
    PrintNextSteps(*request, response, out);
  }
  return 0;
}

// The offline calibration commands' common start: the runs file, the
// catalog, and a fit on the runs exactly as the service fits.
struct OfflineCalibration {
  std::vector<v1::MeasuredRun> runs;
  ModelCatalog catalog;
  CalibrationResult result;
};

absl::StatusOr<OfflineCalibration> CalibrateOffline(const Options& options) {
  if (options.runs.empty()) {
    return absl::InvalidArgumentError("--runs FILE is required");
  }
  OfflineCalibration offline;
  ASSIGN_OR_RETURN(offline.catalog, LoadModelCatalog(options.models_dir));
  ASSIGN_OR_RETURN(offline.runs, LoadRunsFiles(options.runs, offline.catalog));
  ASSIGN_OR_RETURN(offline.result, Calibrate(offline.runs, offline.catalog,
                                             FitOptions{}, options.runs));
  return offline;
}

// "optimizer 1.023, outputs 0.987, ...": factors to three places (what a
// multiplier of a component's bytes means; the JSON has every digit).
std::string FactorsText(const v1::Factors& f) {
  return absl::StrFormat(
      "optimizer %.3f, outputs %.3f, attention %.3f, internal %.3f, "
      "recurrent %.3f, transient %.3f",
      f.optimizer(), f.outputs(), f.attention(), f.internal(), f.recurrent(),
      f.transient());
}

// "2026-12-02T13:38:53Z" for a Unix time, or "unknown" for 0.
std::string IsoUtc(int64_t unix_seconds) {
  if (unix_seconds <= 0) return "unknown";
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm utc{};
  gmtime_r(&t, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

// The anchored answers' bound: k per extrapolation bucket, GPU constants.
void PrintAnchoredBound(const v1::AnchoredBound& bound, std::ostream& out) {
  if (bound.buckets().empty()) return;
  out << "anchored (leave one run out within " << bound.models() << " models, "
      << bound.runs() << " runs; prior weight " << bound.prior_weight() << ", x"
      << bound.fixed_hold()
      << " on the fixed bytes, chosen by held-out error):";
  double lo = 0;
  for (const v1::ExtrapolationBucket& b : bound.buckets()) {
    out << " batch/largest measured ";
    if (b.max_ratio() == 0) {
      out << "> " << lo;
    } else {
      out << "<= " << b.max_ratio();
    }
    out << ": k " << b.k90() << "/" << b.k95() << " (" << b.runs() << " runs"
        << (b.own()               ? ""
            : b.pooled_runs() > 0 ? ", pooled with further buckets"
                                  : ", too few: the prior's k")
        << ");";
    lo = b.max_ratio();
  }
  out << "\n  GPU constants (GB):";
  for (const auto& [gpu, gb] : bound.gpu_constant_gb()) {
    out << " " << gpu << " " << SignedGb(gb);
  }
  out << "\n";
}

// One measurement source's own fit and how it predicts the others.
void PrintSourceFit(const v1::SourceFit& source, std::ostream& out) {
  const v1::ColumnSummary& h = source.heldout();
  out << "source " << source.source() << " (" << source.runs()
      << " runs): held out by template medianAbsErr " << h.median_abs_err()
      << ", under " << h.under() << " of " << h.runs() << ", saidFitsButOom "
      << h.said_fits_but_oom() << ", k " << source.k90() << "/" << source.k95()
      << (source.usable_as_prior() ? "; a prior" : "") << "; factors "
      << FactorsText(source.factors()) << "\n";
  for (const auto& [other, s] : source.predicts()) {
    out << "  predicting " << other << " runs: medianAbsErr "
        << s.median_abs_err() << ", under " << s.under() << " of " << s.runs()
        << ", saidFitsButOom " << s.said_fits_but_oom() << "\n";
  }
}

// The bound per kind of setup and the device costs (issue 30), one line
// each.
void PrintKindBounds(const v1::FactorSet& set, std::ostream& out) {
  for (const v1::SetupKindBound& k : set.kind_bounds()) {
    out << absl::StrFormat(
        "kind %-28s k %.2f allocated, %.2f reserved, %.2f device; %d "
        "held-out measurements from %d publications, %d covered, median "
        "|error| %.1f %%, %d OOM rows, %d said FITS%s%s\n",
        k.kind(), k.k_allocated(), k.k_reserved(), k.k_device(),
        k.measurements(), k.publications(), k.covered(),
        100 * k.median_abs_err(), k.oom_rows(), k.said_fits_but_oom(),
        k.note().empty() ? "" : "; ", k.note());
  }
  for (const v1::DeviceCostFit& c : set.device_costs()) {
    out << absl::StrFormat(
        "device cost %-26s source %-14s gpu %-10s %.4g (%d runs, held out "
        "%.1f %%)\n",
        c.quantity(), c.source(), c.gpu(), c.value(), c.runs(),
        100 * c.heldout_median_abs_err());
  }
}

int CalibPage(const Options& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<OfflineCalibration> offline = CalibrateOffline(options);
  if (!offline.ok()) return Fail(err, offline.status());
  const std::vector<v1::MeasuredRun>* runs = &offline->runs;
  const CalibrationResult* result = &offline->result;
  const v1::FactorSet& set = result->factor_set;
  if (!options.svg.empty()) {
    std::ofstream file(options.svg);
    file << CalibrationSvg(*runs, result->ours_heldout,
                           "Held-out predictions vs measured peaks (" +
                               std::to_string(runs->size()) + " runs)");
    if (!file) return Fail(err, "cannot write " + options.svg, 1);
  }
  if (options.json) {
    out << CliJson(set.page()) << "\n";
    return 0;
  }
  PrintPage(set, out);
  return 0;
}

void PrintPage(const v1::FactorSet& set, std::ostream& out) {
  out << "factors: " << FactorsText(set.factors()) << "\n";
  out << "fit: relative squared error, OOM penalty " << set.oom_penalty()
      << " at headroom " << set.headroom() << ", prior weight "
      << set.prior_weight() << " (each factor towards 1)\n";
  out << "column               runs  medianAbsErr within25 under "
         "saidFitsButOom saidNoButFits agree\n";
  for (const char* column :
       {"ours", "ours_heldout", "ours_anchored", "reference_shipped",
        "reference_heldout", "accelerate_fp32", "accelerate_bf16"}) {
    auto it = set.page().summary().find(column);
    if (it == set.page().summary().end()) continue;
    const v1::ColumnSummary& s = it->second;
    out << std::left << std::setw(20) << column << std::right << std::setw(5)
        << s.runs() << std::setw(14) << s.median_abs_err() << std::setw(9)
        << s.within25() << std::setw(6) << s.under() << std::setw(15)
        << s.said_fits_but_oom() << std::setw(14) << s.said_no_but_fits()
        << std::setw(6) << s.agree() << "\n";
  }
  out << "k (held out): " << set.k90() << " at 0.9, " << set.k95()
      << " at 0.95\n";
  PrintAnchoredBound(set.page().anchored(), out);
  for (const v1::SourceFit& source : set.page().sources()) {
    PrintSourceFit(source, out);
  }
  for (const std::string& line : set.page().left_out_of_fit()) {
    out << "left out of the fit (on the page): " << line << "\n";
  }
  for (const v1::Regime& regime : set.regimes()) {
    out << "regime " << regime.gpu() << " (" << regime.runs()
        << " runs): " << regime.reason() << "; k " << regime.k95()
        << " at 0.95; factors " << FactorsText(regime.factors()) << "\n";
  }
  PrintKindBounds(set, out);
}

int CalibRows(const Options& options, std::ostream& out, std::ostream& err) {
  absl::StatusOr<OfflineCalibration> offline = CalibrateOffline(options);
  if (!offline.ok()) return Fail(err, offline.status());
  const std::vector<v1::MeasuredRun>* runs = &offline->runs;
  const CalibrationResult* result = &offline->result;
  if (options.json) {
    // One object per usable run; a measurement the run lacks is null.
    nlohmann::json rows = nlohmann::json::array();
    size_t next = 0;
    for (size_t i = 0; i < runs->size(); ++i) {
      const v1::MeasuredRun& run = (*runs)[i];
      // Rows of the global fit only: the runs with a fit sample (another
      // source's, a multi-GPU or a published run has none).
      if (!IsUsable(run) || !result->ours[i].has_value() ||
          HasParallel(run.setup()) || next >= result->samples.size()) {
        continue;
      }
      const FitSample& sample = result->samples[next++];
      auto or_null = [](bool has, double value) {
        return has ? nlohmann::json(value) : nlohmann::json(nullptr);
      };
      nlohmann::json components;
      for (int c = 0; c < kNumComponents; ++c) {
        components[ComponentNames()[c]] = sample.component_gb[c];
      }
      rows.push_back(
          {{"template", run.template_()},
           {"gpu", run.gpu()},
           {"batch", run.batch()},
           {"measuredPeakGb",
            or_null(run.has_measured_peak_gb(), run.measured_peak_gb())},
           {"oomOnGb", or_null(run.has_oom_on_gb(), run.oom_on_gb())},
           {"oursGb", *result->ours[i]},
           {"heldoutGb", *result->ours_heldout[i]},
           {"anchoredGb", or_null(result->ours_anchored[i].has_value(),
                                  result->ours_anchored[i].value_or(0))},
           {"componentsGb", components},
           {"updateOptimizerGb", sample.update_gb[kOptimizer]},
           {"inFit", sample.fit}});
    }
    out << rows.dump(2) << "\n";
    return 0;
  }
  out << "template gpu batch measured_gb oom_on_gb ours_gb heldout_gb "
         "anchored_gb "
         "optimizer outputs attention internal recurrent transient "
         "update_optimizer in_fit\n";
  size_t next = 0;
  out << std::setprecision(4);
  for (size_t i = 0; i < runs->size(); ++i) {
    const v1::MeasuredRun& run = (*runs)[i];
    if (!IsUsable(run) || !result->ours[i].has_value() ||
        HasParallel(run.setup()) || next >= result->samples.size()) {
      continue;
    }
    const FitSample& sample = result->samples[next++];
    out << run.template_() << " " << run.gpu() << " " << run.batch() << " "
        << (run.has_measured_peak_gb() ? run.measured_peak_gb() : -1) << " "
        << (run.has_oom_on_gb() ? run.oom_on_gb() : -1) << " "
        << *result->ours[i] << " " << *result->ours_heldout[i] << " "
        << result->ours_anchored[i].value_or(-1);
    for (int c = 0; c < kNumComponents; ++c) {
      out << " " << sample.component_gb[c];
    }
    out << " " << sample.update_gb[kOptimizer] << " "
        << (sample.fit ? "yes" : "no") << "\n";
  }
  return 0;
}

namespace {

// "factor set fs-1 (the current one), created 2026-12-02T13:38:53Z, trained
// on ...".
void PrintFactorSetHeader(const Options& options, const v1::FactorSet& set,
                          std::ostream& out) {
  out << "factor set " << set.version()
      << (options.version.empty() ? " (the current one)" : "") << ", created "
      << IsoUtc(set.created_unix()) << ", trained on "
      << (set.trained_on().empty() ? "(not recorded)" : set.trained_on())
      << "\n";
}

// The server's factor set --version names (the current one without it):
// kExitAnswer, or the failed call's exit code, said on `err`.
int GetFactorSet(const Options& options, v1::FactorSet* set,
                 std::ostream& err) {
  v1::GetCalibrationRequest request;
  request.set_version(options.version);
  v1::GetCalibrationResponse response;
  const int code = Call(options, &v1::Calibration::Stub::GetCalibration,
                        request, &response, err);
  if (code == kExitAnswer) *set = std::move(*response.mutable_factor_set());
  return code;
}

}  // namespace

int CalibShow(const Options& options, std::ostream& out, std::ostream& err) {
  v1::FactorSet set;
  if (const int code = GetFactorSet(options, &set, err); code != kExitAnswer) {
    return code;
  }
  if (options.json) {
    // The page, as calib page --json prints one.
    out << CliJson(set.page()) << "\n";
    return 0;
  }
  PrintFactorSetHeader(options, set, out);
  PrintPage(set, out);
  return 0;
}

int FactorsShow(const Options& options, std::ostream& out, std::ostream& err) {
  v1::FactorSet set;
  if (const int code = GetFactorSet(options, &set, err); code != kExitAnswer) {
    return code;
  }
  if (options.json) {
    out << CliJson(set) << "\n";
    return 0;
  }
  PrintFactorSetHeader(options, set, out);
  out << "factors: " << FactorsText(set.factors()) << "\n"
      << absl::StrFormat(
             "headroom %.2f, k %.2f at coverage 0.9, %.2f at 0.95; OOM "
             "penalty %.3g, prior weight %.3g\n",
             set.headroom(), set.k90(), set.k95(), set.oom_penalty(),
             set.prior_weight());
  if (!set.inputs_sha256().empty()) {
    out << "inputs sha256 " << set.inputs_sha256() << "\n";
  }
  for (const v1::Regime& regime : set.regimes()) {
    out << "regime " << regime.gpu() << " (" << regime.runs() << " runs): k "
        << absl::StrFormat("%.2f", regime.k95()) << " at 0.95; factors "
        << FactorsText(regime.factors()) << "\n";
  }
  PrintKindBounds(set, out);
  out << set.collectives_size()
      << " fitted collective constants; the page: headroom calib show"
      << (options.version.empty() ? "" : " --version " + options.version)
      << "; every field: --json\n";
  return 0;
}

int Health(const Options& options, std::ostream& out, std::ostream& err) {
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  if (const int code = Call(options, &grpc::health::v1::Health::Stub::Check,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  out << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
             response.status())
      << "\n";
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}

int CalibEval(const Options& options, std::ostream& out, std::ostream& err) {
  if (options.train.empty() || options.test.empty()) {
    return Fail(err, "--train FILE and --test FILE are required");
  }
  absl::StatusOr<std::vector<v1::MeasuredRun>> train =
      LoadRunsJsonl(options.train);
  if (!train.ok()) return Fail(err, train.status());
  absl::StatusOr<std::vector<v1::MeasuredRun>> test =
      LoadRunsJsonl(options.test);
  if (!test.ok()) return Fail(err, test.status());
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(options.models_dir);
  if (!catalog.ok()) return Fail(err, catalog.status());
  absl::StatusOr<CalibrationResult> fitted =
      Calibrate(*train, *catalog, FitOptions{}, options.train);
  if (!fitted.ok()) return Fail(err, fitted.status());
  const double coverage = options.coverage == 0 ? 0.95 : options.coverage;
  // The train file's runs anchor the test rows of the same model and setup,
  // exactly as the service's stored runs anchor its answers.
  const std::shared_ptr<const Evidence> evidence =
      Evidence::Build(*train, *catalog, PriorsOf(fitted->factor_set));
  absl::StatusOr<v1::EvalReport> report =
      EvaluateOn(fitted->factor_set, *test, *catalog, coverage, PageRules{},
                 evidence.get());
  if (!report.ok()) return Fail(err, report.status());
  if (options.json) {
    out << CliJson(*report) << "\n";
    return 0;
  }
  out << std::setprecision(4);
  out << "template gpu batch predicted_gb upper_gb 16 24 40 80 basis\n";
  for (const v1::EvalRow& row : report->rows()) {
    out << row.template_() << " " << row.gpu() << " " << row.batch() << " "
        << row.predicted_gb() << " " << row.upper_gb();
    for (const char* card : {"16", "24", "40", "80"}) {
      auto it = row.verdicts().find(card);
      out << " " << (it == row.verdicts().end() ? "-" : it->second);
    }
    out << " " << row.basis() << "\n";
  }
  const v1::EvalSummary& s = report->summary().at("ours");
  out << "\nours: runs " << s.runs() << ", medianAbsErr " << s.median_abs_err()
      << ", within25 " << s.within25() << ", under " << s.under()
      << ", saidFitsButOom " << s.said_fits_but_oom() << ", saidNoButFits "
      << s.said_no_but_fits() << ", agree " << s.agree() << ", noFit "
      << s.no_fit() << ", flagged " << s.flagged() << ", falseNo "
      << s.false_no() << " (k " << s.k() << " at coverage " << s.coverage()
      << ")\n";
  return 0;
}

int Refit(const Options& options, std::ostream& out, std::ostream& err) {
  v1::RefitRequest request;
  if (!options.runs.empty()) {
    // A published runs file resolves its rows' models against the local
    // catalog (the planner's, as shipped).
    absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(options.models_dir);
    if (!catalog.ok()) return Fail(err, catalog.status());
    absl::StatusOr<std::vector<v1::MeasuredRun>> runs =
        LoadRunsFiles(options.runs, *catalog);
    if (!runs.ok()) return Fail(err, runs.status());
    for (v1::MeasuredRun& run : *runs) *request.add_runs() = std::move(run);
  }
  request.set_force(options.force);
  request.set_dry_run(options.dry_run);
  // A refit of many runs takes seconds; allow ten times the usual deadline.
  v1::RefitResponse response;
  const grpc::Status status =
      CallPlanner(options, &v1::Calibration::Stub::Refit, request, &response,
                  /*deadline_factor=*/10);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    // The planner commits a refit only while its call is live.
    err << "headroom: the refit did not finish within "
        << 10 * options.deadline_ms
        << " ms; nothing was stored (neither runs nor a factor set); retry "
           "with a larger --deadline_ms\n";
    return 1;
  }
  if (!status.ok()) return FailRpc(err, options, status);
  if (options.json) {
    out << CliJson(response) << "\n";
    return 0;
  }
  if (options.dry_run) {
    // Nothing was stored: say so, and what the promotion rule said.
    out << "dry run, nothing stored; the promotion rule: " << response.reason()
        << "\n";
  } else {
    out << response.factor_set().version()
        << (response.promoted() ? " is now current" : " stored, not current")
        << " (" << response.reason() << ")\n";
  }
  out << "runs used " << response.runs_used() << ", imported "
      << response.runs_imported() << ", fit "
      << absl::StrFormat("%.1f", response.fit_seconds()) << " s\n";
  return 0;
}

int FactorsList(const Options& options, std::ostream& out, std::ostream& err) {
  v1::ListFactorSetsRequest request;
  request.set_page_size(500);
  v1::ListFactorSetsResponse response;
  const grpc::Status status = ListAllPages(
      options, &v1::Calibration::Stub::ListFactorSets, request, &response);
  if (!status.ok()) return FailRpc(err, options, status);
  if (options.json) {
    out << CliJson(response) << "\n";
    return 0;
  }
  out << "  version  heldout_medianAbsErr  saidFitsButOom  k95   trained_on\n";
  for (const v1::FactorSetSummary& s : response.factor_sets()) {
    out << (s.current() ? "* " : "  ") << std::left << std::setw(9)
        << s.version() << std::right << std::setw(20)
        << s.heldout_median_abs_err() << std::setw(16)
        << s.heldout_said_fits_but_oom() << std::setw(6) << s.k95() << "   "
        << s.trained_on() << "\n";
  }
  return 0;
}

int FactorsPromote(const Options& options, bool rollback, std::ostream& out,
                   std::ostream& err) {
  if (!rollback && options.version.empty()) {
    return Fail(err, "--version is required, e.g. --version fs-2");
  }
  v1::PromoteFactorSetRequest request;
  request.set_rollback(rollback);
  if (!rollback) request.set_version(options.version);
  v1::PromoteFactorSetResponse response;
  if (const int code = Call(options, &v1::Calibration::Stub::PromoteFactorSet,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  out << response.current_version() << " is now current (was "
      << response.previous_version() << ")\n";
  return 0;
}

void RegisterFitCommands(CLI::App& app, CliContext& ctx) {
  Options& o = ctx.options;
  CLI::App* fit = ctx.Command(&app, "fit", "will the model fit on these GPUs?");
  AddModelFlags(fit, o);
  fit->add_option("--batch", o.batch, "batches, comma-separated, e.g. 8,16");
  fit->add_flag("--learn", o.learn,
                "when the answer is prior-only and a target BORDERLINE, queue "
                "a small probe on a connected worker so later answers are "
                "anchored");
  fit->add_flag("--include_simulated", o.include_simulated,
                "let runs measured on simulated GPUs anchor the answer");
  ShownDefault(fit->add_option("--coverage", o.coverage,
                               "upper-bound coverage 0.9 or 0.95 (default: "
                               "the planner's)"),
               "");
  fit->add_flag("--explain", o.explain,
                "per card: its device costs (reserved ratio, CUDA context, "
                "NCCL) and every phase's allocated, reserved and device "
                "figures");
  AddJobFlags(fit, o);
  AddJson(fit, o);
  ctx.Run(fit, [&ctx] {
    ctx.options.job_overrides = GivenSetupFields(ctx.options);
    return Fit(ctx.options, ctx.out, ctx.err);
  });
}

void RegisterCalibrationCommands(CLI::App& app, CliContext& ctx) {
  Options& o = ctx.options;
  CLI::App* calib = ctx.Command(&app, "calib", "the calibration page");
  CLI::App* calib_page =
      ctx.Command(calib, "page", "the calibration page, offline, from runs");
  calib_page->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  calib_page->add_option("--svg", o.svg,
                         "also write the predicted-vs-measured plot here");
  AddJson(calib_page, o);
  ctx.Run(calib_page,
          [&ctx] { return CalibPage(ctx.options, ctx.out, ctx.err); });
  CLI::App* calib_rows =
      ctx.Command(calib, "rows", "per-run predictions, offline, from runs");
  calib_rows->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  AddJson(calib_rows, o);
  ctx.Run(calib_rows,
          [&ctx] { return CalibRows(ctx.options, ctx.out, ctx.err); });
  CLI::App* calib_show = ctx.Command(
      calib, "show",
      "the server's calibration page: a factor set's accuracy (factors "
      "show: its factors)");
  calib_show->add_option("--version", o.version,
                         "factor-set version (default current)");
  AddJson(calib_show, o);
  ctx.Run(calib_show,
          [&ctx] { return CalibShow(ctx.options, ctx.out, ctx.err); });
  CLI::App* calib_eval =
      ctx.Command(calib, "eval", "fit on --train, predict --test, offline");
  calib_eval->add_option("--train", o.train, "runs to fit on (JSON lines)");
  calib_eval->add_option("--test", o.test, "runs to predict (JSON lines)");
  ShownDefault(calib_eval->add_option("--coverage", o.coverage,
                                      "upper-bound coverage 0.9 or 0.95"),
               "0.95");
  AddJson(calib_eval, o);
  ctx.Run(calib_eval,
          [&ctx] { return CalibEval(ctx.options, ctx.out, ctx.err); });

  CLI::App* refit = ctx.Command(
      &app, "refit",
      "import runs and refit on the server; nothing is stored if the deadline "
      "(10 x --deadline_ms) passes first");
  refit->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  refit->add_flag("--force", o.force, "make the new factor set current anyway");
  refit->add_flag("--dry_run", o.dry_run, "fit and report, store nothing");
  AddJson(refit, o);
  ctx.Run(refit, [&ctx] { return Refit(ctx.options, ctx.out, ctx.err); });

  CLI::App* factors = ctx.Command(&app, "factors", "the server's factor sets");
  CLI::App* factors_list = ctx.Command(factors, "list", "every factor set");
  AddJson(factors_list, o);
  ctx.Run(factors_list,
          [&ctx] { return FactorsList(ctx.options, ctx.out, ctx.err); });
  CLI::App* factors_show = ctx.Command(
      factors, "show",
      "one factor set's factors, k and bounds (calib show: its page)");
  factors_show->add_option("--version", o.version,
                           "factor-set version (default current)");
  AddJson(factors_show, o);
  ctx.Run(factors_show,
          [&ctx] { return FactorsShow(ctx.options, ctx.out, ctx.err); });
  CLI::App* factors_promote =
      ctx.Command(factors, "promote", "make a factor set current");
  factors_promote->add_option("--version", o.version,
                              "factor-set version, e.g. fs-2");
  ctx.Run(factors_promote, [&ctx] {
    return FactorsPromote(ctx.options, false, ctx.out, ctx.err);
  });
  CLI::App* factors_rollback =
      ctx.Command(factors, "rollback", "make the previous factor set current");
  ctx.Run(factors_rollback, [&ctx] {
    return FactorsPromote(ctx.options, true, ctx.out, ctx.err);
  });
}

void RegisterHealthCommand(CLI::App& app, CliContext& ctx) {
  CLI::App* health = ctx.Command(&app, "health", "the server's health status");
  ctx.Run(health, [&ctx] { return Health(ctx.options, ctx.out, ctx.err); });
}

}  // namespace headroom::cli
