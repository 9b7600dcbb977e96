// headroom-autotune-fleet: the autotune search figure (bench/README.md) run
// through the fleet instead of offline. Starts the real planner binary on
// loopback and three simulated workers in this process (L4 24 GB, A10G 24 GB,
// H100 80 GB, each a WorkerDaemon on its own stream), then for three
// templates on each card counts the probe runs three ways:
//   headroom    Fleet.SubmitAutotune: the planner plans, the worker verifies
//               the largest predicted fit and bisects the open span itself;
//   exhaustive  one probe with every candidate;
//   doubling    Lightning's finder as sequential one-batch probes (double
//               until a run does not fit, then bisect).
// A run fits when it did not go OOM and its allocator peak is within the
// plan's budget. The sim measures with noise, so the three may in principle
// disagree at the edge; the table says so when they do. Every wait is
// bounded; the whole run stops at --deadline_s.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "core/calibration/calibrate.h"
#include "core/microbatch/plan.h"
#include "core/microbatch/search.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "spdlog/spdlog.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/sim_executor.h"

ABSL_FLAG(std::string, planner_bin, HEADROOM_PLANNER_BIN, "planner binary");
ABSL_FLAG(int, deadline_s, 300, "stop everything after this many seconds");

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = headroom::v1;
const std::string kRoot = HEADROOM_SOURCE_DIR;
const std::vector<uint32_t> kCandidates = {1,  2,  4,  8,   12,  16,  24,  32,
                                           48, 64, 96, 128, 192, 256, 384, 512};
Clock::time_point g_deadline;

class Fleet {
 public:
  explicit Fleet(std::shared_ptr<grpc::Channel> channel)
      : stub_(v1::Fleet::NewStub(channel)) {}

  std::optional<v1::Probe> Get(const std::string& id) {
    return headroom::testing::ProbeSnapshot(stub_.get(), id,
                                            std::chrono::seconds(5));
  }

