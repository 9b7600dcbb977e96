// Several planner replicas over one store, with the real binaries on
// loopback (issue 9, item 2): a probe submitted to one replica is run by a
// worker connected to another and watched from a third; the replica the
// worker was connected to is killed mid-probe and nothing is lost; a factor
// set promoted on one replica is what the others answer with within a
// bounded time; CheckFit gives the same answer on every replica.
//
// Runs against PostgreSQL (HEADROOM_TEST_PG_URL, a fresh database per
// test) and against one SQLite file in WAL mode shared by the processes.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/util/message_differencer.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/postgres.h"
#include "tests/support/sqlite_files.h"

namespace headroom {
namespace {

using ::headroom::testing::Child;
using ::headroom::testing::WaitFor;

const std::string kRoot = HEADROOM_SOURCE_DIR;
constexpr int kPollMs = 200;
constexpr uint32_t kLongProbeBatches = 48;

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

struct Replica {
  std::string address;
  std::unique_ptr<Child> process;
  std::unique_ptr<testing::PlannerStubs> planner;
  std::unique_ptr<v1::Fleet::Stub> fleet;

  bool Answers() {
    grpc::ClientContext context;
    context.set_deadline(In(1));
    // Waits for the channel to connect (see WorkersConnected).
    context.set_wait_for_ready(true);
    v1::PingResponse pong;
    return planner->fit->Ping(&context, {}, &pong).ok();
  }
  std::string CurrentVersion() {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    v1::ListFactorSetsResponse response;
    if (!planner->calibration->ListFactorSets(&context, {}, &response).ok())
      return "";
    return response.current_version();
  }
  std::optional<v1::Probe> Get(const std::string& id) {
    return ::headroom::testing::ProbeSnapshot(fleet.get(), id);
  }
};

class ReplicasTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "postgres") {
      HEADROOM_SKIP_WITHOUT_POSTGRES();
      auto database = ::headroom::testing::TemporaryPostgresDatabase::Create();
      ASSERT_TRUE(database.ok()) << database.status();
      database_ = *std::move(database);
      location_ = database_->url();
    } else {
      location_ = ::testing::TempDir() + "/replicas-" +
                  std::to_string(getpid()) + ".db";
      RemoveSqlite();
    }
  }
  void TearDown() override {
    workers_.clear();
    replicas_.clear();
    database_.reset();
    if (GetParam() == "sqlite") RemoveSqlite();
    std::filesystem::remove_all(journals_);
  }
  void RemoveSqlite() { RemoveSqliteFiles(location_); }

  Replica& StartReplica(const std::string& name) {
    Replica& replica = replicas_[name];
    const int port = ::headroom::testing::FreeLoopbackPort();
    replica.address = "127.0.0.1:" + std::to_string(port);
    replica.process = std::make_unique<Child>(std::vector<std::string>{
        HEADROOM_PLANNER_BIN, "--listen=" + replica.address,
        "--http_listen=", "--models_dir=" + kRoot + "/models",
        "--runs=" + kRoot + "/data/memory-runs.jsonl",
        "--energy_curves=" + kRoot + "/data/energy-curves.json",
        "--db=" + location_, "--probe_lease_ms=1500",
        "--worker_heartbeat_ms=200",
        "--store_poll_ms=" + std::to_string(kPollMs), "--log_level=warn"});
    auto channel = grpc::CreateChannel(replica.address,
                                       grpc::InsecureChannelCredentials());
    replica.planner = std::make_unique<testing::PlannerStubs>(channel);
    replica.fleet = v1::Fleet::NewStub(channel);
    return replica;
  }

  void StartWorker(const std::string& id, const std::string& planner,
                   int step_ms) {
    workers_[id] = std::make_unique<Child>(std::vector<std::string>{
        HEADROOM_WORKER_BIN, "--planner=" + replicas_[planner].address,
        "--worker_id=" + id, "--executors=sim", "--sim_gpu=L4",
        "--sim_step_ms=" + std::to_string(step_ms), "--sample_ms=20",
        "--backoff_max_ms=400", "--journal_dir=" + journals_ + "/" + id,
        "--log_level=warn"});
  }

  bool ConnectedSomewhere(const std::string& via, const std::string& id) {
    return ::headroom::testing::WorkersConnected(
        replicas_[via].fleet.get())[id];
  }

  std::string location_;
  // Each worker's journal directory is under it.
  const std::string journals_ =
      ::testing::TempDir() + "/replica-journals-" + std::to_string(getpid());
  std::unique_ptr<::headroom::testing::TemporaryPostgresDatabase> database_;
  std::map<std::string, Replica> replicas_;
  std::map<std::string, std::unique_ptr<Child>> workers_;
};

