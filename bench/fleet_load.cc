// headroom-fleet-load: the planner with a fleet on its back. Starts the real
// planner binary on loopback, measures CheckFit latency idle, then connects
// N simulated workers (in this process, each its own channel and stream),
// gives each a long probe so that it streams samples at 1000/sample_ms Hz,
// and measures again: planner CPU and memory (from /proc), samples per
// second, CheckFit p50/p99 beside the idle figures. At the end every
// worker's sent-sample count is compared with what the planner says it
// received, and every worker must have connected exactly once.
// Every loop is bounded by count and time.

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "tests/support/loopback.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/sim_executor.h"

ABSL_FLAG(int, workers, 500, "simulated workers (1..2000)");
ABSL_FLAG(int, sample_ms, 20, "sampling period of each worker (20 = 50 Hz)");
ABSL_FLAG(int, seconds, 20, "measured seconds under load (5..600)");
ABSL_FLAG(int, port, 50093, "loopback port for the planner");
ABSL_FLAG(int, planner_cpu, -1,
          "pin the planner to this CPU (-1: no pinning); run this program "
          "under taskset on the other CPUs to keep the fleet off it");
ABSL_FLAG(std::string, planner_bin, HEADROOM_PLANNER_BIN, "planner binary");

namespace {

using Clock = std::chrono::steady_clock;
const std::string kRoot = HEADROOM_SOURCE_DIR;

struct Usage {
  double cpu_seconds = 0;
  double rss_mb = 0;
};

Usage ProcessUsage(pid_t pid) {
  Usage usage;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)),
                   std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren != std::string::npos) {
    std::istringstream rest(text.substr(paren + 2));
    std::vector<std::string> fields;
    std::string field;
    while (rest >> field) fields.push_back(field);
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after ')'.
    if (fields.size() > 13) {
      usage.cpu_seconds = (std::stod(fields[11]) + std::stod(fields[12])) /
                          static_cast<double>(sysconf(_SC_CLK_TCK));
    }
  }
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      usage.rss_mb = std::stod(line.substr(6)) / 1024.0;
    }
  }
  return usage;
}

struct Latency {
  double p50_us = 0;
  double p99_us = 0;
  int calls = 0;
  int errors = 0;
};

// Closed loop, one call in flight: what one scheduler query waits.
Latency MeasureCheckFit(headroom::v1::Fit::Stub* stub, double seconds) {
  headroom::v1::CheckFitRequest request;
  request.mutable_model()->set_template_("gpt2");
  request.add_batches(8);
  request.add_batches(32);
  request.add_targets()->set_gpu("L4");
  request.add_targets()->set_gpu("H100");
  std::vector<double> micros;
  Latency latency;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end && micros.size() < 1000000) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    headroom::v1::CheckFitResponse response;
    const auto start = Clock::now();
    const grpc::Status status = stub->CheckFit(&context, request, &response);
    micros.push_back(
        std::chrono::duration<double, std::micro>(Clock::now() - start)
            .count());
    if (!status.ok()) ++latency.errors;
  }
  std::sort(micros.begin(), micros.end());
  latency.calls = static_cast<int>(micros.size());
  if (!micros.empty()) {
    latency.p50_us = micros[micros.size() / 2];
    latency.p99_us = micros[std::min(
        micros.size() - 1, static_cast<size_t>(micros.size() * 0.99))];
  }
  return latency;
}

uint64_t SamplesReceived(headroom::v1::Fleet::Stub* fleet, int* running,
                         std::map<std::string, uint64_t>* per_worker) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  headroom::v1::ListWorkersResponse response;
  if (!fleet->ListWorkers(&context, {}, &response).ok()) return 0;
  uint64_t total = 0;
  *running = 0;
  for (const auto& w : response.workers()) {
    total += w.samples_received();
    if (!w.running_probe().empty()) ++*running;
    if (per_worker != nullptr) {
      (*per_worker)[w.hello().worker_id()] = w.samples_received();
    }
  }
  return total;
}

