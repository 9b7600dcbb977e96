// The daemon waits quietly for a planner that is not up: one line when it
// first fails, debug lines only while it retries, one when connected, and
// one again after a disconnect. And the worker id it defaults to.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "spdlog/sinks/base_sink.h"
#include "spdlog/spdlog.h"
#include "worker/daemon/daemon.h"
#include "worker/daemon/gpu_setup.h"

namespace headroom::worker {
namespace {

using ::testing::HasSubstr;

// Every line logged, with its level.
class LineSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Lines at `level` or above (exactly `level` when `exact`) holding `text`.
  std::vector<std::string> Lines(spdlog::level::level_enum level, bool exact,
                                 const std::string& text = "") {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [at, line] : lines_) {
      if ((exact ? at == level : at >= level) &&
          line.find(text) != std::string::npos) {
        out.push_back(line);
      }
    }
    return out;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    lines_.emplace_back(msg.level,
                        std::string(msg.payload.data(), msg.payload.size()));
  }
  void flush_() override {}

 private:
  std::vector<std::pair<spdlog::level::level_enum, std::string>> lines_;
};

// A planner that welcomes every worker and keeps its stream open.
class WelcomingFleet final : public v1::Fleet::Service {
  grpc::Status Connect(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::PlannerMessage, v1::WorkerMessage>* stream)
      override {
    v1::WorkerMessage message;
    if (!stream->Read(&message)) return grpc::Status::OK;
    v1::PlannerMessage welcome;
    welcome.mutable_welcome()->set_heartbeat_ms(60000);
    stream->Write(welcome);
    while (stream->Read(&message)) {
    }
    return grpc::Status::OK;
  }
};

std::unique_ptr<grpc::Server> StartFleet(v1::Fleet::Service* service,
                                         const std::string& address,
                                         int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  return builder.BuildAndStart();
}

bool WaitFor(const std::function<bool()>& condition) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

TEST(DaemonConnectTest, WaitsQuietlyForThePlannerAndSaysOnceWhenConnected) {
  // A port nothing listens on (yet): bound, discovered, closed.
  WelcomingFleet fleet;
  int port = 0;
  StartFleet(&fleet, "127.0.0.1:0", &port)->Shutdown();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);

  auto sink = std::make_shared<LineSink>();
  auto previous = spdlog::default_logger();
  auto logger = std::make_shared<spdlog::logger>("daemon-connect-test", sink);
  logger->set_level(spdlog::level::debug);
  spdlog::set_default_logger(logger);

  DaemonOptions options;
  options.planner = address;
  options.worker_id = "w-quiet";
  options.hostname = "w-quiet";
  options.backoff_min = std::chrono::milliseconds(10);
  options.backoff_max = std::chrono::milliseconds(40);
  options.shutdown_grace = std::chrono::milliseconds(0);
  WorkerDaemon daemon(options, {});
  std::thread run([&] { daemon.Run(); });
  const auto retries = [&] {
    return sink
        ->Lines(spdlog::level::debug, /*exact=*/true, "event=reconnect_wait")
        .size();
  };

  // Five retries with the planner absent: one line at info or above.
  EXPECT_TRUE(WaitFor([&] { return retries() >= 5; }));
  std::vector<std::string> said = sink->Lines(spdlog::level::info, false);
  ASSERT_EQ(said.size(), 1u) << ::testing::PrintToString(said);
  EXPECT_THAT(said[0], HasSubstr("event=waiting_for_planner worker=w-quiet"));
  EXPECT_THAT(said[0], HasSubstr("message=\"waiting for the planner at " +
                                 address + " ("));

  // The planner comes up: one "connected" line, nothing else.
  int bound = 0;
  std::unique_ptr<grpc::Server> server = StartFleet(&fleet, address, &bound);
  ASSERT_EQ(bound, port);
  EXPECT_TRUE(WaitFor([&] {
    return sink->Lines(spdlog::level::info, false, "event=connected").size() ==
           1;
  }));
  said = sink->Lines(spdlog::level::info, false);
  EXPECT_EQ(said.size(), 2u) << ::testing::PrintToString(said);

  // It goes away: one line saying so, quiet over five more retries.
  server->Shutdown(std::chrono::system_clock::now());
  server->Wait();
  const size_t before = retries();
  EXPECT_TRUE(WaitFor([&] { return retries() >= before + 5; }));
  said = sink->Lines(spdlog::level::info, false);
  ASSERT_EQ(said.size(), 3u) << ::testing::PrintToString(said);
  EXPECT_THAT(said[2], HasSubstr("disconnected; waiting for the planner at " +
                                 address + " ("));
  EXPECT_EQ(sink->Lines(spdlog::level::warn, false).size(), 1u);

  daemon.Stop();
  run.join();
  spdlog::set_default_logger(previous);
}

// Runs every batch of an assignment at once, measuring nothing real.
class InstantExecutor final : public Executor {
 public:
  std::string name() const override { return "instant"; }
  ExecutionOutcome Run(const v1::Assignment& assignment, ExecutionSink* sink,
                       const std::atomic<StopReason>& /*stop*/) override {
    for (const v1::BatchRun& run : assignment.runs()) {
      v1::BatchResult result;
      result.set_batch(run.batch());
      result.set_peak_allocated_gb(1.0);
      sink->BatchDone(run, std::move(result));
    }
    return {};
  }
};

