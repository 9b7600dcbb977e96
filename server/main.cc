// headroom-planner: flags in, PlannerApp up, SIGTERM/SIGINT shut it down.

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "server/env_flags.h"
#include "server/service/planner_app.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC listen address");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:9464",
          "HTTP address for /metrics and /healthz (empty disables)");
ABSL_FLAG(std::string, db, "headroom.db", "SQLite file or postgresql:// URL");
ABSL_FLAG(std::string, models_dir, HEADROOM_DEFAULT_MODELS_DIR,
          "model catalog directory");
ABSL_FLAG(std::string, runs, HEADROOM_DEFAULT_RUNS_PATH,
          "measured runs fitted on first start (JSON lines; several files "
          "comma-separated: the reference file and the torch harness's)");
ABSL_FLAG(std::string, extender_listen, "",
          "also serve the Kubernetes scheduler extender (POST "
          "/scheduler/filter, /scheduler/prioritize) on this address; it is "
          "always on the HTTP port");
ABSL_FLAG(int64_t, extender_budget_ms, 50,
          "longest an extender call may take; past it the nodes pass through "
          "(fail open), logged and counted");
ABSL_FLAG(int32_t, import_threads, 2,
          "threads that answer questions about imported models (HF config, "
          "ONNX graph, inline spec), apart from catalog answers; 1..64");
ABSL_FLAG(int32_t, import_queue, 64,
          "imports that may wait for those threads; more are refused with "
          "RESOURCE_EXHAUSTED; 1..100000");
ABSL_FLAG(bool, extender_allow_borderline, false,
          "extender filter: let BORDERLINE nodes through (default FITS only)");
ABSL_FLAG(std::string, extender_prefer, "tightest",
          "extender prioritize: tightest (least GPU memory left free scores "
          "10) or most_room");
ABSL_FLAG(std::string, extender_unknown_gpu, "fail",
          "extender filter: a node whose GPU is unknown (no GFD labels, no "
          "worker) fails or passes");
ABSL_FLAG(std::string, auto_probe, "off",
          "off or on: queue a learning probe for every prior-only answer "
          "with a BORDERLINE target (CheckFitRequest.learn does it for one)");
ABSL_FLAG(std::string, energy_curves, "data/energy-curves.json",
          "energy curves stored on first start");
ABSL_FLAG(double, coverage, 0.95,
          "coverage of the calibrated upper bound for verdicts: 0.9 or 0.95");
ABSL_FLAG(int64_t, probe_lease_ms, 30000,
          "a running probe whose worker is silent this long is re-queued");
ABSL_FLAG(int64_t, worker_heartbeat_ms, 5000,
          "heartbeat period asked of workers (keep well under the lease)");
ABSL_FLAG(int64_t, store_poll_ms, 1000,
          "replicas: how often to pick up a factor set promoted, or probe "
          "changes made, through another planner on the same store "
          "(10..60000)");
ABSL_FLAG(int64_t, grpc_memory_mb, 512,
          "memory gRPC may hold for connections, in MiB: a message larger "
          "than this is cut off while it arrives");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(int, shutdown_grace_ms, 5000,
          "how long in-flight calls may run after SIGTERM");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Headroom planner: will a training job fit on this GPU?\n"
      "Every flag can also be set as HEADROOM_<FLAG> (e.g. HEADROOM_DB).");
  headroom::ApplyEnvironmentToFlags("HEADROOM_");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every mutex for lock-order cycles, inside gRPC's
  // own locks too; that bookkeeping costs about a quarter of the server's
  // throughput (bench/README.md) and finds nothing a test would not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));

  // Block the shutdown signals before any thread starts; one thread waits.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  headroom::PlannerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.http_listen = absl::GetFlag(FLAGS_http_listen);
  config.db_path = absl::GetFlag(FLAGS_db);
  config.models_dir = absl::GetFlag(FLAGS_models_dir);
  config.runs_path = absl::GetFlag(FLAGS_runs);
  config.energy_curves_path = absl::GetFlag(FLAGS_energy_curves);
  config.coverage = absl::GetFlag(FLAGS_coverage);
  const std::string auto_probe = absl::GetFlag(FLAGS_auto_probe);
  if (auto_probe != "off" && auto_probe != "on") {
    spdlog::error(
        "event=start_failed error=\"--auto_probe = {}; allowed off, on\"",
        auto_probe.substr(0, 32));
    return 2;
  }
  config.auto_probe = auto_probe == "on";
  config.extender_listen = absl::GetFlag(FLAGS_extender_listen);
  config.extender_budget_ms = absl::GetFlag(FLAGS_extender_budget_ms);
  config.extender.decide.allow_borderline =
      absl::GetFlag(FLAGS_extender_allow_borderline);
  const std::string prefer = absl::GetFlag(FLAGS_extender_prefer);
  const std::string unknown = absl::GetFlag(FLAGS_extender_unknown_gpu);
  if ((prefer != "tightest" && prefer != "most_room") ||
      (unknown != "fail" && unknown != "pass")) {
    spdlog::error(
        "event=start_failed error=\"--extender_prefer = {} (allowed "
        "tightest, most_room), --extender_unknown_gpu = {} (allowed fail, "
        "pass)\"",
        prefer.substr(0, 32), unknown.substr(0, 32));
    return 2;
  }
  config.extender.decide.prefer_most_room = prefer == "most_room";
  config.extender.decide.fail_unknown_gpu = unknown == "fail";
  config.probe_lease_ms = absl::GetFlag(FLAGS_probe_lease_ms);
  config.worker_heartbeat_ms = absl::GetFlag(FLAGS_worker_heartbeat_ms);
  config.store_poll_ms = absl::GetFlag(FLAGS_store_poll_ms);
  config.import_threads = absl::GetFlag(FLAGS_import_threads);
  config.import_queue = absl::GetFlag(FLAGS_import_queue);
  // Planner start refuses a budget below 4 x the message limit.
  config.grpc_memory_bytes =
      std::min<int64_t>(absl::GetFlag(FLAGS_grpc_memory_mb), int64_t{1} << 20) *
      (int64_t{1} << 20);
  auto app = headroom::PlannerApp::Start(config);
  if (!app.ok()) {
    spdlog::error("event=start_failed error=\"{}\"", app.status().ToString());
    return 1;
  }
  spdlog::info(
      "event=serving grpc=127.0.0.1:{} listen={} http={} db={} factor_set={}",
      (*app)->grpc_port(), config.listen,
      config.http_listen.empty() ? std::string("off")
                                 : "http://" + config.http_listen + "/metrics",
      config.db_path, (*app)->factor_set_version());

  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("event=shutdown signal={}", signal);
    (*app)->Shutdown(
        std::chrono::milliseconds(absl::GetFlag(FLAGS_shutdown_grace_ms)));
  });
  (*app)->Wait();
  waiter.join();
  spdlog::info("event=stopped");
  return 0;
}