// headroom_fleet_samples_total from the planner's /metrics; -1 when it
// cannot be read.
double MetricSamplesTotal(int port) {
  const std::string text = headroom::testing::HttpGet(port, "/metrics");
  const std::string name = "\nheadroom_fleet_samples_total ";
  const size_t at = text.find(name);
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + name.size()));
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);

  spdlog::set_level(spdlog::level::warn);
  const int n = std::clamp(absl::GetFlag(FLAGS_workers), 1, 2000);
  const int sample_ms = std::clamp(absl::GetFlag(FLAGS_sample_ms), 1, 1000);
  const int seconds = std::clamp(absl::GetFlag(FLAGS_seconds), 5, 600);
  const std::string address =
      absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port));
  const std::string db = "/tmp/headroom-fleet-load.db";
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());

  const int planner_cpu = absl::GetFlag(FLAGS_planner_cpu);
  const pid_t planner = fork();
  if (planner == 0) {
    if (planner_cpu >= 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(planner_cpu, &set);
      sched_setaffinity(0, sizeof(set), &set);
    }
    const std::string bin = absl::GetFlag(FLAGS_planner_bin);
    execl(bin.c_str(), bin.c_str(), ("--listen=" + address).c_str(),
          ("--http_listen=127.0.0.1:" +
           std::to_string(absl::GetFlag(FLAGS_port) + 1))
              .c_str(),
          ("--models_dir=" + kRoot + "/models").c_str(),
          ("--runs=" + kRoot + "/data/memory-runs.jsonl").c_str(),
          ("--energy_curves=" + kRoot + "/data/energy-curves.json").c_str(),
          ("--db=" + db).c_str(), "--log_level=warn",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  grpc::ChannelArguments args;
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), args);
  auto stub = headroom::v1::Fit::NewStub(channel);
  auto fleet = headroom::v1::Fleet::NewStub(channel);
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
    headroom::v1::PingResponse pong;
    up = stub->Ping(&context, {}, &pong).ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!up) {
    std::fprintf(stderr, "planner did not come up on %s\n", address.c_str());
    kill(planner, SIGKILL);
    return 1;
  }

  // Idle: no workers.
  const Usage idle_start = ProcessUsage(planner);
  const auto idle_t0 = Clock::now();
  const Latency idle = MeasureCheckFit(stub.get(), 5);
  const Usage idle_end = ProcessUsage(planner);
  const double idle_wall =
      std::chrono::duration<double>(Clock::now() - idle_t0).count();

  // The fleet: each worker a daemon with its own channel and stream.
  std::vector<std::unique_ptr<headroom::worker::WorkerDaemon>> daemons;
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    headroom::worker::SimGpuConfig sim;
    sim.kind = i % 3 == 0 ? "L4" : i % 3 == 1 ? "A10G" : "H100";
    sim.memory_gb = i % 3 == 2 ? 80 : 24;
    sim.seed = static_cast<uint64_t>(i + 1);
    sim.step_ms = 1000;
    sim.sample_ms = sample_ms;
    auto executor = std::make_unique<headroom::worker::SimExecutor>(sim);
    headroom::worker::DaemonOptions options;
    options.planner = address;
    options.worker_id = absl::StrCat("load-", i);
    options.hostname = options.worker_id;
    options.gpus.push_back(executor->Device());
    options.backoff_max = std::chrono::milliseconds(2000);
    options.shutdown_grace = std::chrono::milliseconds(3000);
    std::vector<std::unique_ptr<headroom::worker::Executor>> executors;
    executors.push_back(std::move(executor));
    daemons.push_back(std::make_unique<headroom::worker::WorkerDaemon>(
        options, std::move(executors)));
  }
  for (auto& daemon : daemons) {
    threads.emplace_back([d = daemon.get()] { d->Run(); });
  }
  // Long probes pinned to each worker: `seconds` + margin of sampling.
  // A worker not yet connected (a thousand start on one core) refuses its
  // probe: retried once a second, for at most 120 s over all of them.
  const auto submit_end = Clock::now() + std::chrono::seconds(120);
  for (int i = 0; i < n; ++i) {
    headroom::v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("simple-cnn");
    request.set_worker(absl::StrCat("load-", i));
    request.add_batches(8);
    request.set_executor("sim");
    request.set_steps(static_cast<uint32_t>(seconds + 30));
    for (int attempt = 0; attempt < 120; ++attempt) {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(10));
      headroom::v1::SubmitProbeResponse response;
      const grpc::Status status =
          fleet->SubmitProbe(&context, request, &response);
      if (status.ok()) break;
      if (Clock::now() >= submit_end) {
        std::fprintf(stderr, "submit %d failed: %s\n", i,
                     status.error_message().c_str());
        break;
      }
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
  int running = 0;
  const auto ramp_end = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < ramp_end) {
    SamplesReceived(fleet.get(), &running, nullptr);
    if (running >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  const uint64_t samples_start =
      SamplesReceived(fleet.get(), &running, nullptr);
  const Usage load_start = ProcessUsage(planner);
  const auto load_t0 = Clock::now();
  const Latency loaded = MeasureCheckFit(stub.get(), seconds);
  const Usage load_end = ProcessUsage(planner);
  const double load_wall =
      std::chrono::duration<double>(Clock::now() - load_t0).count();
  int running_end = 0;
  const uint64_t samples_end =
      SamplesReceived(fleet.get(), &running_end, nullptr);

  // Stop the fleet: cancel the probes by stopping the daemons (they hand
  // their probes back), then compare counts.
  for (auto& daemon : daemons) daemon->Stop();
  for (auto& thread : threads) thread.join();
  std::map<std::string, uint64_t> received;
  int ignored = 0;
  SamplesReceived(fleet.get(), &ignored, &received);
  uint64_t sent_total = 0;
  uint64_t dropped_total = 0;
  int lost_workers = 0;
  int reconnected = 0;
  for (int i = 0; i < n; ++i) {
    const auto counters = daemons[i]->counters();
    sent_total += counters.samples_sent;
    dropped_total += counters.samples_dropped;
    if (counters.connects != 1) {
      ++reconnected;
      if (reconnected == 1) {
        std::printf("worker load-%d connected %llu times\n", i,
                    static_cast<unsigned long long>(counters.connects));
      }
    }
    (void)received;
  }
  const double received_total =
      MetricSamplesTotal(absl::GetFlag(FLAGS_port) + 1);
  kill(planner, SIGTERM);
  int status = 0;
  waitpid(planner, &status, 0);

  std::printf(
      "workers %d, sampling every %d ms (%.0f Hz each), measured %.1f s; "
      "planner pinned to CPU %d (-1: not pinned)\n",
      n, sample_ms, 1000.0 / sample_ms, load_wall, planner_cpu);
  std::printf("%-26s %12s %12s\n", "", "idle", "fleet");
  std::printf(
      "%-26s %12.1f %12.1f\n", "planner CPU (% of 1 core)",
      100 * (idle_end.cpu_seconds - idle_start.cpu_seconds) / idle_wall,
      100 * (load_end.cpu_seconds - load_start.cpu_seconds) / load_wall);
  std::printf("%-26s %12.1f %12.1f\n", "planner RSS (MB)", idle_end.rss_mb,
              load_end.rss_mb);
  std::printf("%-26s %12s %12.0f\n", "samples received per s", "0",
              (samples_end - samples_start) / load_wall);
  std::printf("%-26s %12.0f %12.0f  (x%.2f)\n", "CheckFit p50 (us)",
              idle.p50_us, loaded.p50_us, loaded.p50_us / idle.p50_us);
  std::printf("%-26s %12.0f %12.0f  (x%.2f)\n", "CheckFit p99 (us)",
              idle.p99_us, loaded.p99_us, loaded.p99_us / idle.p99_us);
  std::printf("%-26s %12d %12d\n", "CheckFit calls / errors", idle.calls,
              loaded.calls);
  std::printf("CheckFit errors under load: %d\n", loaded.errors);
  std::printf("workers streaming at start/end of the window: %d / %d\n",
              running, running_end);
  std::printf(
      "samples sent by workers %llu, received by the planner %.0f, "
      "dropped in workers %llu, workers that reconnected %d\n",
      static_cast<unsigned long long>(sent_total), received_total,
      static_cast<unsigned long long>(dropped_total), reconnected);
  (void)lost_workers;
  return 0;
}