TEST_P(ReplicasTest, ProbesFactorSetsAndAnswersAreSharedAcrossReplicas) {
  // The first replica creates the schema and the first factor set; the
  // others start on what it stored.
  StartReplica("a");
  ASSERT_TRUE(WaitFor([&] { return replicas_["a"].Answers(); }, 60));
  StartReplica("b");
  StartReplica("c");
  ASSERT_TRUE(WaitFor(
      [&] { return replicas_["b"].Answers() && replicas_["c"].Answers(); },
      60));
  const std::string first = replicas_["a"].CurrentVersion();
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(replicas_["b"].CurrentVersion(), first);
  EXPECT_EQ(replicas_["c"].CurrentVersion(), first);

  // One worker, connected to b only, stepping slowly enough to be caught
  // mid-probe. a sees it through the store.
  StartWorker("sim-l4-on-b", "b", 200);
  ASSERT_TRUE(
      WaitFor([&] { return ConnectedSomewhere("a", "sim-l4-on-b"); }, 30));

  // Submitted to a, watched (following) on c.
  const std::vector<uint32_t> batches = {8, 16, 32, 64};
  std::string id;
  {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("gpt2");
    request.set_gpu("L4");
    for (uint32_t b : batches) request.add_batches(b);
    request.set_executor("sim");
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        replicas_["a"].fleet->SubmitProbe(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    id = response.probe().id();
  }
  std::multiset<uint32_t> watched_results;
  std::optional<v1::Probe> watched_final;
  grpc::Status watch_status;
  std::thread watcher([&] {
    grpc::ClientContext context;
    context.set_deadline(In(90));
    v1::WatchProbeRequest request;
    request.set_id(id);
    request.set_follow(true);
    auto reader = replicas_["c"].fleet->WatchProbe(&context, request);
    v1::ProbeEvent event;
    for (int i = 0; i < 100000 && reader->Read(&event); ++i) {
      if (event.has_result()) watched_results.insert(event.result().batch());
      if (event.has_probe()) watched_final = event.probe();
    }
    watch_status = reader->Finish();
  });

  // The worker on b runs it; b dies (no clean shutdown) once a batch is
  // stored. A second worker, on c, finishes the re-queued probe.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = replicas_["a"].Get(id);
        return p && p->state() == v1::Probe::RUNNING &&
               p->worker() == "sim-l4-on-b" && p->results_size() >= 1;
      },
      30));
  replicas_["b"].process->Kill(SIGKILL);
  StartWorker("sim-l4-on-c", "c", 20);

  std::optional<v1::Probe> done;
  ASSERT_TRUE(WaitFor(
      [&] {
        done = replicas_["a"].Get(id);
        return done && (done->state() == v1::Probe::SUCCEEDED ||
                        done->state() == v1::Probe::FAILED);
      },
      60))
      << "probe did not end";
  watcher.join();
  EXPECT_EQ(done->state(), v1::Probe::SUCCEEDED) << done->error();
  EXPECT_EQ(done->worker(), "sim-l4-on-c");
  EXPECT_GE(done->attempts(), 2u);
  // Every batch exactly once, in the store and in what c's watcher saw.
  std::multiset<uint32_t> stored;
  for (const auto& r : done->results()) stored.insert(r.batch());
  const std::multiset<uint32_t> expected(batches.begin(), batches.end());
  EXPECT_EQ(stored, expected);
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_message();
  EXPECT_EQ(watched_results, expected);
  ASSERT_TRUE(watched_final.has_value());
  EXPECT_EQ(watched_final->state(), v1::Probe::SUCCEEDED);

  // A refit forced on a (the simulated runs included, so the factors
  // change) becomes what c answers with, within a bounded time.
  std::string promoted;
  {
    grpc::ClientContext context;
    context.set_deadline(In(60));
    v1::RefitRequest request;
    request.set_include_simulated(true);
    request.set_force(true);
    v1::RefitResponse response;
    const grpc::Status status = replicas_["a"].planner->calibration->Refit(
        &context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_TRUE(response.promoted());
    promoted = response.factor_set().version();
  }
  ASSERT_NE(promoted, first);
  EXPECT_EQ(replicas_["a"].CurrentVersion(), promoted);
  EXPECT_TRUE(
      WaitFor([&] { return replicas_["c"].CurrentVersion() == promoted; }, 10))
      << "c still answers with " << replicas_["c"].CurrentVersion();

  // The same answer from both replicas for the same factor-set version.
  v1::CheckFitRequest check;
  check.mutable_model()->set_template_("qwen3-8b-r");
  check.add_batches(1);
  check.add_batches(4);
  check.add_targets()->set_gpu("H100");
  check.add_targets()->set_gpu("L4");
  // Each replica rebuilds its evidence from the shared store after the
  // refit's import; once both have, they answer alike.
  v1::CheckFitResponse on_a, on_c;
  const auto ask = [&](const char* name, v1::CheckFitResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    return replicas_[name].planner->fit->CheckFit(&context, check, out).ok();
  };
  EXPECT_TRUE(WaitFor(
      [&] {
        return ask("a", &on_a) && ask("c", &on_c) &&
               google::protobuf::util::MessageDifferencer::Equals(on_a, on_c);
      },
      10))
      << on_a.ShortDebugString() << "\nvs\n"
      << on_c.ShortDebugString();
  EXPECT_EQ(on_a.factor_set_version(), promoted);

  // A rollback on c is followed by a.
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::PromoteFactorSetRequest request;
    request.set_rollback(true);
    v1::PromoteFactorSetResponse response;
    ASSERT_TRUE(replicas_["c"]
                    .planner->calibration
                    ->PromoteFactorSet(&context, request, &response)
                    .ok());
    EXPECT_EQ(response.current_version(), first);
  }
  EXPECT_TRUE(
      WaitFor([&] { return replicas_["a"].CurrentVersion() == first; }, 10));
}

