#ifndef HEADROOM_TESTS_SUPPORT_SIM_FLEET_H_
#define HEADROOM_TESTS_SUPPORT_SIM_FLEET_H_

// The planner binary on loopback over a SQLite file of the test's own, with
// the shipped models and energy curves, and simulated workers connected to
// it: what the worker integration tests start before each test. Needs
// HEADROOM_PLANNER_BIN, HEADROOM_WORKER_BIN and HEADROOM_SOURCE_DIR, which
// the worker tests' target defines.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/sqlite_files.h"

namespace headroom::testing {

class SimFleet {
 public:
  // `name` names the database file (and the workers' journals beside it)
  // in the test's temporary directory.
  explicit SimFleet(const std::string& name)
      : db_(::testing::TempDir() + "/" + name + "-" + std::to_string(getpid()) +
            ".db") {
    RemoveFiles();
  }
  // Stops the workers, then the planner, and removes their files.
  ~SimFleet() {
    for (auto& [id, worker] : workers_) worker.reset();
    planner_.reset();
    RemoveFiles();
  }
  SimFleet(const SimFleet&) = delete;
  SimFleet& operator=(const SimFleet&) = delete;

  // Starts the planner on a free loopback port (and an HTTP one when
  // `http`), with the shipped models and energy curves, a 200 ms worker
  // heartbeat and `flags` after those.
  ::testing::AssertionResult StartPlanner(const std::vector<std::string>& flags,
                                          bool http = false) {
    const int port = FreeLoopbackPort();
    if (port <= 0) return ::testing::AssertionFailure() << "no free port";
    http_port_ = http ? FreeLoopbackPortOtherThan(port) : 0;
    if (http && (http_port_ <= 0 || http_port_ == port)) {
      return ::testing::AssertionFailure() << "no second free port";
    }
    address_ = "127.0.0.1:" + std::to_string(port);
    // The planner is not listening yet: a channel's first connect fails,
    // and gRPC's default reconnect backoff (1 s, growing) would hold every
    // call after it for seconds; retry within 50-200 ms instead.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
    channel_ = grpc::CreateCustomChannel(
        address_, grpc::InsecureChannelCredentials(), args);
    fleet_ = v1::Fleet::NewStub(channel_);
    const std::string root = HEADROOM_SOURCE_DIR;
    std::vector<std::string> argv = {
        HEADROOM_PLANNER_BIN,
        "--listen=" + address_,
        "--http_listen=" +
            (http ? "127.0.0.1:" + std::to_string(http_port_) : ""),
        "--models_dir=" + root + "/models",
        "--energy_curves=" + root + "/data/energy-curves.json",
        "--db=" + db_,
        "--worker_heartbeat_ms=200",
        "--log_level=warn"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    return LaunchPlanner(std::move(argv));
  }

  // Kills the planner (SIGKILL, no goodbye to its workers) and starts it
  // again on the same address with the flags it had and `flags` after
  // those; waits until it listens.
  ::testing::AssertionResult RestartPlanner(
      const std::vector<std::string>& flags) {
    if (planner_ == nullptr) {
      return ::testing::AssertionFailure() << "no planner to restart";
    }
    planner_->Kill(SIGKILL);
    planner_.reset();
    std::vector<std::string> argv = planner_argv_;
    argv.insert(argv.end(), flags.begin(), flags.end());
    return LaunchPlanner(std::move(argv));
  }

  // Starts a worker `id` with the sim executor (its journal beside the
  // database) and `flags` after those, and waits until the planner counts
  // it connected (60 s at most).
  ::testing::AssertionResult StartWorker(
      const std::string& id, const std::vector<std::string>& flags) {
    std::vector<std::string> argv = {
        HEADROOM_WORKER_BIN,    "--planner=" + address_,
        "--worker_id=" + id,    "--executors=sim",
        "--backoff_max_ms=400", "--journal_dir=" + Journal(id),
        "--log_level=warn"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    workers_[id] = std::make_unique<Child>(std::move(argv));
    if (!WaitFor([&] { return WorkersConnected(fleet_.get())[id]; }, 60)) {
      return ::testing::AssertionFailure() << id << " never connected";
    }
    return ::testing::AssertionSuccess();
  }

  const std::string& address() const { return address_; }
  // 0 unless the planner was started with HTTP.
  int http_port() const { return http_port_; }
  const std::string& db() const { return db_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }
  v1::Fleet::Stub* fleet() const { return fleet_.get(); }

 private:
  ::testing::AssertionResult LaunchPlanner(std::vector<std::string> argv) {
    planner_argv_ = argv;
    planner_ = std::make_unique<Child>(std::move(argv));
    // A channel makes progress connecting only while someone waits on it:
    // wait here, so the first calls do not fail fast behind a connect
    // attempt nobody drives.
    if (!channel_->WaitForConnected(std::chrono::system_clock::now() +
                                    std::chrono::seconds(60))) {
      return ::testing::AssertionFailure()
             << "the planner never listened on " << address_;
    }
    return ::testing::AssertionSuccess();
  }

  std::string Journal(const std::string& id) const {
    return db_ + "." + id + ".journal";
  }
  void RemoveFiles() {
    RemoveSqliteFiles(db_);
    for (const auto& [id, worker] : workers_) {
      std::filesystem::remove_all(Journal(id));
    }
  }

  const std::string db_;
  std::string address_;
  int http_port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<Child> planner_;
  std::vector<std::string> planner_argv_;
  std::map<std::string, std::unique_ptr<Child>> workers_;
};

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_SIM_FLEET_H_
