// headroom-worker: the daemon on each GPU node (README.md, "Workers and
// probes"). Every flag can also be set as HEADROOM_WORKER_<FLAG>.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "common/build_info.h"
#include "common/client_channel.h"
#include "common/env_flags.h"
#include "common/logging.h"
#include "core/catalog/gpu_catalog.h"
#include "spdlog/spdlog.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/gpu_setup.h"
#include "worker/daemon/sim_executor.h"

ABSL_FLAG(std::string, planner, "127.0.0.1:50051", "planner gRPC address");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: CA certificate (PEM) of the planner's certificate; empty "
          "connects in plaintext (also HEADROOM_TLS_CA)");
ABSL_FLAG(std::string, tls_cert, "",
          "mTLS: this worker's certificate (PEM), issued for workers "
          "(scripts/dev-certs.sh's worker-ID.pem); its CN is the worker's "
          "identity and must equal --worker_id (also HEADROOM_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "",
          "mTLS: this worker's private key (PEM) (also HEADROOM_TLS_KEY)");
ABSL_FLAG(std::string, token_file, "",
          "file holding a worker bearer token (role worker in the planner's "
          "--tokens_file, named for --worker_id), for a planner with "
          "--tokens_file and no client certificates (or HEADROOM_TOKEN)");
ABSL_FLAG(std::string, node_name, "",
          "the Kubernetes node the GPUs are on (default: the host name); the "
          "planner's scheduler extender finds a node's GPUs by it");
ABSL_FLAG(std::string, worker_id, "",
          "stable id of this worker (default: the host name, a dash and the "
          "first GPU's catalog kind in lower case, e.g. node7-h100, or "
          "node7-sim-l4 for a simulated L4; with --tls_cert give the "
          "certificate's CN, with --token_file the worker token's name)");
ABSL_FLAG(std::string, executors, "auto",
          "comma list of torch, cuda, sim; auto = torch and cuda where a GPU "
          "and the tools exist, else sim");
ABSL_FLAG(std::string, sim_gpu, "L4", "simulated card kind (catalog name)");
ABSL_FLAG(double, sim_memory_gb, 0,
          "simulated card memory in GB (0 = the catalog's; else within 10 % "
          "of it, as the planner requires)");
ABSL_FLAG(int, sim_gpus, 1,
          "simulated cards of --sim_gpu on the node (1..16, indices 0..N-1): "
          "probes asking for several GPUs run on them");
ABSL_FLAG(double, sim_host_memory_gb, 64,
          "the simulated node's host memory in GB (offloaded states live "
          "there)");
ABSL_FLAG(uint64_t, sim_seed, 1, "seed of the simulated card's hidden truth");
ABSL_FLAG(int, sim_step_ms, 40, "wall time of one simulated training step");
ABSL_FLAG(int, sample_ms, 20, "GPU sampling period during a probe");
ABSL_FLAG(std::string, python, "python3", "Python with torch (torch executor)");
ABSL_FLAG(std::string, harness, "",
          "path of headroom_torch_probe.py (default: next to the binary or "
          "in worker/harness/)");
ABSL_FLAG(std::string, cuda_probe, "",
          "path of headroom-cuda-probe (default: next to the binary)");
ABSL_FLAG(int, backoff_max_ms, 10000, "longest wait between reconnects");
ABSL_FLAG(int, shutdown_grace_ms, 10000,
          "on SIGTERM: time to finish the batch and deliver results");
ABSL_FLAG(std::string, journal_dir, "",
          "directory where results wait, fsynced, for the planner's "
          "acknowledgement, so a worker killed and restarted sends them again "
          "(also HEADROOM_JOURNAL_DIR; default "
          "${XDG_STATE_HOME:-$HOME/.local/state}/headroom-worker/<worker_id>; "
          "\"none\": in memory only)");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error");