TEST_P(ReplicasTest, ACancelOnOneReplicaStopsTheWorkerOnAnother) {
  StartReplica("a");
  ASSERT_TRUE(WaitFor([&] { return replicas_["a"].Answers(); }, 60));
  StartReplica("b");
  ASSERT_TRUE(WaitFor([&] { return replicas_["b"].Answers(); }, 60));
  StartWorker("sim-l4-on-b", "b", 300);
  ASSERT_TRUE(
      WaitFor([&] { return ConnectedSomewhere("a", "sim-l4-on-b"); }, 30));
  std::string id;
  {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("gpt2");
    request.set_worker("sim-l4-on-b");
    // About a second per batch run: a minute for all of them.
    for (uint32_t b = 1; b <= kLongProbeBatches; ++b) request.add_batches(b);
    request.set_executor("sim");
    v1::SubmitProbeResponse response;
    ASSERT_TRUE(
        replicas_["a"].fleet->SubmitProbe(&context, request, &response).ok());
    id = response.probe().id();
  }
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = replicas_["a"].Get(id);
        return p && p->state() == v1::Probe::RUNNING;
      },
      30));
  {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    v1::CancelProbeRequest request;
    request.set_id(id);
    v1::CancelProbeResponse response;
    ASSERT_TRUE(
        replicas_["a"].fleet->CancelProbe(&context, request, &response).ok());
    EXPECT_EQ(response.probe().state(), v1::Probe::CANCELLED);
  }
  // b withdraws the assignment: its worker is free again (it takes a new
  // probe and ends it) long before the cancelled one could have finished.
  std::string next;
  {
    grpc::ClientContext context;
    context.set_deadline(In(5));
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("vit-b16");
    request.set_worker("sim-l4-on-b");
    request.add_batches(8);
    request.set_executor("sim");
    v1::SubmitProbeResponse response;
    ASSERT_TRUE(
        replicas_["a"].fleet->SubmitProbe(&context, request, &response).ok());
    next = response.probe().id();
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        auto p = replicas_["a"].Get(next);
        return p && p->state() == v1::Probe::SUCCEEDED;
      },
      15));
  auto cancelled = replicas_["a"].Get(id);
  ASSERT_TRUE(cancelled.has_value());
  EXPECT_EQ(cancelled->state(), v1::Probe::CANCELLED);
  EXPECT_LT(cancelled->results_size(), static_cast<int>(kLongProbeBatches) / 2);
}

INSTANTIATE_TEST_SUITE_P(Stores, ReplicasTest,
                         ::testing::Values("postgres", "sqlite"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace headroom
