// A worker restart does not lose results (issue 19, item 8): a worker
// measures a batch for a planner that never acknowledges (a fake in this
// process), is killed with SIGKILL, and, restarted against the real
// planner on the probe's store, sends the journaled results again; the
// planner stores the batch once and the journal empties.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "server/store/sqlite_store.h"
#include "tests/support/child_process.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/sqlite_files.h"

namespace headroom {
namespace {

namespace fs = std::filesystem;

const std::string kRoot = HEADROOM_SOURCE_DIR;

using ::headroom::testing::Child;
using ::headroom::testing::WaitFor;

// A planner that welcomes a worker, gives it one assignment and keeps every
// result it is sent without acknowledging any.
class SilentPlanner final : public v1::Fleet::Service {
 public:
  explicit SilentPlanner(v1::Assignment assignment)
      : assignment_(std::move(assignment)) {}

  grpc::Status Connect(
      grpc::ServerContext* /*context*/,
      grpc::ServerReaderWriter<v1::PlannerMessage, v1::WorkerMessage>* stream)
      override {
    v1::WorkerMessage in;
    if (!stream->Read(&in) || !in.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "hello first");
    }
    v1::PlannerMessage out;
    out.mutable_welcome()->set_heartbeat_ms(200);
    stream->Write(out);
    *out.mutable_assignment() = assignment_;
    stream->Write(out);
    for (int i = 0; i < 100000 && stream->Read(&in); ++i) {
      if (!in.has_result()) continue;
      std::lock_guard<std::mutex> lock(mu_);
      results_.push_back(in.result());
      changed_.notify_all();
    }
    return grpc::Status::OK;
  }

  // Waits (bounded) until a final result has arrived; the results so far.
  std::vector<v1::ProbeResult> WaitForFinal(std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait_for(lock, timeout, [&] {
      for (const v1::ProbeResult& r : results_) {
        if (r.final()) return true;
      }
      return false;
    });
    return results_;
  }

 private:
  const v1::Assignment assignment_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::vector<v1::ProbeResult> results_;
};

class JournalIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base =
        ::testing::TempDir() + "/journal-it-" + std::to_string(getpid());
    db_ = base + ".db";
    journal_ = base + "-journal";
    RemoveFiles();
    const int port = ::headroom::testing::FreeLoopbackPort();
    ASSERT_GT(port, 0);
    address_ = "127.0.0.1:" + std::to_string(port);
    fleet_ = v1::Fleet::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    worker_.reset();
    planner_.reset();
    RemoveFiles();
  }
  void RemoveFiles() {
    RemoveSqliteFiles(db_);
    fs::remove_all(journal_);
  }

  void StartPlanner() {
    planner_ = std::make_unique<Child>(std::vector<std::string>{
        HEADROOM_PLANNER_BIN, "--listen=" + address_,
        "--http_listen=", "--models_dir=" + kRoot + "/models",
        "--runs=" + kRoot + "/data/memory-runs.jsonl",
        "--energy_curves=" + kRoot + "/data/energy-curves.json", "--db=" + db_,
        "--probe_lease_ms=120000", "--worker_heartbeat_ms=200",
        "--log_level=warn"});
    ASSERT_TRUE(WaitFor(
        [&] {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(2));
          // Waits for the channel to connect (see WorkersConnected).
          context.set_wait_for_ready(true);
          v1::ListProbesResponse response;
          return fleet_->ListProbes(&context, {}, &response).ok();
        },
        30));
  }

  void StartWorker(const std::string& planner) {
    worker_ = std::make_unique<Child>(std::vector<std::string>{
        HEADROOM_WORKER_BIN, "--planner=" + planner, "--worker_id=sim-journal",
        "--executors=sim", "--sim_gpu=L4", "--sim_step_ms=20", "--sample_ms=20",
        "--backoff_max_ms=400", "--journal_dir=" + journal_,
        "--log_level=warn"});
  }

  // Journal entries waiting now.
  int Journaled() {
    int entries = 0;
    std::error_code error;
    for (fs::directory_iterator it(journal_, error), end;
         !error && it != end && entries < 1000; it.increment(error)) {
      const std::string name = it->path().filename().string();
      if (name.rfind("r-", 0) == 0) ++entries;
    }
    return entries;
  }

  std::string db_;
  std::string journal_;
  std::string address_;
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<Child> planner_;
  std::unique_ptr<Child> worker_;
};

