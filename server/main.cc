// headroom-planner: flags in, PlannerApp up, SIGTERM/SIGINT shut it down.

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/synchronization/mutex.h"
#include "common/build_info.h"
#include "common/env_flags.h"
#include "common/logging.h"
#include "common/shipped_files.h"
#include "server/service/planner_app.h"
#include "server/service/rate_limit.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051", "gRPC listen address");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:9464",
          "HTTP address for /metrics and /healthz (empty disables)");
ABSL_FLAG(std::string, db, "headroom.db", "SQLite file or postgresql:// URL");
ABSL_FLAG(int32_t, db_pool, 4,
          "store connections: PostgreSQL's pool (each call takes one, waiting "
          "when all are busy), SQLite's read-only readers");
ABSL_FLAG(bool, db_init, false,
          "make a new store in an existing 0-byte --db file (refused "
          "otherwise: an empty file is likelier a truncated store or a wrong "
          "path); a path with no file is always created");
ABSL_FLAG(std::string, models_dir, HEADROOM_DEFAULT_MODELS_DIR,
          "model catalog directory");
ABSL_FLAG(std::string, runs, HEADROOM_DEFAULT_RUNS_PATH,
          "measured runs fitted on first start (JSON lines; several files "
          "comma-separated: the reference file, the torch harness's and the "
          "published runs, data/published-runs.jsonl, which anchor answers "
          "but never fit the factors; any may be left out)");
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
ABSL_FLAG(int32_t, store_threads, 4,
          "threads that run the RPCs' store reads and writes (and the worker "
          "streams' heartbeats and results), off the gRPC threads; 1..64");
ABSL_FLAG(int32_t, store_queue, 256,
          "store jobs that may wait for those threads; more are refused with "
          "RESOURCE_EXHAUSTED; 1..100000");
ABSL_FLAG(bool, extender_allow_borderline, false,
          "extender filter: let BORDERLINE nodes through (default FITS only)");
ABSL_FLAG(std::string, extender_kube_api, "",
          "extender: read the ConfigMaps headroom.dev/job names through the "
          "Kubernetes API: in-cluster (the Pod's ServiceAccount token and CA) "
          "or an API URL; empty: such pods are told the planner reads none");
ABSL_FLAG(bool, extender_include_simulated, false,
          "extender: let simulated workers' cards name a node's GPU and "
          "simulated runs anchor its answers (default: never)");
ABSL_FLAG(std::string, extender_prefer, "tightest",
          "extender prioritize: tightest (least GPU memory left free scores "
          "10) or most_room");
ABSL_FLAG(std::string, extender_unknown_gpu, "fail",
          "extender filter: a node whose GPU is unknown (no GFD labels, no "
          "worker) fails or passes");
ABSL_FLAG(std::string, auto_probe, "off",
          "off or on: queue a learning probe for every prior-only answer "
          "with a BORDERLINE target (CheckFitRequest.learn does it for one)");
ABSL_FLAG(int, auto_probe_per_caller, 6,
          "with --auto_probe=on: learning probes one caller's reads may queue "
          "per minute (1..10000)");
ABSL_FLAG(int, auto_probe_total, 30,
          "with --auto_probe=on: learning probes all reads together may queue "
          "per minute (1..10000)");
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
ABSL_FLAG(int64_t, dispatch_ms, 250,
          "how often the dispatcher looks at the probe queue and the leases "
          "when nothing wakes it (10..60000)");
ABSL_FLAG(int32_t, max_handbacks, 3,
          "a probe handed back by workers this many times fails instead of "
          "going back to the queue (1..1000)");
ABSL_FLAG(int32_t, expiries_per_pass, 100,
          "queued probes failed for their expiry per dispatcher pass "
          "(1..100000)");
ABSL_FLAG(int64_t, worker_last_seen_ms, 30000,
          "how often a connected worker's last-seen time is stored; a worker "
          "on another replica counts as connected for 2 x this "
          "(1000..3600000)");
