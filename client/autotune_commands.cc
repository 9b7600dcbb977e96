#include "client/autotune_commands.h"

#include <iomanip>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_io.h"
#include "base/value_bounds.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/fleet_commands.h"
#include "client/rpc.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

// An AutotuneCacheKey from a file holding the key itself or a whole record.
absl::StatusOr<v1::AutotuneCacheKey> LoadCacheKey(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  v1::AutotuneRecord record;
  if (ParseJson(*text, path, /*ignore_unknown=*/true, &record).ok() &&
      record.has_cache_key()) {
    return record.cache_key();
  }
  v1::AutotuneCacheKey key;
  absl::Status parsed = ParseJson(*text, path, /*ignore_unknown=*/false, &key);
  if (!parsed.ok()) return parsed;
  return key;
}

// --context and --attention_backend are the old names of the setup's
// --positions and --attention: one value each, an error when both names
// are given and differ. The request carries it in both places (the setup,
// and context / attention_backend, which the autotune cache key reads).
absl::Status MergeOldNames(const MicrobatchPlanOptions& plan,
                           Options& options) {
  if (plan.context != 0) {
    if (options.positions != 0 && options.positions != plan.context) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--context ", plan.context, " and --positions ", options.positions,
          " differ; --context is the old name of --positions: give one"));
    }
    options.positions = plan.context;
  }
  if (options.positions > UINT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("--positions ", options.positions,
                     " is out of range for a microbatch plan; allowed "
                     "0 (the model's standard) .. 4294967295"));
  }
  if (!plan.attention_backend.empty()) {
    if (!options.attention.empty() &&
        options.attention != plan.attention_backend) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--attention_backend ", plan.attention_backend, " and --attention ",
          options.attention,
          " differ; --attention_backend is the old name of --attention: "
          "give one"));
    }
    options.attention = plan.attention_backend;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::PlanMicrobatchRequest> PlanRequest(
    const Options& options, const MicrobatchPlanOptions& plan) {
  // Model and setup come from the fit flags (--batch is not used here).
  Options fit_options = options;
  fit_options.batch = "1";
  if (absl::Status merged = MergeOldNames(plan, fit_options); !merged.ok()) {
    return merged;
  }
  absl::StatusOr<v1::CheckFitRequest> fit =
      FitRequest(fit_options, /*require_targets=*/false);
  if (!fit.ok()) return fit.status();
  v1::PlanMicrobatchRequest request;
  if (fit->model().has_spec()) {
    *request.mutable_spec() = fit->model().spec();
  } else if (!fit->model().template_().empty()) {
    request.set_template_(fit->model().template_());
  } else {
    return absl::InvalidArgumentError(
        "--model must be a catalog template or a spec JSON file for "
        "microbatch plan and autotune");
  }
  *request.mutable_setup() = fit->setup();
  if (fit->targets_size() != 1) {
    return absl::InvalidArgumentError(
        "--gpu must name one card (a catalog GPU or GB)");
  }
  if (fit->targets(0).has_gpu()) {
    request.set_gpu(fit->targets(0).gpu());
  } else {
    request.set_memory_gb(fit->targets(0).memory_gb());
  }
  request.set_context(static_cast<uint32_t>(fit_options.positions));
  request.set_global_batch(plan.global_batch);
  for (absl::string_view part :
       absl::StrSplit(plan.candidates, ',', absl::SkipEmpty())) {
    uint32_t candidate = 0;
    if (!absl::SimpleAtoi(part, &candidate)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--candidates '", part, "' is not a number; e.g. 8,16,32"));
    }
    request.add_microbatch_candidates(candidate);
  }
  request.set_compile_model(plan.compile);
  request.set_attention_backend(fit_options.attention);
  request.set_vram_fraction(plan.vram_fraction);
  request.set_reserve_gb(plan.reserve_gb);
  return request;
}

// Why a plan's figures are not `headroom fit`'s for the same model, card
// and batch (core/microbatch/plan.cc against core/planner/fit_planner.cc).
constexpr char kPlanVersusFit[] =
    "peak GB: the allocator's peak (max_memory_allocated) under the factor "
    "set's global factors, as the autotuner measures it; upper GB: peak x k; "
    "a verdict compares upper x headroom with the budget (vram_fraction x "
    "the card - reserve_gb). headroom fit answers another question: the "
    "device memory (reserved + CUDA context + NCCL, what nvidia-smi shows), "
    "anchored on measured runs of the model where there are any, with its "
    "setup kind's k, against the whole card; so its peaks and verdicts "
    "differ (headroom fit --model M --gpu G --batch N --explain shows its "
    "arithmetic).";

}  // namespace

