#include "client/cli.h"

#include <algorithm>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/autotune_commands.h"
#include "client/catalog_commands.h"
#include "client/commands.h"
#include "client/density_commands.h"
#include "client/energy_commands.h"
#include "client/fleet_commands.h"
#include "client/microbatch_commands.h"
#include "client/model_commands.h"
#include "client/rpc.h"
#include "client/setup_flags.h"
#include "common/client_channel.h"
#include "common/shipped_files.h"

namespace headroom::cli {
namespace {

constexpr char kExitCodes[] =
    "Exit codes: 0 an answer (whatever the verdict); 1 the planner refused "
    "the request, or a watched probe failed or was cancelled; 2 bad usage (an "
    "unknown command or flag, a bad value, a template, GPU or file that does "
    "not exist); 3 the planner could not be reached.";

constexpr char kConnectionFooter[] =
    "Connection flags (--server, --token, --tls_ca, --tls_cert, --tls_key, "
    "--deadline_ms) may come anywhere; see headroom --help.";

// Flags may be spelled with dashes (--params-b) as well as underscores.
std::vector<std::string> NormalizeFlagNames(std::vector<std::string> args) {
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

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// Everything the flags fill in, one field per flag.
struct Parsed {
  Options options;
  ProbeOptions probe;
  MicrobatchPlanOptions plan;
  EnergyOptions energy;
  EnergyProbeOptions energy_probe;
  std::string policy;
  std::string record;
  std::string output;
  std::string id;
};

// The flags of a model and its training setup (fit, probe submit,
// microbatch plan and autotune).
void AddModelFlags(CLI::App* app, Options& o, bool compile_flag = true) {
  app->add_option("--model", o.model,
                  "catalog template, or a spec, config.json or ONNX file");
  app->add_option("--onnx", o.onnx,
                  "an ONNX model file (its weights are not sent)");
  app->add_option("--gpu", o.gpu,
                  "GPU names or sizes in GB, comma-separated (headroom gpus)");
  AddSetupFlags(app, o, compile_flag);
}

void AddJson(CLI::App* app, Options& o) {
  app->add_flag("--json", o.json, "print JSON instead of a table");
}

void AddPlanFlags(CLI::App* app, MicrobatchPlanOptions& plan) {
  app->add_option("--context", plan.context, "tokens per sample");
  app->add_option("--global_batch", plan.global_batch, "samples per update");
  app->add_option("--candidates", plan.candidates,
                  "microbatches, e.g. 8,16,32");
  app->add_flag("--compile", plan.compile, "plan compiled mode too");
  app->add_option("--attention_backend", plan.attention_backend,
                  "flash, sdpa or eager (default: --fused_attention)");
  app->add_option("--vram_fraction", plan.vram_fraction, "budget fraction");
  app->add_option("--reserve_gb", plan.reserve_gb, "GB kept free");
}

void AddProbeRunFlags(CLI::App* app, ProbeOptions& probe) {
  app->add_option("--worker", probe.worker, "run on this worker id");
  app->add_option("--executor", probe.executor,
                  "torch, cuda or sim (default: the worker's)");
  app->add_option("--steps", probe.steps, "timed steps (0 = 3)");
  app->add_option("--warmup", probe.warmup, "warm-up steps (0 = 1)");
  app->add_flag("--watch", probe.watch,
                "follow the probe to its end (exit 1 if it fails or is "
                "cancelled)");
  app->add_option("--watch_timeout_s", probe.watch_timeout_s,
                  "longest wait in seconds");
}

void AddEnergyCurves(CLI::App* app, EnergyOptions& energy) {
  app->add_flag("--offline", energy.offline,
                "compute here from a curves file instead of asking the "
                "planner");
  app->add_option("--curves", energy.curves,
                  "with --offline: the curve set file (default: the shipped "
                  "energy-curves.json)");
}

// The deepest subcommand the arguments selected (the top app when none).
CLI::App* Selected(CLI::App* app) {
  for (;;) {
    std::vector<CLI::App*> chosen = app->get_subcommands();
    if (chosen.empty()) return app;
    app = chosen.front();
  }
}

std::string CommandPath(const CLI::App* app) {
  std::vector<std::string> names;
  for (; app != nullptr; app = app->get_parent()) {
    names.insert(names.begin(), app->get_name());
  }
  return absl::StrJoin(names, " ");
}

std::vector<std::string> SubcommandNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands({})) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> FlagNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (; app != nullptr; app = app->get_parent()) {
    for (const CLI::Option* option : app->get_options()) {
      for (const std::string& name : option->get_lnames()) {
        names.push_back("--" + name);
      }
    }
  }
  return names;
}

// "unknown command 'fitt' (closest: fit); see headroom --help".
int FailUnknown(const CLI::App* where, const std::string& word,
                std::ostream& err) {
  const bool flag = word.rfind("-", 0) == 0;
  std::string name = word.substr(0, word.find('='));
  const std::string closest =
      ClosestMatch(name, flag ? FlagNames(where) : SubcommandNames(where));
  std::string message;
  if (flag) {
    message =
        absl::StrCat("unknown flag ", name, " for '", CommandPath(where), "'");
  } else if (!SubcommandNames(where).empty()) {
    message = absl::StrCat("unknown command '", word, "' for '",
                           CommandPath(where), "'");
  } else {
    message = absl::StrCat("unexpected argument '", word, "' for '",
                           CommandPath(where), "'");
  }
  if (flag && closest == name) {
    // A command's flag given before the command.
    absl::StrAppend(&message, "; ", name,
                    " belongs to a command: put it after the command's name");
  } else if (!closest.empty()) {
    absl::StrAppend(&message, "; closest: ", closest);
  }
  absl::StrAppend(&message, " (see ", CommandPath(where), " --help)");
  return Fail(err, message, kExitUsage);
}

}  // namespace