ABSL_FLAG(int32_t, worker_max_unhandled, 4096,
          "messages of one worker stream waiting to be handled, at most; "
          "more: the worker is told to reconnect (16..1000000)");
ABSL_FLAG(int64_t, probe_counts_ms, 1000,
          "how often the headroom_probes{state} gauges are read from the "
          "store (100..60000)");
ABSL_FLAG(int64_t, grpc_memory_mb, 512,
          "memory gRPC may hold for connections, in MiB: a message larger "
          "than this is cut off while it arrives");
ABSL_FLAG(std::string, tls_cert, "",
          "TLS: the planner's certificate chain (PEM) for gRPC and the HTTP "
          "ports; with --tls_key");
ABSL_FLAG(std::string, tls_key, "", "TLS: the planner's private key (PEM)");
ABSL_FLAG(std::string, tls_client_ca, "",
          "mTLS: gRPC callers, and HTTP callers of every route but /healthz, "
          "must present a certificate signed by this CA (PEM); a worker's id "
          "must then be its certificate's CN");
ABSL_FLAG(std::string, tokens_file, "",
          "bearer tokens, one line each: NAME ROLE SHA256HEX (roles reader, "
          "operator, admin; the hex SHA-256 of the token). Without it, over "
          "TLS every mutating call is refused");
ABSL_FLAG(bool, require_token_for_reads, false,
          "reads need a token too: CheckFit, lists, gRPC reflection (then "
          "not served), and on the HTTP port /calibration, /energy, the "
          "scheduler extender and /metrics (see --metrics_access)");
ABSL_FLAG(std::string, metrics_access, "reads",
          "who may scrape /metrics: reads (what reads need: anyone unless "
          "--require_token_for_reads or --tls_client_ca) or open (anyone, "
          "like /healthz)");
ABSL_FLAG(bool, allow_insecure, false,
          "serve plaintext on a non-loopback address (without TLS the "
          "planner otherwise listens on loopback only)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");
