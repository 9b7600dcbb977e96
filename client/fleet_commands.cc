#include "client/fleet_commands.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <map>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/json_io.h"
#include "base/units.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/rpc.h"
#include "client/setup_flags.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "nlohmann/json.hpp"

namespace headroom::cli {
namespace {

std::string StateName(v1::Probe::State state) {
  return absl::AsciiStrToLower(v1::Probe::State_Name(state));
}

void PrintResult(const v1::BatchResult& r, std::ostream& out) {
  out << "batch " << r.batch();
  if (!r.mode().empty()) out << " " << r.mode();
  out << " rep " << r.repetition() << ": ";
  if (!r.error().empty()) {
    out << "error: " << r.error();
  } else if (r.has_generation()) {
    const v1::GenerationEnergy& g = r.generation();
    out << std::fixed << std::setprecision(1) << g.j_per_1k_tokens()
        << " J per 1k tokens, " << g.tokens_per_s() << " tokens/s, "
        << g.tokens_generated() << " tokens in " << std::setprecision(3)
        << g.window_s() << " s, " << g.energy_j() << " J, idle "
        << std::setprecision(1) << g.idle_w() << " W";
  } else if (r.oom()) {
    out << "OOM";
  } else {
    out << std::fixed << std::setprecision(3);
    if (r.has_peak_allocated_gb()) {
      out << "peak " << r.peak_allocated_gb() << " GB";
    }
    if (!r.rank_peaks_gb().empty()) {
      out << " (ranks "
          << absl::StrJoin(r.rank_peaks_gb(), " ",
                           [](std::string* to, double gb) {
                             absl::StrAppend(to, absl::StrFormat("%.3f", gb));
                           })
          << ")";
    }
    if (r.has_host_peak_gb()) out << ", host " << r.host_peak_gb() << " GB";
    if (r.has_device_peak_gb()) {
      out << ", device " << r.device_peak_gb() << " GB";
    }
    if (r.has_step_seconds()) out << ", " << r.step_seconds() << " s/step";
    if (r.has_energy_j()) out << ", " << r.energy_j() << " J";
  }
  out << " (" << r.samples() << " samples"
      << (r.simulated() ? ", simulated" : "") << ")\n";
}

void PrintProbe(const v1::Probe& p, std::ostream& out) {
  out << p.id() << " " << StateName(p.state()) << " " << p.spec().name()
      << " on " << (p.gpu().empty() ? p.request().worker() : p.gpu());
  if (p.request().has_energy()) {
    out << " energy " << absl::StrJoin(p.request().energy().quants(), ",");
  } else {
    out << " batches " << absl::StrJoin(p.request().batches(), ",");
  }
  out << " attempts " << p.attempts();
  if (!p.worker().empty()) out << " worker " << p.worker();
  if (!p.error().empty()) out << " error: " << p.error();
  out << "\n";
}

}  // namespace

// The listing's JSON with the memory in GB beside the bytes, as the table
// prints it: hello.hostMemoryGb and each gpus[i].memoryGb (10^9 bytes, two
// places).
nlohmann::json WorkersJson(const v1::ListWorkersResponse& response) {
  nlohmann::json json = CliJsonValue(response);
  const auto gb = [](uint64_t bytes) {
    return std::round(static_cast<double>(bytes) / 1e7) / 100;
  };
  nlohmann::json& workers = json["workers"];
  for (int i = 0; i < response.workers_size() && i < int(workers.size()); ++i) {
    const v1::WorkerHello& hello = response.workers(i).hello();
    nlohmann::json& h = workers[i]["hello"];
    if (!h.is_object()) continue;
    h["hostMemoryGb"] = gb(hello.host_memory_bytes());
    nlohmann::json& gpus = h["gpus"];
    for (int g = 0; g < hello.gpus_size() && g < int(gpus.size()); ++g) {
      gpus[g]["memoryGb"] = gb(hello.gpus(g).memory_bytes());
    }
  }
  return json;
}

int Workers(const Options& options, std::ostream& out, std::ostream& err) {
  v1::ListWorkersRequest request;
  request.set_page_size(500);
  v1::ListWorkersResponse response;
  const grpc::Status status =
      ListAllPages(options, &v1::Fleet::Stub::ListWorkers, request, &response);
  if (!status.ok()) return FailRpc(err, options, status);
  if (options.json) {
    out << WorkersJson(response).dump(2) << "\n";
    return 0;
  }
  if (response.workers().empty()) {
    out << "no workers have connected\n";
    return 0;
  }
  for (const v1::WorkerStatus& w : response.workers()) {
    out << w.hello().worker_id() << "  "
        << (w.connected() ? "connected" : "disconnected") << "  executors "
        << absl::StrJoin(w.hello().executors(), ",");
    out << "  gpus " << w.hello().gpus_size() << "  host memory ";
    if (w.hello().host_memory_bytes() > 0) {
      out << FormatGb(
          BytesToGb(static_cast<double>(w.hello().host_memory_bytes())), 1);
    } else {
      out << "unknown";
    }
    if (!w.running_probe().empty()) out << "  running " << w.running_probe();
    if (w.connected()) out << "  samples " << w.samples_received();
    out << "\n";
    for (const v1::GpuDevice& g : w.hello().gpus()) {
      out << "  gpu " << g.index() << ": " << g.name() << ", "
          << FormatGb(BytesToGb(static_cast<double>(g.memory_bytes())), 1);
      if (!g.catalog_gpu().empty())
        out << " (catalog " << g.catalog_gpu() << ")";
      if (!g.compute_capability().empty()) {
        out << ", cc " << g.compute_capability();
      }
      if (!g.driver_version().empty()) out << ", driver " << g.driver_version();
      if (g.simulated()) out << ", SIMULATED";
      if (!g.simulated() && !g.energy_supported()) out << ", no energy counter";
      out << "\n";
    }
    for (const std::string& note : w.hello().notes()) {
      out << "  note: " << note << "\n";
    }
  }
  return 0;
}

int ProbeSubmit(const Options& options, const ProbeOptions& probe,
                std::ostream& out, std::ostream& err) {
  if (MinGpusAsked(options)) {
    return Fail(err,
                "--gpus auto asks a fit answer for the smallest count; a probe "
                "runs on a given count: --gpus 1..16 (one node)");
  }
  absl::StatusOr<v1::CheckFitRequest> fit =
      FitRequest(options, /*require_targets=*/false);
  if (!fit.ok()) return Fail(err, std::string(fit.status().message()));
  v1::SubmitProbeRequest request;
  *request.mutable_model() = fit->model();
  *request.mutable_setup() = fit->setup();
  *request.mutable_batches() = fit->batches();
  absl::StatusOr<ProbePlacement> placement = PlacementOf(probe, *fit);
  if (!placement.ok()) {
    return Fail(err, std::string(placement.status().message()));
  }
  request.set_worker(placement->worker);
  request.set_gpu(placement->gpu);
  request.set_repetitions(probe.repetitions);
  request.set_executor(probe.executor);
  request.set_steps(probe.steps);
  request.set_warmup_steps(probe.warmup);
  request.set_expires_s(probe.expires_s);
  v1::SubmitProbeResponse response;
  if (const int code =
          Call(options, &v1::Fleet::Stub::SubmitProbe, request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  return AfterSubmit(options, probe, response, response.probe().id(), out, err);
}

absl::StatusOr<ProbePlacement> PlacementOf(const ProbeOptions& probe,
                                           const v1::CheckFitRequest& fit) {
  ProbePlacement placement;
  if (!probe.worker.empty()) {
    if (!fit.targets().empty()) {
      return absl::InvalidArgumentError(
          "give --gpu KIND or --worker ID, not both");
    }
    placement.worker = probe.worker;
  } else if (fit.targets_size() == 1 && fit.targets(0).has_gpu()) {
    placement.gpu = fit.targets(0).gpu();
  } else {
    return absl::InvalidArgumentError(
        "--gpu KIND (one catalog GPU, e.g. --gpu L4) or --worker ID is "
        "required");
  }
  return placement;
}

int AfterSubmit(const Options& options, const ProbeOptions& probe,
                const v1::SubmitProbeResponse& response,
                const std::string& submitted, std::ostream& out,
                std::ostream& err) {
  if (!response.warning().empty()) {
    err << "warning: " << response.warning() << "\n";
  }
  if (options.json && !probe.watch) {
    out << CliJson(response.probe()) << "\n";
    return 0;
  }
  if (!options.json) out << "submitted " << submitted << "\n";
  if (!probe.watch) return 0;
  return ProbeWatch(options, probe, response.probe().id(), out, err);
}

int ProbeWatch(const Options& options, const ProbeOptions& probe,
               const std::string& id, std::ostream& out, std::ostream& err) {
  auto stub = v1::Fleet::NewStub(Connect(options));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(probe.watch_timeout_s));
  v1::WatchProbeRequest request;
  request.set_id(id);
  request.set_follow(true);
  auto reader = stub->WatchProbe(&context, request);
  const bool live = isatty(STDERR_FILENO) != 0;
  // Progress of the batch running now: samples, peak, first sample time.
  uint32_t batch = 0;
  uint64_t samples = 0;
  double peak_mib = 0;
  int64_t elapsed_ms = 0;
  v1::Probe last;
  bool first_snapshot = true;
  v1::ProbeEvent event;
  while (reader->Read(&event)) {
    if (options.json) {
      out << CliJson(event, /*pretty=*/false) << "\n";
      out.flush();
    }
    switch (event.kind_case()) {
      case v1::ProbeEvent::kProbe:
        last = event.probe();
        if (!options.json) {
          PrintProbe(last, out);
          // The first event, the snapshot, holds the results measured
          // before the watch began; later ones come as result events.
          if (first_snapshot) {
            for (const v1::BatchResult& r : last.results()) PrintResult(r, out);
          }
        }
        first_snapshot = false;
        break;
      case v1::ProbeEvent::kSamples:
        for (const v1::Sample& s : event.samples().samples()) {
          if (s.batch() != batch) {
            batch = s.batch();
            samples = 0;
            peak_mib = 0;
          }
          ++samples;
          peak_mib = std::max(peak_mib, s.fb_used_mib());
          elapsed_ms = s.t_ms();
        }
        if (live && !options.json) {
          err << "\rbatch " << batch << ": " << samples << " samples, peak "
              << std::fixed << std::setprecision(2) << peak_mib / 1024.0
              << " GiB, " << std::setprecision(1) << elapsed_ms / 1000.0
              << " s   " << std::flush;
        }
        break;
      case v1::ProbeEvent::kResult:
        if (live && !options.json) err << "\r" << std::string(60, ' ') << "\r";
        if (!options.json) PrintResult(event.result(), out);
        break;
      case v1::ProbeEvent::KIND_NOT_SET:
        break;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return FailRpc(err, options, status);
  switch (last.state()) {
    case v1::Probe::SUCCEEDED:
      return kExitAnswer;
    case v1::Probe::CANCELLED:
      return Fail(err,
                  absl::StrCat("probe ", id, " was cancelled",
                               last.error().empty() ? "" : ": ", last.error(),
                               "; nothing was measured after that"),
                  kExitRefused);
    case v1::Probe::FAILED:
      return Fail(err,
                  absl::StrCat("probe ", id, " failed",
                               last.error().empty() ? "" : ": ", last.error()),
                  kExitRefused);
    default:
      return Fail(
          err,
          absl::StrCat("probe ", id, " is still ", StateName(last.state()),
                       "; the watch ended first (--watch_timeout_s)"),
          kExitRefused);
  }
}

namespace {

// The probe as stored now (WatchProbe without follow: one snapshot).
grpc::Status ProbeNow(const Options& options, const std::string& id,
                      v1::Probe* probe) {
  auto stub = v1::Fleet::NewStub(Connect(options));
  grpc::ClientContext context;
  SetDeadline(context, options);
  v1::WatchProbeRequest request;
  request.set_id(id);
  auto reader = stub->WatchProbe(&context, request);
  v1::ProbeEvent event;
  while (reader->Read(&event)) {
    if (event.has_probe()) *probe = event.probe();
  }
  return reader->Finish();
}

bool Finished(v1::Probe::State state) {
  return state == v1::Probe::SUCCEEDED || state == v1::Probe::FAILED ||
         state == v1::Probe::CANCELLED;
}

}  // namespace

int ProbeCancel(const Options& options, const std::string& id,
                std::ostream& out, std::ostream& err) {
  // The planner answers a cancel of a finished probe with the probe as it
  // is: look first, so the answer says what happened.
  v1::Probe before;
  if (const grpc::Status status = ProbeNow(options, id, &before);
      !status.ok()) {
    return FailRpc(err, options, status);
  }
  if (Finished(before.state())) {
    return Fail(err,
                absl::StrCat("probe ", id, " had already ",
                             before.state() == v1::Probe::CANCELLED
                                 ? "been cancelled"
                                 : StateName(before.state()),
                             "; nothing to cancel (headroom probe list)"),
                kExitRefused);
  }
  v1::CancelProbeRequest request;
  request.set_id(id);
  v1::CancelProbeResponse response;
  if (const int code =
          Call(options, &v1::Fleet::Stub::CancelProbe, request, &response, err);
      code != kExitAnswer) {
    return code;
  }
  if (options.json) {
    out << CliJson(response.probe()) << "\n";
  } else {
    PrintProbe(response.probe(), out);
  }
  if (response.probe().state() != v1::Probe::CANCELLED) {
    // It finished between the look and the cancel.
    return Fail(err,
                absl::StrCat("probe ", id, " finished (",
                             StateName(response.probe().state()),
                             ") before the cancel reached it"),
                kExitRefused);
  }
  return 0;
}

int ProbeList(const Options& options, const ProbeOptions& probe,
              std::ostream& out, std::ostream& err) {
  v1::ListProbesRequest request;
  if (!probe.state.empty()) {
    v1::Probe::State state;
    if (!v1::Probe::State_Parse(absl::AsciiStrToUpper(probe.state), &state) ||
        state == v1::Probe::STATE_UNSPECIFIED) {
      return Fail(err, absl::StrCat("--state '", probe.state,
                                    "' is unknown; allowed queued, running, "
                                    "succeeded, failed, cancelled"));
    }
    request.set_state(state);
  }
  request.set_page_size(500);
  v1::ListProbesResponse response;
  const grpc::Status status =
      ListAllPages(options, &v1::Fleet::Stub::ListProbes, request, &response);
  if (!status.ok()) return FailRpc(err, options, status);
  if (options.json) {
    out << CliJson(response) << "\n";
    return 0;
  }
  if (response.probes().empty()) out << "no probes\n";
  for (const v1::Probe& p : response.probes()) PrintProbe(p, out);
  return 0;
}

void AddProbeRunFlags(CLI::App* app, ProbeOptions& probe) {
  app->add_option("--worker", probe.worker, "run on this worker id");
  app->add_option("--executor", probe.executor,
                  "torch, cuda or sim (default: the worker's)");
  ShownDefault(app->add_option("--steps", probe.steps, "timed steps"), "3");
  ShownDefault(app->add_option("--warmup", probe.warmup, "warm-up steps"), "1");
  app->add_flag("--watch", probe.watch,
                "follow the probe to its end (exit 1 if it fails or is "
                "cancelled)");
  app->add_option("--watch_timeout_s", probe.watch_timeout_s,
                  "longest wait in seconds");
}

void RegisterFleetCommands(CLI::App& app, CliContext& ctx) {
  struct Flags {
    ProbeOptions probe;
    std::string id;
  };
  Flags& f = ctx.Keep<Flags>();
  Options& o = ctx.options;
  CLI::App* workers =
      ctx.Command(&app, "workers", "worker daemons and their GPUs");
  AddJson(workers, o);
  ctx.Run(workers, [&ctx] { return Workers(ctx.options, ctx.out, ctx.err); });

  CLI::App* probe = ctx.Command(&app, "probe", "measurements on workers");
  CLI::App* submit = ctx.Command(probe, "submit", "queue a probe");
  AddModelFlags(submit, o);
  submit->add_option("--batch", o.batch, "batches, comma-separated");
  AddProbeRunFlags(submit, f.probe);
  ShownDefault(submit->add_option("--repetitions", f.probe.repetitions,
                                  "runs per batch"),
               "1");
  ShownDefault(submit->add_option("--expires_s", f.probe.expires_s,
                                  "fail the probe if still queued this many "
                                  "seconds after submission (0: never)"),
               "0 (never)");
  AddJson(submit, o);
  ctx.Run(submit, [&ctx, &f] {
    return ProbeSubmit(ctx.options, f.probe, ctx.out, ctx.err);
  });
  CLI::App* watch = ctx.Command(probe, "watch", "follow a probe to its end");
  watch->add_option("id", f.id, "ID")->required();
  watch->add_option("--watch_timeout_s", f.probe.watch_timeout_s,
                    "longest wait in seconds");
  AddJson(watch, o);
  ctx.Run(watch, [&ctx, &f] {
    return ProbeWatch(ctx.options, f.probe, f.id, ctx.out, ctx.err);
  });
  CLI::App* cancel = ctx.Command(probe, "cancel", "cancel a probe");
  cancel->add_option("id", f.id, "ID")->required();
  AddJson(cancel, o);
  ctx.Run(cancel, [&ctx, &f] {
    return ProbeCancel(ctx.options, f.id, ctx.out, ctx.err);
  });
  CLI::App* list = ctx.Command(probe, "list", "probes");
  list->add_option("--state", f.probe.state,
                   "only this state: queued, running, succeeded, failed, "
                   "cancelled");
  AddJson(list, o);
  ctx.Run(list, [&ctx, &f] {
    return ProbeList(ctx.options, f.probe, ctx.out, ctx.err);
  });
}

}  // namespace headroom::cli