std::string ClosestMatch(const std::string& word,
                         const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    // A prefix ("--batc") is as close as a typo.
    const bool prefix =
        word.size() >= 3 && candidate.rfind(word, 0) == 0 && distance > 0;
    const size_t score = prefix ? 1 : distance;
    if (score < best_distance) {
      best_distance = score;
      best = candidate;
    }
  }
  return best;
}

int RunCli(const std::vector<std::string>& raw_args, std::ostream& out,
           std::ostream& err) {
  Parsed p;
  Options& o = p.options;
  std::string tls_ca, tls_cert, tls_key, token;
  CLI::App app{
      "headroom: will this training job fit on this GPU? The planner's "
      "command-line client for schedulers (--json) and operators.",
      "headroom"};
  app.option_defaults()->always_capture_default();
  app.allow_extras();
  app.fallthrough();
  app.footer(kExitCodes);
  app.set_help_flag("-h,--help", "print this command's flags and exit");
  app.add_option("--server", o.server, "planner address");
  app.add_option("--token", token,
                 "bearer token for a planner with --tokens_file (or "
                 "HEADROOM_TOKEN)");
  app.add_option("--tls_ca", tls_ca,
                 "TLS: CA certificate (PEM) of the planner's (or "
                 "HEADROOM_TLS_CA)");
  app.add_option("--tls_cert", tls_cert,
                 "mTLS: client certificate (PEM) (or HEADROOM_TLS_CERT)");
  app.add_option("--tls_key", tls_key,
                 "mTLS: client private key (PEM) (or HEADROOM_TLS_KEY)");
  app.add_option("--deadline_ms", o.deadline_ms,
                 "deadline of each call in milliseconds");
  app.add_option("--models_dir", o.models_dir,
                 "model catalog (offline commands)");

  // What each command runs once its flags are parsed.
  std::map<const CLI::App*, std::function<int()>> actions;
  auto command = [&](CLI::App* parent, const std::string& name,
                     const std::string& about) {
    CLI::App* sub = parent->add_subcommand(name, about);
    sub->footer(absl::StrCat(kConnectionFooter, "\n", kExitCodes));
    return sub;
  };

  CLI::App* fit = command(&app, "fit", "will the model fit on these GPUs?");
  AddModelFlags(fit, o);
  fit->add_option("--batch", o.batch, "batches, comma-separated, e.g. 8,16");
  fit->add_flag("--learn", o.learn,
                "when the answer is prior-only and a target BORDERLINE, queue "
                "a small probe on a connected worker so later answers are "
                "anchored");
  fit->add_flag("--include_simulated", o.include_simulated,
                "let runs measured on simulated GPUs anchor the answer");
  fit->add_option("--coverage", o.coverage,
                  "upper-bound coverage 0.9 or 0.95 (0: the server's)");
  AddJson(fit, o);
  actions[fit] = [&] { return Fit(o, out, err); };

  CLI::App* models = command(&app, "models", "the model catalog's templates");
  AddJson(models, o);
  actions[models] = [&] { return ListModels(o, out, err); };
  CLI::App* gpus = command(&app, "gpus", "the GPU catalog");
  AddJson(gpus, o);
  actions[gpus] = [&] { return ListGpus(o, out, err); };

  CLI::App* calib = command(&app, "calib", "the calibration page");
  CLI::App* calib_page =
      command(calib, "page", "the calibration page, offline, from runs");
  calib_page->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  calib_page->add_option("--svg", o.svg,
                         "also write the predicted-vs-measured plot here");
  AddJson(calib_page, o);
  actions[calib_page] = [&] { return CalibPage(o, out, err); };
  CLI::App* calib_rows =
      command(calib, "rows", "per-run predictions, offline, from runs");
  calib_rows->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  AddJson(calib_rows, o);
  actions[calib_rows] = [&] { return CalibRows(o, out, err); };
  CLI::App* calib_show = command(calib, "show", "the server's factor set");
  calib_show->add_option("--version", o.version,
                         "factor-set version (default current)");
  actions[calib_show] = [&] { return CalibShow(o, out, err); };
  CLI::App* calib_eval =
      command(calib, "eval", "fit on --train, predict --test, offline");
  calib_eval->add_option("--train", o.train, "runs to fit on (JSON lines)");
  calib_eval->add_option("--test", o.test, "runs to predict (JSON lines)");
  calib_eval->add_option("--coverage", o.coverage,
                         "upper-bound coverage 0.9 or 0.95");
  AddJson(calib_eval, o);
  actions[calib_eval] = [&] { return CalibEval(o, out, err); };

  CLI::App* refit = command(
      &app, "refit",
      "import runs and refit on the server; nothing is stored if the deadline "
      "(10 x --deadline_ms) passes first");
  refit->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  refit->add_flag("--force", o.force, "make the new factor set current anyway");
  refit->add_flag("--dry_run", o.dry_run, "fit and report, store nothing");
  AddJson(refit, o);
  actions[refit] = [&] { return Refit(o, out, err); };

  CLI::App* factors = command(&app, "factors", "the server's factor sets");
  CLI::App* factors_list = command(factors, "list", "every factor set");
  AddJson(factors_list, o);
  actions[factors_list] = [&] { return FactorsList(o, out, err); };
  CLI::App* factors_show = command(factors, "show", "one factor set");
  factors_show->add_option("--version", o.version,
                           "factor-set version (default current)");
  actions[factors_show] = [&] { return CalibShow(o, out, err); };
  CLI::App* factors_promote =
      command(factors, "promote", "make a factor set current");
  factors_promote->add_option("--version", o.version,
                              "factor-set version, e.g. fs-2");
  actions[factors_promote] = [&] { return FactorsPromote(o, false, out, err); };
  CLI::App* factors_rollback =
      command(factors, "rollback", "make the previous factor set current");
  actions[factors_rollback] = [&] { return FactorsPromote(o, true, out, err); };

  CLI::App* model = command(&app, "model", "one model's memory, offline");
  CLI::App* inspect =
      command(model, "inspect",
              "where memory comes from (TEMPLATE, or FILE: a spec, "
              "config.json or .onnx)");
  inspect->add_option("model", o.model, "TEMPLATE|FILE")->required();
  inspect->add_option("--batch", o.batch, "batch");
  AddSetupFlags(inspect, o);
  AddJson(inspect, o);
  actions[inspect] = [&] { return ModelInspect(o, out, err); };
  CLI::App* convert =
      command(model, "convert", "a HF config.json or an ONNX file -> a spec");
  convert->add_option("file", p.id, "CONFIG.json|FILE.onnx")->required();
  convert->add_option("-o", p.output, "write the spec here (- = stdout)");
  convert->add_option("--positions", o.positions,
                      "sequence length / tokens per sample");
  actions[convert] = [&] {
    return ModelConvert(p.id, o.positions, p.output, out, err);
  };

  CLI::App* microbatch =
      command(&app, "microbatch", "microbatch plans and autotune");
  CLI::App* select =
      command(microbatch, "select", "the microbatch an autotune record chose");
  select->add_option("--record", p.record, "an autotune record");
  select->add_option("--policy", p.policy,
                     "max_batch or max_throughput (default: the record's)");
  AddJson(select, o);
  actions[select] = [&] {
    return MicrobatchSelect(p.record, p.policy, o.json, out, err);
  };
  CLI::App* plan = command(microbatch, "plan", "a microbatch plan");
  AddModelFlags(plan, o, /*compile_flag=*/false);
  AddPlanFlags(plan, p.plan);
  plan->add_option("--cache_key", p.plan.cache_key,
                   "a cache key (or record) JSON file to look up");
  AddJson(plan, o);
  actions[plan] = [&] { return MicrobatchPlan(o, p.plan, out, err); };
  CLI::App* autotune =
      command(microbatch, "autotune", "measure candidates on a worker");
  AddModelFlags(autotune, o, /*compile_flag=*/false);
  AddPlanFlags(autotune, p.plan);
  AddProbeRunFlags(autotune, p.probe);
  autotune->add_option("--policy", p.policy, "max_batch or max_throughput");
  AddJson(autotune, o);
  actions[autotune] = [&] {
    return MicrobatchAutotune(o, p.plan, p.probe, p.policy, out, err);
  };
  CLI::App* cache = command(microbatch, "cache", "the autotune cache");
  CLI::App* cache_list = command(cache, "list", "every cached record");
  AddJson(cache_list, o);
  actions[cache_list] = [&] { return MicrobatchCacheList(o, out, err); };
  CLI::App* cache_put = command(cache, "put", "store a record");
  cache_put->add_option("--record", p.record, "an autotune record");
  AddJson(cache_put, o);
  actions[cache_put] = [&] {
    return MicrobatchCachePut(o, p.record, out, err);
  };
  CLI::App* cache_drop = command(cache, "drop", "drop a record");
  cache_drop->add_option("id", p.id, "ID")->required();
  actions[cache_drop] = [&] { return MicrobatchCacheDrop(o, p.id, out, err); };

  CLI::App* density = command(&app, "density", "density, offline");
  CLI::App* rank = command(density, "rank", "the density leaderboard");
  rank->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  AddJson(rank, o);
  actions[rank] = [&] {
    if (o.runs.empty()) {
      return Fail(err, "--runs FILE is required (measured runs, JSON lines)");
    }
    return DensityRank(o.runs, o.json, out, err);
  };

  EnergyOptions& e = p.energy;
  CLI::App* energy = command(&app, "energy",
                             "energy per 1k tokens of a model on a GPU (the "
                             "planner's, or --offline), training energy, and "
                             "the server's curve sets");
  energy->add_option("--params_b", e.params_b, "parameters in billions");
  energy->add_option("--gpu", e.gpu, "a catalog GPU name (headroom gpus)");
  energy->add_option("--arch", e.arch, "GPU architecture (instead of --gpu)");
  energy->add_option("--quant", e.quant, "fp16, nf4 or int8");
  AddEnergyCurves(energy, e);
  energy->add_flag("--json", e.json, "print JSON instead of a table");
  actions[energy] = [&] { return EnergyEstimate(o, e, out, err); };
  CLI::App* energy_refit = command(energy, "refit", "refit the curve set");
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
  actions[energy_refit] = [&] {
    if (e.stored) return EnergyRefitStored(o, e, out, err);
    if (e.include_simulated || e.force) {
      return Fail(err, "--include_simulated and --force need --stored");
    }
    return EnergyRefit(o, e, out, err);
  };
  CLI::App* energy_probe = command(
      energy, "probe", "measure generation energy on a worker (queue a probe)");
  energy_probe->add_option("--model", o.model,
                           "catalog template, or a spec, config.json or ONNX "
                           "file");
  energy_probe->add_option("--gpu", o.gpu, "a catalog GPU kind, e.g. L4");
  energy_probe->add_option("--quant", p.energy_probe.quant,
                           "fp16,nf4,int8 (default: all three)");
  energy_probe->add_option("--prompt_tokens", p.energy_probe.prompt_tokens,
                           "prompt length (0 = 64)");
  energy_probe->add_option("--new_tokens", p.energy_probe.new_tokens,
                           "tokens generated in the window (0 = 128)");
  energy_probe->add_option("--repetitions", p.probe.repetitions,
                           "windows per quantization (0 = 1)");
  energy_probe->add_option("--batch_timeout_s", p.energy_probe.batch_timeout_s,
                           "seconds per quantization (0 = 600)");
  energy_probe->add_option("--worker", p.probe.worker, "run on this worker id");
  energy_probe->add_option("--executor", p.probe.executor,
                           "torch or sim (default: the worker's)");
  energy_probe->add_flag("--watch", p.probe.watch,
                         "follow the probe to its end (exit 1 if it fails)");
  energy_probe->add_option("--watch_timeout_s", p.probe.watch_timeout_s,
                           "longest wait in seconds");
  AddJson(energy_probe, o);
  actions[energy_probe] = [&] {
    return EnergyProbeSubmit(o, p.probe, p.energy_probe, out, err);
  };
  CLI::App* energy_plot = command(energy, "plot", "plot one architecture");
  energy_plot->add_option("--arch", e.arch, "GPU architecture");
  energy_plot->add_option("--svg", e.svg, "the SVG file to write");
  energy_plot->add_flag("--include_simulated", e.include_simulated,
                        "draw points measured on simulated GPUs too");
  energy_plot->add_option("--runs", e.runs,
                          "with --offline: energy runs (JSON lines) to draw");
  AddEnergyCurves(energy_plot, e);
  actions[energy_plot] = [&] { return EnergyPlot(o, e, out, err); };
  CLI::App* energy_train =
      command(energy, "train", "joules per training step and per 1k tokens");
  AddModelFlags(energy_train, o);
  energy_train->add_option("--batch", o.batch, "samples per step");
  energy_train->add_flag("--include_simulated", o.include_simulated,
                         "let runs measured on simulated GPUs answer");
  AddJson(energy_train, o);
  actions[energy_train] = [&] { return EnergyTrain(o, out, err); };
  CLI::App* curves = command(energy, "curves", "the server's curve sets");
  AddJson(curves, o);
  actions[curves] = [&] { return EnergyCurvesList(o, out, err); };
  CLI::App* energy_promote =
      command(energy, "promote", "make a curve set current");
  energy_promote->add_option("--version", o.version,
                             "curve-set version, e.g. ec-2");
  actions[energy_promote] = [&] {
    return EnergyCurvesPromote(o, false, out, err);
  };
  CLI::App* energy_rollback =
      command(energy, "rollback", "make the previous curve set current");
  actions[energy_rollback] = [&] {
    return EnergyCurvesPromote(o, true, out, err);
  };

  CLI::App* workers = command(&app, "workers", "worker daemons and their GPUs");
  AddJson(workers, o);
  actions[workers] = [&] { return Workers(o, out, err); };

  CLI::App* probe = command(&app, "probe", "measurements on workers");
  CLI::App* submit = command(probe, "submit", "queue a probe");
  AddModelFlags(submit, o);
  submit->add_option("--batch", o.batch, "batches, comma-separated");
  AddProbeRunFlags(submit, p.probe);
  submit->add_option("--repetitions", p.probe.repetitions,
                     "runs per batch (0 = 1)");
  submit->add_option("--expires_s", p.probe.expires_s,
                     "fail the probe if still queued this many seconds after "
                     "submission (0: never)");
  AddJson(submit, o);
  actions[submit] = [&] { return ProbeSubmit(o, p.probe, out, err); };
  CLI::App* watch = command(probe, "watch", "follow a probe to its end");
  watch->add_option("id", p.id, "ID")->required();
  watch->add_option("--watch_timeout_s", p.probe.watch_timeout_s,
                    "longest wait in seconds");
  AddJson(watch, o);
  actions[watch] = [&] { return ProbeWatch(o, p.probe, p.id, out, err); };
  CLI::App* cancel = command(probe, "cancel", "cancel a probe");
  cancel->add_option("id", p.id, "ID")->required();
  AddJson(cancel, o);
  actions[cancel] = [&] { return ProbeCancel(o, p.id, out, err); };
  CLI::App* list = command(probe, "list", "probes");
  list->add_option("--state", p.probe.state,
                   "only this state: queued, running, succeeded, failed, "
                   "cancelled");
  AddJson(list, o);
  actions[list] = [&] { return ProbeList(o, p.probe, out, err); };

  CLI::App* health = command(&app, "health", "the server's health status");
  actions[health] = [&] { return Health(o, out, err); };

  const std::vector<std::string> args = NormalizeFlagNames(raw_args);
  std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    CLI::App* where = Selected(&app);
    out << (where->get_parent() == nullptr
                ? where->help()
                : where->help(CommandPath(where->get_parent())));
    return kExitAnswer;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitAnswer;
  } catch (const CLI::ParseError& e) {
    CLI::App* where = Selected(&app);
    return Fail(
        err, absl::StrCat(e.what(), " (see ", CommandPath(where), " --help)"),
        kExitUsage);
  }
  CLI::App* where = Selected(&app);
  // An unknown word or flag, named in the command it was given to.
  for (CLI::App* level = where; level != nullptr; level = level->get_parent()) {
    const std::vector<std::string> extras = level->remaining();
    if (!extras.empty()) return FailUnknown(where, extras.front(), err);
  }
  auto action = actions.find(where);
  if (action == actions.end()) {
    if (where == &app) {
      err << app.help();
      return Fail(err, "give a command", kExitUsage);
    }
    return Fail(err,
                absl::StrCat("'", CommandPath(where), "' needs a command: ",
                             absl::StrJoin(SubcommandNames(where), ", "),
                             " (see ", CommandPath(where), " --help)"),
                kExitUsage);
  }

  o.security.token = token;
  o.security.tls_ca = tls_ca;
  o.security.tls_cert = tls_cert;
  o.security.tls_key = tls_key;
  SecurityFromEnvironment(&o.security);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      OpenChannel(o.server, o.security, ChannelArgs());
  if (!channel.ok()) {
    return Fail(err, std::string(channel.status().message()), kExitUsage);
  }
  o.channel = *std::move(channel);
  // The shipped catalogs, found from any working directory; a missing one is
  // reported by the command that needs it.
  o.models_dir = FindShipped(o.models_dir, "models_dir").value_or(o.models_dir);
  return action->second();
}

}  // namespace headroom::cli
