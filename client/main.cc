// headroom: the command-line client for schedulers (--json) and operators.

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/autotune_commands.h"
#include "client/commands.h"
#include "client/density_commands.h"
#include "client/energy_commands.h"
#include "client/fleet_commands.h"
#include "client/microbatch_commands.h"
#include "client/model_commands.h"
#include "client/rpc.h"
#include "common/client_channel.h"
#include "common/logging.h"
#include "common/shipped_files.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "planner address");
ABSL_FLAG(std::string, token, "",
          "bearer token for a planner with --tokens_file (or HEADROOM_TOKEN)");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: CA certificate (PEM) of the planner's (or HEADROOM_TLS_CA)");
ABSL_FLAG(std::string, tls_cert, "",
          "mTLS: client certificate (PEM) (or HEADROOM_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "",
          "mTLS: client private key (PEM) (or HEADROOM_TLS_KEY)");
ABSL_FLAG(int, deadline_ms, 5000, "deadline of each call in milliseconds");
ABSL_FLAG(bool, json, false, "print JSON instead of a table");
ABSL_FLAG(std::string, models_dir, "models",
          "model catalog (offline commands)");
ABSL_FLAG(std::string, model, "",
          "catalog template, or a spec, config.json or ONNX file");
ABSL_FLAG(std::string, onnx, "",
          "fit: an ONNX model file (its weights are not sent)");
ABSL_FLAG(std::string, batch, "", "batches, comma-separated");
ABSL_FLAG(std::string, gpu, "", "GPU names or sizes in GB, comma-separated");
ABSL_FLAG(std::string, precision, "fp32", "fp32, bf16 or fp16 (mixed)");
ABSL_FLAG(std::string, optimizer, "adamw", "adamw, sgd or sgd-momentum");
ABSL_FLAG(bool, checkpointing, false, "activation checkpointing");
ABSL_FLAG(bool, fused_attention, false, "fused (flash) attention");
ABSL_FLAG(bool, learn, false,
          "fit: when the answer is prior-only and a target BORDERLINE, queue "
          "a small probe on a connected worker so later answers are anchored");
ABSL_FLAG(bool, include_simulated, false,
          "fit: let runs measured on simulated GPUs anchor the answer");
ABSL_FLAG(uint64_t, positions, 0,
          "sequence length / tokens per sample (0: the model's standard)");
ABSL_FLAG(double, coverage, 0,
          "upper-bound coverage 0.9 or 0.95 (0: server's)");
ABSL_FLAG(std::string, runs, "", "measured runs file (JSON lines)");
ABSL_FLAG(std::string, version, "", "factor-set version (default current)");
ABSL_FLAG(std::string, train, "", "calib eval: runs to fit on (JSON lines)");
ABSL_FLAG(std::string, test, "", "calib eval: runs to predict (JSON lines)");
ABSL_FLAG(bool, force, false, "refit: make the new factor set current anyway");
ABSL_FLAG(bool, dry_run, false, "refit: fit and report, store nothing");
ABSL_FLAG(std::string, curves, "data/energy-curves.json",
          "energy: the curve set file");
ABSL_FLAG(double, params_b, 0, "energy: parameters in billions");
ABSL_FLAG(std::string, arch, "", "energy: GPU architecture (instead of --gpu)");
ABSL_FLAG(std::string, quant, "", "energy: fp16, nf4 or int8");
ABSL_FLAG(bool, from_anchors, false, "energy refit: refit from the anchors");
ABSL_FLAG(bool, subtract_idle, false, "energy refit: subtract idle power");
ABSL_FLAG(bool, merge_anchors, false, "energy refit: keep existing anchors");
ABSL_FLAG(std::string, out, "", "energy refit: write the new curve set here");
ABSL_FLAG(std::string, record, "", "microbatch select: an autotune record");
ABSL_FLAG(std::string, policy, "",
          "microbatch select: max_batch or max_throughput (default: the "
          "record's)");
ABSL_FLAG(std::string, o, "",
          "model convert: write the spec here (- = stdout)");
ABSL_FLAG(uint32_t, context, 0, "microbatch plan: tokens per sample");
ABSL_FLAG(uint32_t, global_batch, 0, "microbatch plan: samples per update");
ABSL_FLAG(std::string, candidates, "",
          "microbatch plan: microbatches, e.g. 8,16,32");
ABSL_FLAG(bool, compile, false, "microbatch plan: plan compiled mode too");
ABSL_FLAG(std::string, attention_backend, "",
          "microbatch plan: flash, sdpa or eager (default: --fused_attention)");
