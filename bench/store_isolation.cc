// headroom-store-isolation: catalog CheckFit latency alone, then while the
// store is busy, against a real planner on loopback, in one run. The busy
// phase runs at once: a client listing probes in a loop (ListProbes), two
// simulated workers on Fleet.Connect storing probe results (each result a
// store write, probes submitted as fast as they finish), and a client
// refitting in a loop (dry runs: the fit reads every stored run). Store work
// runs on the store executor, never on the gRPC threads, so catalog
// answers should keep their p99 within 1.5x.
//
// Every loop is bounded by a call count and by time; calls carry a deadline.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/catalog_latency.h"
#include "bench/closed_loop.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "spdlog/spdlog.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/sim_executor.h"

ABSL_FLAG(double, seconds, 5.0, "length of each phase in seconds (0.5..120)");
ABSL_FLAG(int, workers, 2, "simulated workers storing results (1..32)");
ABSL_FLAG(int, store_threads, 4, "the planner's --store_threads");
ABSL_FLAG(std::string, db, "/tmp/headroom-store-isolation.db",
          "SQLite file of the planner (removed first)");

namespace headroom::bench {
namespace {

// Load clients stand for other machines: here they share the planner's
// CPUs, so they run at the lowest priority.
void LowerPriority() {
  (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19);
}

struct Counts {
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> failed{0};
  void Count(bool ok) { ok ? ++calls : ++failed; }
};

int Run() {
  const double seconds = std::clamp(absl::GetFlag(FLAGS_seconds), 0.5, 120.0);
  const int workers = std::clamp(absl::GetFlag(FLAGS_workers), 1, 32);
  const std::string db = absl::GetFlag(FLAGS_db);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((db + suffix).c_str());
  }
  spdlog::set_level(spdlog::level::warn);
  PlannerConfig config;
  const std::string root = HEADROOM_SOURCE_DIR;
  config.listen = "127.0.0.1:0";
  config.http_listen = "";
  config.db_path = db;
  config.models_dir = root + "/models";
  config.runs_path = root + "/data/memory-runs.jsonl";
  config.energy_curves_path = root + "/data/energy-curves.json";
  config.store_threads = absl::GetFlag(FLAGS_store_threads);
  config.worker_heartbeat_ms = 200;
  auto app = PlannerApp::Start(config);
  if (!app.ok()) {
    std::fprintf(stderr, "planner: %s\n", app.status().ToString().c_str());
    return 1;
  }
  const std::string target = absl::StrCat("127.0.0.1:", (*app)->grpc_port());
  auto stub = v1::Fit::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));

  MeasureCatalog(stub.get(), std::min(seconds, 1.0));  // warm-up
  const Latency alone = MeasureCatalog(stub.get(), seconds);

  // The workers: sim daemons with their own channels and streams.
  std::vector<std::unique_ptr<worker::WorkerDaemon>> daemons;
  std::vector<std::thread> daemon_threads;
  for (int i = 0; i < workers; ++i) {
    worker::SimGpuConfig sim;
    sim.kind = "L4";
    sim.memory_gb = 24;
    sim.seed = static_cast<uint64_t>(i + 1);
    sim.step_ms = 1;
    sim.sample_ms = 50;
    auto executor = std::make_unique<worker::SimExecutor>(sim);
    worker::DaemonOptions options;
    options.planner = target;
    options.worker_id = absl::StrCat("bench-", i);
    options.hostname = options.worker_id;
    options.gpus.push_back(executor->Device());
    options.backoff_max = std::chrono::milliseconds(1000);
    options.shutdown_grace = std::chrono::milliseconds(2000);
    std::vector<std::unique_ptr<worker::Executor>> executors;
    executors.push_back(std::move(executor));
    daemons.push_back(
        std::make_unique<worker::WorkerDaemon>(options, std::move(executors)));
  }
  for (auto& daemon : daemons) {
    daemon_threads.emplace_back([d = daemon.get()] {
      LowerPriority();
      d->Run();
    });
  }

  std::atomic<bool> stop{false};
  Counts lists, submits, refits;
  std::vector<std::thread> clients;
  // Probes for the workers: 16 batches each, every batch a stored result.
  clients.emplace_back([&] {
    LowerPriority();
    auto fleet = v1::Fleet::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    for (int n = 0; n < 100000 && !stop.load(); ++n) {
      v1::ListProbesRequest queued;
      queued.set_state(v1::Probe::QUEUED);
      queued.set_page_size(8);
      v1::ListProbesResponse waiting;
      grpc::ClientContext list_context;
      list_context.set_deadline(std::chrono::system_clock::now() +
                                kCallDeadline);
      if (fleet->ListProbes(&list_context, queued, &waiting).ok() &&
          waiting.probes_size() >= 2 * workers) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
      v1::SubmitProbeRequest request;
      request.mutable_model()->set_template_("simple-cnn");
      for (uint32_t b = 1; b <= 16; ++b) request.add_batches(b);
      request.set_gpu("L4");
      request.set_executor("sim");
      request.set_steps(1);
      v1::SubmitProbeResponse response;
      submits.Count(fleet->SubmitProbe(&context, request, &response).ok());
    }
  });
  // A client listing probes.
  clients.emplace_back([&] {
    LowerPriority();
    auto fleet = v1::Fleet::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    for (int n = 0; n < 1000000 && !stop.load(); ++n) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
      v1::ListProbesRequest request;
      request.set_page_size(100);
      v1::ListProbesResponse response;
      lists.Count(fleet->ListProbes(&context, request, &response).ok());
    }
  });
  // A client refitting (dry runs, so answers keep their factor set).
  clients.emplace_back([&] {
    LowerPriority();
    auto calibration = v1::Calibration::NewStub(
        grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
    for (int n = 0; n < 100000 && !stop.load(); ++n) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
      v1::RefitRequest request;
      request.set_dry_run(true);
      v1::RefitResponse response;
      refits.Count(calibration->Refit(&context, request, &response).ok());
    }
  });
  auto fleet = v1::Fleet::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  // Probes succeeded so far, a page of 100 at a time (at most 100 pages).
  const auto succeeded = [&] {
    int count = 0;
    std::string token;
    for (int page = 0; page < 100; ++page) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
      v1::ListProbesRequest request;
      request.set_state(v1::Probe::SUCCEEDED);
      request.set_page_size(100);
      request.set_page_token(token);
      v1::ListProbesResponse response;
      if (!fleet->ListProbes(&context, request, &response).ok()) return -1;
      count += response.probes_size();
      token = response.next_page_token();
      if (token.empty()) break;
    }
    return count;
  };
  // Let the workers connect and the first probes run.
  for (int i = 0; i < 200 && succeeded() < 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int done_before = succeeded();
  const int64_t lists_before = lists.calls.load();
  const int64_t refits_before = refits.calls.load();
  const Latency loaded = MeasureCatalog(stub.get(), seconds);
  const int done_during = succeeded() - done_before;
  const int64_t lists_during = lists.calls.load() - lists_before;
  const int64_t refits_during = refits.calls.load() - refits_before;
  stop = true;
  for (std::thread& client : clients) client.join();
  for (auto& daemon : daemons) daemon->Stop();
  for (std::thread& thread : daemon_threads) thread.join();
  (*app)->Shutdown(std::chrono::milliseconds(0));

  std::printf("store: SQLite %s; store_threads %d; %d sim workers\n",
              db.c_str(), config.store_threads, workers);
  std::printf("%-44s %10s %10s %8s %7s\n", "catalog CheckFit (bert-base)",
              "p50 ms", "p99 ms", "calls", "failed");
  std::printf("%-44s %10.3f %10.3f %8zu %7zu\n", "alone", alone.p50_ms,
              alone.p99_ms, alone.calls, alone.failed);
  std::printf("%-44s %10.3f %10.3f %8zu %7zu\n",
              "with ListProbes + results + Refit", loaded.p50_ms, loaded.p99_ms,
              loaded.calls, loaded.failed);
  std::printf(
      "ratio (with / alone): p50 %.2fx, p99 %.2fx; during the phase: "
      "%lld ListProbes, %d probes done (16 results each), %lld refits "
      "(failed: %lld lists, %lld submits, %lld refits)\n",
      loaded.p50_ms / alone.p50_ms, loaded.p99_ms / alone.p99_ms,
      static_cast<long long>(lists_during), done_during,
      static_cast<long long>(refits_during),
      static_cast<long long>(lists.failed.load()),
      static_cast<long long>(submits.failed.load()),
      static_cast<long long>(refits.failed.load()));
  return 0;
}

}  // namespace
}  // namespace headroom::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return headroom::bench::Run();
}