TEST_F(JournalIntegrationTest, AKilledWorkerResendsItsResultsAfterARestart) {
  // The probe, queued by the real planner.
  StartPlanner();
  std::string probe_id;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("gpt2");
    request.set_gpu("L4");
    request.add_batches(8);
    request.set_executor("sim");
    v1::SubmitProbeResponse response;
    ASSERT_TRUE(fleet_->SubmitProbe(&context, request, &response).ok());
    probe_id = response.probe().id();
  }
  planner_.reset();  // SIGKILL: no worker ever connected to it

  // Claimed for the worker in the store, as the dispatcher would, and
  // handed to it by the silent planner.
  v1::Assignment assignment;
  {
    auto store = SqliteStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    const int64_t now_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(
            std::chrono::system_clock::now().time_since_epoch())
            .count();
    auto claimed =
        (*store)->ClaimProbe("sim-journal", {"L4"}, {"sim"}, now_ms, 120000);
    ASSERT_TRUE(claimed.ok() && claimed->has_value());
    const v1::Probe& probe = **claimed;
    assignment.set_assignment_id(probe.assignment_id());
    assignment.set_probe_id(probe.id());
    *assignment.mutable_spec() = probe.spec();
    assignment.set_template_(probe.template_());
    *assignment.mutable_setup() = probe.request().setup();
    assignment.add_runs()->set_batch(8);
    assignment.set_executor("sim");
    assignment.set_warmup_steps(1);
    assignment.set_steps(2);
    assignment.set_lease_ms(120000);
    assignment.set_batch_timeout_s(60);
  }
  SilentPlanner silent(assignment);
  int silent_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &silent_port);
  builder.RegisterService(&silent);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_GT(silent_port, 0);

  StartWorker("127.0.0.1:" + std::to_string(silent_port));
  const std::vector<v1::ProbeResult> sent =
      silent.WaitForFinal(std::chrono::seconds(60));
  ASSERT_EQ(sent.size(), 2u) << "a batch result and the final";
  EXPECT_EQ(sent[0].batch().batch(), 8u);
  EXPECT_TRUE(sent[1].final());
  // Both were on disk before they were sent.
  EXPECT_EQ(Journaled(), 2);
  worker_->Kill(SIGKILL);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));

  // Restarted against the real planner: the journal goes again, the batch
  // is stored once, the final ends the assignment, the journal empties.
  StartPlanner();
  StartWorker(address_);
  std::optional<v1::Probe> probe;
  ASSERT_TRUE(WaitFor(
      [&] {
        probe = ::headroom::testing::ProbeSnapshot(fleet_.get(), probe_id);
        return probe.has_value() && probe->state() == v1::Probe::SUCCEEDED;
      },
      60))
      << (probe ? probe->DebugString() : "no probe");
  ASSERT_EQ(probe->results_size(), 1);
  EXPECT_EQ(probe->results(0).batch(), 8u);
  EXPECT_EQ(probe->results(0).peak_allocated_gb(),
            sent[0].batch().peak_allocated_gb());
  EXPECT_EQ(probe->attempts(), 1u);
  EXPECT_TRUE(WaitFor([&] { return Journaled() == 0; }, 30));

  // And so it is in the store itself.
  worker_.reset();
  auto store = SqliteStore::Open(db_);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->GetProbe(probe_id)->results_size(), 1);
}

}  // namespace
}  // namespace headroom