ABSL_FLAG(double, vram_fraction, 0.98, "microbatch plan: budget fraction");
ABSL_FLAG(double, reserve_gb, 0, "microbatch plan: GB kept free");
ABSL_FLAG(std::string, cache_key, "",
          "microbatch plan: a cache key (or record) JSON file to look up");
ABSL_FLAG(std::string, worker, "", "probe submit: run on this worker id");
ABSL_FLAG(uint32_t, repetitions, 0, "probe submit: runs per batch (0 = 1)");
ABSL_FLAG(std::string, executor, "",
          "probe submit: torch, cuda or sim (default: the worker's)");
ABSL_FLAG(uint32_t, steps, 0, "probe submit: timed steps (0 = 3)");
ABSL_FLAG(uint32_t, warmup, 0, "probe submit: warm-up steps (0 = 1)");
ABSL_FLAG(bool, watch, false, "probe submit: follow the probe to its end");
ABSL_FLAG(int, watch_timeout_s, 3600, "probe watch: longest wait in seconds");
ABSL_FLAG(std::string, state, "", "probe list: only this state");
ABSL_FLAG(std::string, svg, "",
          "calib page / energy plot: the SVG file to write");

namespace {

constexpr char kUsage[] =
    "headroom COMMAND [flags]\n"
    "  fit --model TEMPLATE|FILE | --onnx FILE --batch N[,N] --gpu "
    "L4,H100[,GB] [--json]\n"
    "  calib page --runs FILE [--json] [--svg F]   calibration page, offline\n"
    "  calib rows --runs FILE              per-run predictions, offline\n"
    "  calib show [--version fs-N]         the server's factor set\n"
    "  calib eval --train A --test B       fit on A, predict B, offline\n"
    "  refit [--runs FILE] [--force] [--dry_run]   refit on the server; "
    "nothing is stored if the deadline (10 x --deadline_ms) passes first\n"
    "  model inspect TEMPLATE|FILE [--batch N] [--json]   where memory comes "
    "from (FILE: spec, config.json or .onnx)\n"
    "  model convert CONFIG.json|FILE.onnx [-o spec.json] [--positions N]   "
    "HF config or ONNX -> spec\n"
    "  microbatch select --record FILE [--policy max_batch|max_throughput] "
    "[--json]\n"
    "  microbatch plan --model M --gpu G --context C --global_batch N "
    "--candidates 8,16 [--compile] [--cache_key F]\n"
    "  microbatch cache list | put --record F | drop ID\n"
    "  microbatch autotune --model M --gpu G|--worker ID --context C "
    "--global_batch N --candidates 8,16,32 [--compile] [--policy P] "
    "[--executor sim|torch] [--watch]\n"
    "  density rank --runs FILE [--json]   density leaderboard, offline\n"
    "  energy --params-b N --gpu NAME|--arch ARCH --quant fp16|nf4|int8 "
    "[--json]\n"
    "  energy refit --runs FILE | --from-anchors     energy plot --arch A "
    "--svg F\n"
    "  energy curves | promote --version ec-N | rollback   the server's "
    "energy curve sets\n"
    "  factors list | show [--version fs-N] | promote --version fs-N | "
    "rollback\n"
    "  workers [--json]                    worker daemons and their GPUs\n"
    "  probe submit --model M --batch N[,N] --gpu KIND|--worker ID "
    "[--executor torch|cuda|sim] [--repetitions R] [--watch]\n"
    "  probe watch ID | probe cancel ID | probe list [--state S]\n"
    "  health                              the server's health status\n"
    "Every command but calib page talks to --server (default 127.0.0.1:50051).";

// Flags may be spelled with dashes (--params-b) as well as underscores.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t c = 2; c < end; ++c) {
      if (arg[c] == '-') arg[c] = '_';
    }
  }
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  std::vector<std::string> normalized = NormalizeFlagNames(argc, argv);
  std::vector<char*> pointers;
  for (std::string& arg : normalized) pointers.push_back(arg.data());
  std::vector<char*> positional = absl::ParseCommandLine(
      static_cast<int>(pointers.size()), pointers.data());
  // gRPC's own complaints (a refused handshake) as warnings in the one log
  // format; the CLI says what went wrong itself.
  headroom::SetUpLogging("error");
  headroom::cli::Options options;
  options.server = absl::GetFlag(FLAGS_server);
  options.deadline_ms = absl::GetFlag(FLAGS_deadline_ms);
  options.security.token = absl::GetFlag(FLAGS_token);
  options.security.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.security.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.security.tls_key = absl::GetFlag(FLAGS_tls_key);
  headroom::SecurityFromEnvironment(&options.security);
  {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        headroom::OpenChannel(options.server, options.security,
                              headroom::cli::ChannelArgs());
    if (!channel.ok()) {
      std::cerr << "headroom: " << channel.status().message() << "\n";
      return 2;
    }
    options.channel = *std::move(channel);
  }
  options.json = absl::GetFlag(FLAGS_json);
  // The shipped catalog, found from any working directory; a missing one
  // is reported by the command that needs it.
  options.models_dir =
      headroom::FindShipped(absl::GetFlag(FLAGS_models_dir), "models_dir")
          .value_or(absl::GetFlag(FLAGS_models_dir));
  options.model = absl::GetFlag(FLAGS_model);
  options.onnx = absl::GetFlag(FLAGS_onnx);
  options.batch = absl::GetFlag(FLAGS_batch);
  options.gpu = absl::GetFlag(FLAGS_gpu);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.optimizer = absl::GetFlag(FLAGS_optimizer);
  options.checkpointing = absl::GetFlag(FLAGS_checkpointing);
  options.fused_attention = absl::GetFlag(FLAGS_fused_attention);
  options.learn = absl::GetFlag(FLAGS_learn);
  options.include_simulated = absl::GetFlag(FLAGS_include_simulated);
  options.positions = absl::GetFlag(FLAGS_positions);
  options.coverage = absl::GetFlag(FLAGS_coverage);
  options.runs = absl::GetFlag(FLAGS_runs);
  options.version = absl::GetFlag(FLAGS_version);
  options.train = absl::GetFlag(FLAGS_train);
  options.test = absl::GetFlag(FLAGS_test);
  options.force = absl::GetFlag(FLAGS_force);
  options.dry_run = absl::GetFlag(FLAGS_dry_run);
  options.svg = absl::GetFlag(FLAGS_svg);

  const std::vector<std::string> args(positional.begin() + 1, positional.end());
  if (args.size() == 1 && args[0] == "fit") {
    return headroom::cli::Fit(options, std::cout, std::cerr);
  }
  headroom::cli::ProbeOptions probe;
  probe.worker = absl::GetFlag(FLAGS_worker);
  probe.repetitions = absl::GetFlag(FLAGS_repetitions);
  probe.executor = absl::GetFlag(FLAGS_executor);
  probe.steps = absl::GetFlag(FLAGS_steps);
  probe.warmup = absl::GetFlag(FLAGS_warmup);
  probe.watch = absl::GetFlag(FLAGS_watch);
  probe.watch_timeout_s = absl::GetFlag(FLAGS_watch_timeout_s);
  probe.state = absl::GetFlag(FLAGS_state);
  // microbatch plan and microbatch autotune (which has no --cache_key).
  headroom::cli::MicrobatchPlanOptions plan;
  plan.context = absl::GetFlag(FLAGS_context);
  plan.global_batch = absl::GetFlag(FLAGS_global_batch);
  plan.candidates = absl::GetFlag(FLAGS_candidates);
  plan.compile = absl::GetFlag(FLAGS_compile);
  plan.attention_backend = absl::GetFlag(FLAGS_attention_backend);
  plan.vram_fraction = absl::GetFlag(FLAGS_vram_fraction);
  plan.reserve_gb = absl::GetFlag(FLAGS_reserve_gb);
  if (args.size() == 2 && args[0] == "microbatch" && args[1] == "plan") {
    plan.cache_key = absl::GetFlag(FLAGS_cache_key);
    return headroom::cli::MicrobatchPlan(options, plan, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "microbatch" && args[1] == "autotune") {
    return headroom::cli::MicrobatchAutotune(options, plan, probe,
                                             absl::GetFlag(FLAGS_policy),
                                             std::cout, std::cerr);
  }
  if (args.size() == 3 && args[0] == "microbatch" && args[1] == "cache" &&
      args[2] == "list") {
    return headroom::cli::MicrobatchCacheList(options, std::cout, std::cerr);
  }
  if (args.size() == 3 && args[0] == "microbatch" && args[1] == "cache" &&
      args[2] == "put") {
    return headroom::cli::MicrobatchCachePut(
        options, absl::GetFlag(FLAGS_record), std::cout, std::cerr);
  }
  if (args.size() == 4 && args[0] == "microbatch" && args[1] == "cache" &&
      args[2] == "drop") {
    return headroom::cli::MicrobatchCacheDrop(options, args[3], std::cout,
                                              std::cerr);
  }
  if (args.size() == 1 && args[0] == "workers") {
    return headroom::cli::Workers(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "probe" && args[1] == "submit") {
    return headroom::cli::ProbeSubmit(options, probe, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "probe" && args[1] == "list") {
    return headroom::cli::ProbeList(options, probe, std::cout, std::cerr);
  }
  if (args.size() == 3 && args[0] == "probe" && args[1] == "watch") {
    return headroom::cli::ProbeWatch(options, probe, args[2], std::cout,
                                     std::cerr);
  }
  if (args.size() == 3 && args[0] == "probe" && args[1] == "cancel") {
    return headroom::cli::ProbeCancel(options, args[2], std::cout, std::cerr);
  }
  if (args.size() == 1 && args[0] == "health") {
    return headroom::cli::Health(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "calib" && args[1] == "page") {
    return headroom::cli::CalibPage(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "calib" && args[1] == "rows") {
    return headroom::cli::CalibRows(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "calib" && args[1] == "eval") {
    return headroom::cli::CalibEval(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "density" && args[1] == "rank") {
    if (options.runs.empty()) {
      std::cerr << "headroom: --runs FILE is required\n";
      return 2;
    }
    return headroom::cli::DensityRank(options.runs, options.json, std::cout,
                                      std::cerr);
  }
  if (args.size() == 2 && args[0] == "energy" && args[1] == "curves") {
    return headroom::cli::EnergyCurvesList(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "energy" &&
      (args[1] == "promote" || args[1] == "rollback")) {
    return headroom::cli::EnergyCurvesPromote(options, args[1] == "rollback",
                                              std::cout, std::cerr);
  }
  if (!args.empty() && args[0] == "energy" && args.size() <= 2) {
    headroom::cli::EnergyOptions energy;
    energy.curves = headroom::FindShipped(absl::GetFlag(FLAGS_curves), "curves")
                        .value_or(absl::GetFlag(FLAGS_curves));
    energy.params_b = absl::GetFlag(FLAGS_params_b);
    energy.gpu = options.gpu;
    energy.arch = absl::GetFlag(FLAGS_arch);
    energy.quant = absl::GetFlag(FLAGS_quant);
    energy.json = options.json;
    energy.runs = options.runs;
    energy.from_anchors = absl::GetFlag(FLAGS_from_anchors);
    energy.subtract_idle = absl::GetFlag(FLAGS_subtract_idle);
    energy.merge_anchors = absl::GetFlag(FLAGS_merge_anchors);
    energy.out = absl::GetFlag(FLAGS_out);
    energy.svg = absl::GetFlag(FLAGS_svg);
    if (args.size() == 1) {
      return headroom::cli::EnergyEstimate(energy, std::cout, std::cerr);
    }
    if (args[1] == "refit") {
      return headroom::cli::EnergyRefit(energy, std::cout, std::cerr);
    }
    if (args[1] == "plot") {
      return headroom::cli::EnergyPlot(energy, std::cout, std::cerr);
    }
  }
  if (args.size() == 3 && args[0] == "model" && args[1] == "inspect") {
    options.model = args[2];
    return headroom::cli::ModelInspect(options, std::cout, std::cerr);
  }
  if (args.size() == 3 && args[0] == "model" && args[1] == "convert") {
    return headroom::cli::ModelConvert(args[2], options.positions,
                                       absl::GetFlag(FLAGS_o), std::cout,
                                       std::cerr);
  }
  if (args.size() == 2 && args[0] == "microbatch" && args[1] == "select") {
    return headroom::cli::MicrobatchSelect(absl::GetFlag(FLAGS_record),
                                           absl::GetFlag(FLAGS_policy),
                                           options.json, std::cout, std::cerr);
  }
  if (args.size() == 1 && args[0] == "refit") {
    return headroom::cli::Refit(options, std::cout, std::cerr);
  }
  if (args.size() == 2 && args[0] == "factors") {
    if (args[1] == "list") {
      return headroom::cli::FactorsList(options, std::cout, std::cerr);
    }
    if (args[1] == "show") {
      return headroom::cli::CalibShow(options, std::cout, std::cerr);
    }
    if (args[1] == "promote" || args[1] == "rollback") {
      return headroom::cli::FactorsPromote(options, args[1] == "rollback",
                                           std::cout, std::cerr);
    }
  }
  if (args.size() == 2 && args[0] == "calib" && args[1] == "show") {
    return headroom::cli::CalibShow(options, std::cout, std::cerr);
  }
  std::cerr << kUsage << "\n";
  return 2;
}