namespace {

// --journal_dir, else HEADROOM_JOURNAL_DIR, else the worker's state
// directory by the XDG base directory rules; "" for "none".
std::string JournalDir(const std::string& worker_id) {
  std::string dir = absl::GetFlag(FLAGS_journal_dir);
  if (dir.empty() && std::getenv("HEADROOM_JOURNAL_DIR") != nullptr) {
    dir = std::getenv("HEADROOM_JOURNAL_DIR");
  }
  if (dir == "none") return "";
  if (!dir.empty()) return dir;
  std::string state;
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg == '/') {
    state = xdg;
  } else if (const char* home = std::getenv("HOME"); home && *home == '/') {
    state = std::string(home) + "/.local/state";
  } else {
    state = "/var/tmp";
  }
  // One directory per worker id, which may not climb out of it.
  std::string name = worker_id;
  std::replace(name.begin(), name.end(), '/', '_');
  if (name.empty() || name == "." || name == "..") name = "worker";
  return state + "/headroom-worker/" + name;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "worker";
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Usage: headroom-worker --planner HOST:PORT [--executors sim "
      "--sim_gpu L4] [--flag=value ...]\n"
      "Runs probe runs the planner assigns and streams measurements back.\n"
      "Every flag can also be set as HEADROOM_WORKER_<FLAG>; --version "
      "prints the build.");
  if (headroom::PrintHelpIfAsked(argc, argv, __FILE__, std::cout)) return 0;
  if (headroom::PrintVersionIfAsked(argc, argv, "headroom-worker", std::cout)) {
    return 0;
  }
  headroom::ApplyEnvironmentToFlags("HEADROOM_WORKER_");
  absl::ParseCommandLine(argc, argv);
  headroom::SetUpLogging(absl::GetFlag(FLAGS_log_level));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  headroom::worker::DaemonOptions options;
  options.planner = absl::GetFlag(FLAGS_planner);
  options.hostname = HostName();
  options.node_name = absl::GetFlag(FLAGS_node_name);
  options.security.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.security.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.security.tls_key = absl::GetFlag(FLAGS_tls_key);
  if (const std::string path = absl::GetFlag(FLAGS_token_file); !path.empty()) {
    std::ifstream in(path);
    if (!in || !std::getline(in, options.security.token) ||
        options.security.token.empty()) {
      spdlog::error(
          "event=start_failed error=\"--token_file = {}: cannot read a token "
          "from its first line\"",
          path);
      return 2;
    }
  }
  headroom::SecurityFromEnvironment(&options.security);
  if (auto channel = headroom::OpenChannel(options.planner, options.security,
                                           grpc::ChannelArguments());
      !channel.ok()) {
    spdlog::error("event=start_failed error=\"{}\"",
                  std::string(channel.status().message()));
    return 2;
  }
  options.backoff_max = std::chrono::milliseconds(
      std::max(100, absl::GetFlag(FLAGS_backoff_max_ms)));
  options.shutdown_grace = std::chrono::milliseconds(
      std::max(0, absl::GetFlag(FLAGS_shutdown_grace_ms)));

  headroom::worker::GpuSetupOptions setup;
  setup.executors =
      absl::StrSplit(absl::GetFlag(FLAGS_executors), ',', absl::SkipEmpty());
  setup.sim.kind = absl::GetFlag(FLAGS_sim_gpu);
  setup.sim.memory_gb = absl::GetFlag(FLAGS_sim_memory_gb);
  setup.sim.seed = absl::GetFlag(FLAGS_sim_seed);
  setup.sim.gpus = absl::GetFlag(FLAGS_sim_gpus);
  setup.sim.host_memory_gb = absl::GetFlag(FLAGS_sim_host_memory_gb);
  setup.sim.step_ms = absl::GetFlag(FLAGS_sim_step_ms);
  setup.sim.sample_ms = absl::GetFlag(FLAGS_sample_ms);
  setup.sample_ms = absl::GetFlag(FLAGS_sample_ms);
  setup.python = absl::GetFlag(FLAGS_python);
  setup.harness = absl::GetFlag(FLAGS_harness);
  setup.cuda_probe = absl::GetFlag(FLAGS_cuda_probe);
  setup.argv0 = argv[0];
  absl::StatusOr<headroom::worker::GpuSetup> gpus =
      headroom::worker::SetUpExecutors(setup);
  if (!gpus.ok()) {
    spdlog::error("event=start_failed error=\"{}\"", gpus.status().ToString());
    return 2;
  }
  options.gpus = gpus->gpus;
  options.host_memory_bytes = gpus->host_memory_bytes;
  options.worker_id =
      absl::GetFlag(FLAGS_worker_id).empty()
          ? headroom::worker::DefaultWorkerId(options.hostname, options.gpus)
          : absl::GetFlag(FLAGS_worker_id);
  options.journal_dir = JournalDir(options.worker_id);
  options.notes = gpus->notes;
  options.framework_versions = gpus->framework_versions;
  for (const std::string& note : options.notes) {
    spdlog::warn("event=note worker={} note=\"{}\"", options.worker_id, note);
  }
  headroom::worker::WorkerDaemon daemon(options, std::move(gpus->executors));
  std::thread waiter([&] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("event=signal signal={} action=hand_back_and_stop", signal);
    daemon.Stop();
  });
  daemon.Run();
  // Run() ends only after Stop(); wake the waiter if it ended otherwise.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return 0;
}