ABSL_FLAG(int, shutdown_grace_ms, 5000,
          "how long in-flight calls may run after SIGTERM");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Usage: headroom-planner [--flag=value ...]\n"
      "Headroom planner: will a training job fit on this GPU?\n"
      "Every flag can also be set as HEADROOM_<FLAG> (e.g. HEADROOM_DB); "
      "--version prints the build.");
  if (headroom::PrintHelpIfAsked(argc, argv, __FILE__, std::cout)) return 0;
  if (headroom::PrintVersionIfAsked(argc, argv, "headroom-planner",
                                    std::cout)) {
    return 0;
  }
  headroom::ApplyEnvironmentToFlags("HEADROOM_");
  absl::ParseCommandLine(argc, argv);
  // Debian's Abseil checks every mutex for lock-order cycles, inside gRPC's
  // own locks too; that bookkeeping costs about a quarter of the server's
  // throughput (bench/README.md) and finds nothing a test would not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  headroom::SetUpLogging(absl::GetFlag(FLAGS_log_level));

  // Block the shutdown signals before any thread starts; one thread waits.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Protobuf's own lines (one per undecodable request) through spdlog,
  // rate-limited.
  headroom::RateLimitProtobufLogs();
  headroom::PlannerConfig config;
  config.listen = absl::GetFlag(FLAGS_listen);
  config.http_listen = absl::GetFlag(FLAGS_http_listen);
  config.db_path = absl::GetFlag(FLAGS_db);
  config.db_pool = absl::GetFlag(FLAGS_db_pool);
  config.db_init = absl::GetFlag(FLAGS_db_init);
  // The shipped catalog and data, found from any working directory.
  for (auto [flag, value, field] :
       {std::tuple<const char*, std::string, std::string*>{
            "models_dir", absl::GetFlag(FLAGS_models_dir), &config.models_dir},
        {"runs", absl::GetFlag(FLAGS_runs), &config.runs_path},
        {"energy_curves", absl::GetFlag(FLAGS_energy_curves),
         &config.energy_curves_path}}) {
    absl::StatusOr<std::string> found = headroom::FindShipped(value, flag);
    if (!found.ok()) {
      spdlog::error("event=start_failed error=\"{}\"",
                    std::string(found.status().message()));
      return 2;
    }
    *field = *std::move(found);
  }
  config.coverage = absl::GetFlag(FLAGS_coverage);
  config.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  config.tls_key = absl::GetFlag(FLAGS_tls_key);
  config.tls_client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  config.tokens_file = absl::GetFlag(FLAGS_tokens_file);
  config.require_token_for_reads = absl::GetFlag(FLAGS_require_token_for_reads);
  config.allow_insecure = absl::GetFlag(FLAGS_allow_insecure);
  const std::string metrics_access = absl::GetFlag(FLAGS_metrics_access);
  if (metrics_access != "reads" && metrics_access != "open") {
    spdlog::error(
        "event=start_failed error=\"--metrics_access = {} (allowed reads, "
        "open)\"",
        metrics_access.substr(0, 64));
    return 2;
  }
  config.metrics_open = metrics_access == "open";
  const std::string auto_probe = absl::GetFlag(FLAGS_auto_probe);
  if (auto_probe != "off" && auto_probe != "on") {
    spdlog::error(
        "event=start_failed error=\"--auto_probe = {}; allowed off, on\"",
        auto_probe.substr(0, 32));
    return 2;
  }
  config.auto_probe = auto_probe == "on";
  config.auto_probe_per_caller = absl::GetFlag(FLAGS_auto_probe_per_caller);
  config.auto_probe_total = absl::GetFlag(FLAGS_auto_probe_total);
  config.extender_listen = absl::GetFlag(FLAGS_extender_listen);
  config.extender_budget_ms = absl::GetFlag(FLAGS_extender_budget_ms);
  config.extender_kube_api = absl::GetFlag(FLAGS_extender_kube_api);
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
  config.extender.decide.include_simulated =
      absl::GetFlag(FLAGS_extender_include_simulated);
  config.extender.decide.fail_unknown_gpu = unknown == "fail";
  config.probe_lease_ms = absl::GetFlag(FLAGS_probe_lease_ms);
  config.worker_heartbeat_ms = absl::GetFlag(FLAGS_worker_heartbeat_ms);
  config.store_poll_ms = absl::GetFlag(FLAGS_store_poll_ms);
  config.dispatch_ms = absl::GetFlag(FLAGS_dispatch_ms);
  config.max_handbacks = absl::GetFlag(FLAGS_max_handbacks);
  config.expiries_per_pass = absl::GetFlag(FLAGS_expiries_per_pass);
  config.worker_last_seen_ms = absl::GetFlag(FLAGS_worker_last_seen_ms);
  config.worker_max_unhandled = absl::GetFlag(FLAGS_worker_max_unhandled);
  config.probe_counts_ms = absl::GetFlag(FLAGS_probe_counts_ms);
  config.import_threads = absl::GetFlag(FLAGS_import_threads);
  config.import_queue = absl::GetFlag(FLAGS_import_queue);
  config.store_threads = absl::GetFlag(FLAGS_store_threads);
  config.store_queue = absl::GetFlag(FLAGS_store_queue);
  // Planner start refuses a budget below 4 x the message limit.
  config.grpc_memory_bytes =
      std::min<int64_t>(absl::GetFlag(FLAGS_grpc_memory_mb), int64_t{1} << 20) *
      (int64_t{1} << 20);
  auto app = headroom::PlannerApp::Start(config);
  if (!app.ok()) {
    spdlog::error("event=start_failed error=\"{}\"", app.status().ToString());
    // A bad flag is a usage error; anything else (a port in use, an
    // unreadable store) is a failure to start.
    return app.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  spdlog::info(
      "event=serving grpc=127.0.0.1:{} listen={} http={} db={} factor_set={} "
      "models={}",
      (*app)->grpc_port(), config.listen,
      config.http_listen.empty()
          ? std::string("off")
          : (config.tls_cert.empty() ? "http://" : "https://") +
                config.http_listen + "/metrics",
      config.db_path, (*app)->factor_set_version(), config.models_dir);

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