int MicrobatchPlan(const Options& options, const MicrobatchPlanOptions& plan,
                   std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::PlanMicrobatchRequest> built = PlanRequest(options, plan);
  if (!built.ok()) return Fail(err, std::string(built.status().message()));
  v1::PlanMicrobatchRequest& request = *built;
  if (!plan.cache_key.empty()) {
    absl::StatusOr<v1::AutotuneCacheKey> key = LoadCacheKey(plan.cache_key);
    if (!key.ok()) return Fail(err, std::string(key.status().message()));
    *request.mutable_cache_key() = *key;
  }
  v1::PlanMicrobatchResponse response;
  if (const int code = Call(options, &v1::Microbatch::Stub::PlanMicrobatch,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  if (options.json) {
    out << CliJson(response) << "\n";
    return 0;
  }
  out << std::fixed << std::setprecision(2);
  out << response.model() << " on " << response.gpu() << " ("
      << response.memory_gb() << " GB): budget " << response.budget_gb()
      << " GB; factor set " << response.factor_set_version() << ", k "
      << response.k() << ", headroom " << response.headroom() << "\n";
  if (response.has_cached()) {
    const auto& s = response.cached().selected();
    out << "cached selection reused: microbatch " << s.microbatch() << " ("
        << s.mode() << "), measured peak " << RecordGb(s.peak_gb()) << " GB, "
        << s.microbatch_seconds() << " s per microbatch\n";
  }
  out << "mode      micro  peak GB  upper GB  verdict       per update  "
         "action\n";
  for (const auto& c : response.candidates()) {
    out << std::left << std::setw(9) << c.mode() << std::right << std::setw(6)
        << c.microbatch() << std::setw(9) << c.peak_gb() << std::setw(10)
        << c.upper_gb() << "  " << std::left << std::setw(13)
        << v1::Verdict_Name(c.verdict()) << std::right << std::setw(10)
        << c.microbatches_per_update() << "  "
        << v1::PlannedMicrobatch::Action_Name(c.action()) << "\n";
  }
  out << "measure " << response.measure_count() << ", skip "
      << response.skip_count() << "\n";
  if (response.has_largest_predicted_fit()) {
    out << "largest predicted fit without a measurement: microbatch "
        << response.largest_predicted_fit().microbatch() << ", keeping "
        << response.margin_gb() << " GB below the budget at its upper bound\n";
  } else {
    out << "no candidate is a predicted fit: every selection needs a "
           "measurement\n";
  }
  out << kPlanVersusFit << "\n";
  return 0;
}

int MicrobatchAutotune(const Options& options,
                       const MicrobatchPlanOptions& plan,
                       const ProbeOptions& probe, const std::string& policy,
                       std::ostream& out, std::ostream& err) {
  v1::SubmitAutotuneRequest request;
  if (!probe.worker.empty()) {
    // The plan's target comes from the worker; any --gpu card will do here.
    Options placed = options;
    if (placed.gpu.empty()) placed.gpu = "L4";
    absl::StatusOr<v1::PlanMicrobatchRequest> built = PlanRequest(placed, plan);
    if (!built.ok()) return Fail(err, std::string(built.status().message()));
    *request.mutable_plan() = *std::move(built);
    request.set_worker(probe.worker);
  } else {
    absl::StatusOr<v1::PlanMicrobatchRequest> built =
        PlanRequest(options, plan);
    if (!built.ok()) return Fail(err, std::string(built.status().message()));
    if (!built->has_gpu()) {
      return Fail(err, "--gpu must name a catalog GPU kind (or pass --worker)");
    }
    request.set_gpu(built->gpu());
    *request.mutable_plan() = *std::move(built);
  }
  request.set_executor(probe.executor);
  request.set_policy(policy);
  request.set_steps(probe.steps);
  request.set_warmup_steps(probe.warmup);
  v1::SubmitAutotuneResponse response;
  if (const int code = Call(options, &v1::Fleet::Stub::SubmitAutotune, request,
                            &response, err);
      code != kExitAnswer) {
    return code;
  }
  if (options.json && (!probe.watch || response.cache_reused())) {
    out << CliJson(response) << "\n";
    return 0;
  }
  const auto print_selected = [&](const v1::AutotuneRecord& record) {
    if (!record.has_selected()) {
      out << "no candidate fits the budget\n";
      return;
    }
    const auto& s = record.selected();
    out << std::fixed << std::setprecision(3) << "selected microbatch "
        << s.microbatch() << " (" << s.mode() << "), measured peak "
        << RecordGb(s.peak_gb()) << " GB of " << RecordGb(record.budget_gb())
        << " GB budget, " << s.microbatch_seconds() << " s per microbatch, "
        << std::setprecision(0) << s.input_tokens_per_second()
        << " tokens/s, policy " << record.selection_policy() << "\n";
  };
  if (!options.json) {
    const v1::PlanMicrobatchResponse& p = response.plan();
    out << std::fixed << std::setprecision(2) << p.model() << " on " << p.gpu()
        << ": budget " << p.budget_gb() << " GB, " << p.candidates_size()
        << " planned (" << p.measure_count() << " open, " << p.skip_count()
        << " decided by the prediction)\n";
  }
  if (response.cache_reused()) {
    out << "cache " << response.cache_id() << " reused: no probe\n";
    print_selected(response.cached());
    return 0;
  }
  if (!options.json) out << "submitted " << response.probe().id() << "\n";
  if (!probe.watch) return 0;
  const int watched =
      ProbeWatch(options, probe, response.probe().id(), out, err);
  if (options.json) return watched;
  // The final state carries the worker's record.
  auto stub = v1::Fleet::NewStub(Connect(options));
  grpc::ClientContext context;
  SetDeadline(context, options);
  v1::WatchProbeRequest get;
  get.set_id(response.probe().id());
  auto reader = stub->WatchProbe(&context, get);
  v1::ProbeEvent event;
  v1::Probe last;
  while (reader->Read(&event)) {
    if (event.has_probe()) last = event.probe();
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return FailRpc(err, options, status);
  if (last.state() != v1::Probe::SUCCEEDED) return watched == 0 ? 1 : watched;
  v1::AutotuneRecord record;
  const absl::Status parsed = ParseJson(last.details_json(), "probe record",
                                        /*ignore_unknown=*/false, &record);
  if (!parsed.ok()) return Fail(err, std::string(parsed.message()));
  out << "measured " << record.measurements_size() << " candidates, "
      << record.failures_size() << " not usable\n";
  print_selected(record);
  return watched;
}

int MicrobatchCacheList(const Options& options, std::ostream& out,
                        std::ostream& err) {
  v1::ListAutotuneRecordsRequest request;
  request.set_page_size(500);
  v1::ListAutotuneRecordsResponse response;
  const grpc::Status status = ListAllPages(
      options, &v1::Microbatch::Stub::ListAutotuneRecords, request, &response);
  if (!status.ok()) return FailRpc(err, options, status);
  if (options.json) {
    out << CliJson(response) << "\n";
    return 0;
  }
  if (response.entries().empty()) out << "the autotune cache is empty\n";
  for (const auto& e : response.entries()) {
    const auto& key = e.record().cache_key();
    // A simulated worker's record says so instead of a torch version.
    const std::string framework = key.kind() == "sim" ? "simulated"
                                  : key.torch().empty()
                                      ? "torch ?"
                                      : "torch " + key.torch();
    out << e.id() << "  " << key.gpu().name() << "  " << framework
        << "  context " << key.settings().context() << "  global batch "
        << key.settings().global_batch() << "  selected "
        << e.record().selected().microbatch() << " ("
        << e.record().selected().mode() << ")\n";
  }
  return 0;
}

int MicrobatchCachePut(const Options& options, const std::string& record_path,
                       std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::string> text = ReadFile(record_path);
  if (!text.ok()) return Fail(err, std::string(text.status().message()));
  v1::PutAutotuneRecordRequest request;
  absl::Status parsed = ParseJson(*text, record_path, /*ignore_unknown=*/false,
                                  request.mutable_record());
  if (!parsed.ok()) return Fail(err, std::string(parsed.message()));
  v1::PutAutotuneRecordResponse response;
  if (const int code = Call(options, &v1::Microbatch::Stub::PutAutotuneRecord,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  if (options.json) {
    out << CliJson(response) << "\n";
  } else {
    out << (response.replaced() ? "replaced " : "stored ") << response.id()
        << "\n";
  }
  return 0;
}

int MicrobatchCacheDrop(const Options& options, const std::string& id,
                        std::ostream& out, std::ostream& err) {
  v1::DropAutotuneRecordRequest request;
  request.set_id(id);
  v1::DropAutotuneRecordResponse response;
  if (const int code = Call(options, &v1::Microbatch::Stub::DropAutotuneRecord,
                            request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  out << "dropped " << id << "\n";
  return 0;
}

namespace {

void AddPlanFlags(CLI::App* app, MicrobatchPlanOptions& plan) {
  ShownDefault(app->add_option("--context", plan.context,
                               "the old name of --positions (tokens per "
                               "sample); both given must agree"),
               "");
  InRange(ShownDefault(app->add_option("--global_batch", plan.global_batch,
                                       "samples per update (required)"),
                       ""),
          1, kMaxBatch);
  app->add_option("--candidates", plan.candidates,
                  "microbatches, e.g. 8,16,32");
  app->add_flag("--compile", plan.compile, "plan compiled mode too");
  app->add_option("--attention_backend", plan.attention_backend,
                  "the old name of --attention (flash, sdpa or eager); both "
                  "given must agree");
  app->add_option("--vram_fraction", plan.vram_fraction, "budget fraction");
  app->add_option("--reserve_gb", plan.reserve_gb, "GB kept free");
}

}  // namespace

void RegisterAutotuneCommands(CLI::App& microbatch, CliContext& ctx) {
  struct Flags {
    MicrobatchPlanOptions plan;
    ProbeOptions probe;
    std::string policy;
    std::string record;
    std::string id;
  };
  Flags& f = ctx.Keep<Flags>();
  Options& o = ctx.options;
  CLI::App* plan = ctx.Command(&microbatch, "plan", "a microbatch plan");
  AddModelFlags(plan, o, /*compile_flag=*/false);
  AddPlanFlags(plan, f.plan);
  plan->add_option("--cache_key", f.plan.cache_key,
                   "a cache key (or record) JSON file to look up");
  AddJson(plan, o);
  ctx.Run(plan, [&ctx, &f] {
    return MicrobatchPlan(ctx.options, f.plan, ctx.out, ctx.err);
  });
  CLI::App* autotune =
      ctx.Command(&microbatch, "autotune", "measure candidates on a worker");
  AddModelFlags(autotune, o, /*compile_flag=*/false);
  AddPlanFlags(autotune, f.plan);
  AddProbeRunFlags(autotune, f.probe);
  autotune->add_option("--policy", f.policy, "max_batch or max_throughput");
  AddJson(autotune, o);
  ctx.Run(autotune, [&ctx, &f] {
    return MicrobatchAutotune(ctx.options, f.plan, f.probe, f.policy, ctx.out,
                              ctx.err);
  });
  CLI::App* cache = ctx.Command(&microbatch, "cache", "the autotune cache");
  CLI::App* cache_list = ctx.Command(cache, "list", "every cached record");
  AddJson(cache_list, o);
  ctx.Run(cache_list, [&ctx] {
    return MicrobatchCacheList(ctx.options, ctx.out, ctx.err);
  });
  CLI::App* cache_put = ctx.Command(cache, "put", "store a record");
  cache_put->add_option("--record", f.record, "an autotune record");
  AddJson(cache_put, o);
  ctx.Run(cache_put, [&ctx, &f] {
    return MicrobatchCachePut(ctx.options, f.record, ctx.out, ctx.err);
  });
  CLI::App* cache_drop = ctx.Command(cache, "drop", "drop a record");
  cache_drop->add_option("id", f.id, "ID")->required();
  ctx.Run(cache_drop, [&ctx, &f] {
    return MicrobatchCacheDrop(ctx.options, f.id, ctx.out, ctx.err);
  });
}

}  // namespace headroom::cli