  // The probe once it ended; nullopt past the deadline.
  std::optional<v1::Probe> Wait(const std::string& id) {
    while (Clock::now() < g_deadline) {
      std::optional<v1::Probe> probe = Get(id);
      if (probe.has_value() && probe->state() != v1::Probe::QUEUED &&
          probe->state() != v1::Probe::RUNNING) {
        return probe;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

  std::optional<v1::Probe> RunProbe(const v1::SubmitProbeRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        stub_->SubmitProbe(&context, request, &response);
    if (!status.ok()) {
      std::fprintf(stderr, "SubmitProbe: %s\n", status.error_message().c_str());
      return std::nullopt;
    }
    return Wait(response.probe().id());
  }

  v1::Fleet::Stub* stub() { return stub_.get(); }

 private:
  std::unique_ptr<v1::Fleet::Stub> stub_;
};

bool Fits(const v1::BatchResult& r, double budget_gb) {
  return !r.oom() && r.error().empty() && r.has_peak_allocated_gb() &&
         r.peak_allocated_gb() <= budget_gb;
}

struct Outcome {
  int runs = 0;
  int probes = 0;
  uint32_t choice = 0;
  double seconds = 0;
  bool ok = true;
};

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  g_deadline = Clock::now() + std::chrono::seconds(std::clamp(
                                  absl::GetFlag(FLAGS_deadline_s), 10, 3600));
  const int port = headroom::testing::FreeLoopbackPort();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  const std::string db =
      absl::StrCat("/tmp/headroom-autotune-fleet-", getpid(), ".db");
  const pid_t planner = fork();
  if (planner == 0) {
    const std::string bin = absl::GetFlag(FLAGS_planner_bin);
    execl(bin.c_str(), bin.c_str(), ("--listen=" + address).c_str(),
          "--http_listen=", ("--models_dir=" + kRoot + "/models").c_str(),
          ("--runs=" + kRoot + "/data/memory-runs.jsonl").c_str(),
          ("--energy_curves=" + kRoot + "/data/energy-curves.json").c_str(),
          ("--db=" + db).c_str(), "--log_level=warn",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  auto channel =
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto planner_stub = v1::Fit::NewStub(channel);
  Fleet fleet(channel);
  bool up = false;
  for (int i = 0; i < 300 && !up; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
    v1::PingResponse pong;
    up = planner_stub->Ping(&context, {}, &pong).ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto stop_planner = [&] {
    kill(planner, SIGTERM);
    int status = 0;
    waitpid(planner, &status, 0);
    for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  };
  if (!up) {
    std::fprintf(stderr, "planner did not come up on %s\n", address.c_str());
    kill(planner, SIGKILL);
    return 1;
  }

  struct Card {
    const char* kind;
    double memory_gb;
  };
  const std::vector<Card> cards = {{"L4", 24}, {"A10G", 24}, {"H100", 80}};
  std::vector<std::unique_ptr<headroom::worker::WorkerDaemon>> daemons;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < cards.size(); ++i) {
    headroom::worker::SimGpuConfig sim;
    sim.kind = cards[i].kind;
    sim.memory_gb = cards[i].memory_gb;
    sim.seed = i + 1;
    sim.step_ms = 5;
    sim.sample_ms = 5;
    auto executor = std::make_unique<headroom::worker::SimExecutor>(sim);
    headroom::worker::DaemonOptions options;
    options.planner = address;
    options.worker_id = absl::StrCat("sim-", cards[i].kind);
    options.hostname = options.worker_id;
    options.gpus.push_back(executor->Device());
    options.framework_versions["simulator"] = "headroom-sim 1";
    options.backoff_max = std::chrono::milliseconds(1000);
    options.shutdown_grace = std::chrono::milliseconds(2000);
    std::vector<std::unique_ptr<headroom::worker::Executor>> executors;
    executors.push_back(std::move(executor));
    daemons.push_back(std::make_unique<headroom::worker::WorkerDaemon>(
        options, std::move(executors)));
  }
  for (auto& daemon : daemons) {
    threads.emplace_back([d = daemon.get()] { d->Run(); });
  }
  const auto stop_all = [&] {
    for (auto& daemon : daemons) daemon->Stop();
    for (auto& thread : threads) thread.join();
    stop_planner();
  };
  for (int i = 0; i < 200; ++i) {
    bool all = true;
    for (auto& daemon : daemons) all = all && daemon->connected();
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  std::printf("%-13s %-5s %6s | %10s %15s %9s | %s\n", "template", "gpu",
              "choice", "exhaustive", "doubling", "headroom", "same choice");
  std::printf("%-13s %-5s %6s | %10s %15s %9s |\n", "", "", "", "runs",
              "runs (probes)", "runs");
  int totals[3] = {0, 0, 0};
  double seconds[3] = {0, 0, 0};
  int differ = 0, failed = 0;
  for (const char* name : {"gpt2", "bert-base", "llama3-block"}) {
    for (const Card& card : cards) {
      v1::SubmitAutotuneRequest autotune;
      v1::PlanMicrobatchRequest& plan = *autotune.mutable_plan();
      plan.set_template_(name);
      *plan.mutable_setup() = headroom::CalibrationSetup();
      plan.set_context(512);
      plan.set_global_batch(kCandidates.back());
      for (uint32_t c : kCandidates) plan.add_microbatch_candidates(c);
      plan.set_vram_fraction(0.95);
      plan.set_reserve_gb(1);
      autotune.set_worker(absl::StrCat("sim-", card.kind));
      autotune.set_executor("sim");
      autotune.set_warmup_steps(1);
      autotune.set_steps(1);

      // Headroom: one autotune probe, searched on the worker.
      Outcome headroom;
      auto t0 = Clock::now();
      v1::SubmitAutotuneResponse submitted;
      {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(5));
        const grpc::Status status =
            fleet.stub()->SubmitAutotune(&context, autotune, &submitted);
        if (!status.ok()) {
          std::fprintf(stderr, "SubmitAutotune %s %s: %s\n", name, card.kind,
                       status.error_message().c_str());
          stop_all();
          return 1;
        }
      }
      const double budget_gb = submitted.plan().budget_gb();
      std::optional<v1::Probe> tuned = fleet.Wait(submitted.probe().id());
      headroom.probes = 1;
      v1::AutotuneRecord record;
      if (tuned.has_value() && tuned->state() == v1::Probe::SUCCEEDED &&
          google::protobuf::util::JsonStringToMessage(tuned->details_json(),
                                                      &record)
              .ok()) {
        headroom.runs = tuned->results_size();
        headroom.choice = record.selected().microbatch();
      } else {
        headroom.ok = false;
      }
      headroom.seconds =
          std::chrono::duration<double>(Clock::now() - t0).count();

      // The same model, setup and card as plain probes.
      v1::SubmitProbeRequest probe;
      probe.mutable_model()->set_template_(name);
      *probe.mutable_setup() = *headroom::MicrobatchSetup(plan);
      probe.set_worker(autotune.worker());
      probe.set_executor("sim");
      probe.set_warmup_steps(1);
      probe.set_steps(1);

      Outcome exhaustive;
      t0 = Clock::now();
      {
        v1::SubmitProbeRequest all = probe;
        for (uint32_t c : kCandidates) all.add_batches(c);
        std::optional<v1::Probe> done = fleet.RunProbe(all);
        exhaustive.probes = 1;
        if (done.has_value() && done->state() == v1::Probe::SUCCEEDED) {
          exhaustive.runs = done->results_size();
          for (const v1::BatchResult& r : done->results()) {
            if (Fits(r, budget_gb)) {
              exhaustive.choice = std::max(exhaustive.choice, r.batch());
            }
          }
        } else {
          exhaustive.ok = false;
        }
      }
      exhaustive.seconds =
          std::chrono::duration<double>(Clock::now() - t0).count();

      Outcome doubling;
      t0 = Clock::now();
      const headroom::SearchResult found =
          headroom::DoublingThenBisect(kCandidates, [&](int i) {
            v1::SubmitProbeRequest one = probe;
            one.add_batches(kCandidates[i]);
            std::optional<v1::Probe> done = fleet.RunProbe(one);
            ++doubling.runs;
            ++doubling.probes;
            if (!done.has_value() || done->results_size() != 1) {
              doubling.ok = false;
              return headroom::RunOutcome::kAbort;
            }
            return Fits(done->results(0), budget_gb)
                       ? headroom::RunOutcome::kFits
                       : headroom::RunOutcome::kDoesNotFit;
          });
      doubling.choice = found.best >= 0 ? kCandidates[found.best] : 0;
      doubling.seconds =
          std::chrono::duration<double>(Clock::now() - t0).count();

      const bool ok = headroom.ok && exhaustive.ok && doubling.ok;
      const bool same = ok && headroom.choice == exhaustive.choice &&
                        doubling.choice == exhaustive.choice;
      if (!ok) ++failed;
      if (ok && !same) ++differ;
      totals[0] += exhaustive.runs;
      totals[1] += doubling.runs;
      totals[2] += headroom.runs;
      seconds[0] += exhaustive.seconds;
      seconds[1] += doubling.seconds;
      seconds[2] += headroom.seconds;
      std::printf("%-13s %-5s %6u | %10d %9d (%3d) %9d | %s", name, card.kind,
                  exhaustive.choice, exhaustive.runs, doubling.runs,
                  doubling.probes, headroom.runs,
                  !ok    ? "FAILED"
                  : same ? "yes"
                         : "NO");
      if (ok && !same) {
        std::printf(" (doubling %u, headroom %u)", doubling.choice,
                    headroom.choice);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  std::printf("%-13s %-5s %6s | %10d %15d %9d |\n", "total", "", "", totals[0],
              totals[1], totals[2]);
  std::printf("%-13s %-5s %6s | %9.1fs %14.1fs %8.1fs | wall time\n", "", "",
              "", seconds[0], seconds[1], seconds[2]);
  std::printf("choices that differ: %d; comparisons that failed: %d\n", differ,
              failed);
  stop_all();
  return differ == 0 && failed == 0 ? 0 : 1;
}