// A planner that assigns work before it welcomes the worker, and welcomes
// it only once `ready` holds; it records the key of every result it reads.
class SlowWelcomeFleet final : public v1::Fleet::Service {
 public:
  explicit SlowWelcomeFleet(std::function<bool()> ready)
      : ready_(std::move(ready)) {}

  std::vector<std::string> keys() {
    std::lock_guard<std::mutex> lock(mu_);
    return keys_;
  }

 private:
  grpc::Status Connect(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::PlannerMessage, v1::WorkerMessage>* stream)
      override {
    v1::WorkerMessage message;
    if (!stream->Read(&message)) return grpc::Status::OK;
    std::thread reader([&] {
      v1::WorkerMessage in;
      while (stream->Read(&in)) {
        if (!in.has_result()) continue;
        std::lock_guard<std::mutex> lock(mu_);
        keys_.push_back(in.result().key());
      }
    });
    v1::PlannerMessage assign;
    v1::Assignment& assignment = *assign.mutable_assignment();
    assignment.set_assignment_id("p-2.1");
    assignment.set_probe_id("p-2");
    for (uint32_t batch : {8u, 16u}) assignment.add_runs()->set_batch(batch);
    stream->Write(assign);
    if (WaitFor(ready_)) {
      v1::PlannerMessage welcome;
      welcome.mutable_welcome()->set_heartbeat_ms(60000);
      stream->Write(welcome);
    }
    reader.join();
    return grpc::Status::OK;
  }

  std::function<bool()> ready_;
  std::mutex mu_;
  std::vector<std::string> keys_;
};

TEST(DaemonConnectTest, ResultsMadeBeforeTheWelcomeGoAfterOlderOnes) {
  // A result an earlier run of the worker left unacknowledged.
  const std::string journal =
      ::testing::TempDir() + "/daemon-order-" + std::to_string(getpid());
  std::filesystem::remove_all(journal);
  {
    auto opened = ResultJournal::Open(journal, {});
    ASSERT_TRUE(opened.ok()) << opened.status();
    v1::ProbeResult old;
    old.set_key("p-1/32/0");
    old.set_probe_id("p-1");
    old.set_assignment_id("p-1.1");
    old.mutable_batch()->set_batch(32);
    ASSERT_TRUE((*opened)->Add(old).ok());
  }

  std::unique_ptr<WorkerDaemon> daemon;
  std::atomic<bool> made{false};
  // Welcomed only once the new assignment's two batches and its last
  // result are made (and, before the fix, already written).
  SlowWelcomeFleet fleet([&] { return made.load(); });
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      StartFleet(&fleet, "127.0.0.1:0", &port);
  ASSERT_GT(port, 0);

  DaemonOptions options;
  options.planner = "127.0.0.1:" + std::to_string(port);
  options.worker_id = "w-order";
  options.hostname = "w-order";
  options.journal_dir = journal;
  options.shutdown_grace = std::chrono::milliseconds(0);
  std::vector<std::unique_ptr<Executor>> executors;
  executors.push_back(std::make_unique<InstantExecutor>());
  daemon = std::make_unique<WorkerDaemon>(options, std::move(executors));
  std::thread watch([&] {
    made = WaitFor([&] { return daemon->counters().results_sent >= 3; });
  });
  std::thread run([&] { daemon->Run(); });
  watch.join();
  EXPECT_TRUE(made.load()) << "the assignment's results were not made";

  // The old result first, then the new ones in the order made: the last
  // result never arrives before a batch of its assignment.
  EXPECT_TRUE(WaitFor([&] { return fleet.keys().size() >= 4; }));
  const std::vector<std::string> keys = fleet.keys();
  EXPECT_THAT(keys, ::testing::ElementsAre("p-1/32/0", "p-2/8/0", "p-2/16/0",
                                           "p-2.1/final"));

  daemon->Stop();
  server->Shutdown(std::chrono::system_clock::now());
  run.join();
  std::filesystem::remove_all(journal);
}

TEST(DefaultWorkerIdTest, IsTheHostAndTheFirstGpusCatalogKind) {
  std::vector<v1::GpuDevice> gpus(2);
  gpus[0].set_name("NVIDIA H100 80GB HBM3");
  gpus[1].set_name("NVIDIA L4");
  EXPECT_EQ(DefaultWorkerId("node7", gpus), "node7-h100");
  gpus[0].set_name("L4");
  gpus[0].set_simulated(true);
  EXPECT_EQ(DefaultWorkerId("node7", gpus), "node7-sim-l4");
  gpus[0].set_name("NVIDIA A100-SXM4-40GB");
  gpus[0].set_simulated(false);
  EXPECT_EQ(DefaultWorkerId("node7", gpus), "node7-a100-40gb");
  // A card the catalog does not know: its driver name, made an id.
  gpus[0].set_name("Acme  Tensor/Card 9 (rev 2)");
  EXPECT_EQ(DefaultWorkerId("node7", gpus), "node7-acme-tensor-card-9-rev-2");
  EXPECT_EQ(DefaultWorkerId("node7", {}), "node7");
}

}  // namespace
}  // namespace headroom::worker
