// The fleet end to end on loopback, with the real binaries: a planner and
// three simulated workers (L4 24 GB, A10G 24 GB, H100 80 GB). Probes of two
// templates at four batches each; one worker killed mid-probe (a new worker
// of its kind finishes the assignment); the planner killed and restarted
// mid-run on the same database; a refit afterwards sees the new runs.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/sqlite_files.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

using ::headroom::testing::Child;
using ::headroom::testing::WaitFor;

class FleetIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    port_ = ::headroom::testing::FreeLoopbackPort();
    ASSERT_GT(port_, 0);
    address_ = "127.0.0.1:" + std::to_string(port_);
    db_ = ::testing::TempDir() + "/fleet-" + std::to_string(getpid()) + ".db";
    std::filesystem::remove(db_);
    journals_ =
        ::testing::TempDir() + "/fleet-journals-" + std::to_string(getpid());
    std::filesystem::remove_all(journals_);
    auto channel =
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    fleet_ = v1::Fleet::NewStub(channel);
    planner_stub_ = std::make_unique<testing::PlannerStubs>(channel);
  }
  void TearDown() override {
    workers_.clear();
    planner_.reset();
    RemoveSqliteFiles(db_);
    std::filesystem::remove_all(journals_);
  }

  void StartPlanner() {
    planner_ = std::make_unique<Child>(std::vector<std::string>{
        HEADROOM_PLANNER_BIN, "--listen=" + address_,
        "--http_listen=", "--models_dir=" + kRoot + "/models",
        "--runs=" + kRoot + "/data/memory-runs.jsonl",
        "--energy_curves=" + kRoot + "/data/energy-curves.json", "--db=" + db_,
        "--probe_lease_ms=1500", "--worker_heartbeat_ms=200",
        "--log_level=warn"});
  }

  void StartWorker(const std::string& id, const std::string& gpu, int step_ms) {
    workers_[id] = std::make_unique<Child>(std::vector<std::string>{
        HEADROOM_WORKER_BIN, "--planner=" + address_, "--worker_id=" + id,
        "--executors=sim", "--sim_gpu=" + gpu,
        "--sim_step_ms=" + std::to_string(step_ms), "--sample_ms=20",
        "--backoff_max_ms=400", "--journal_dir=" + journals_ + "/" + id,
        "--log_level=warn"});
  }

  // Polls (bounded) until the planner answers the fleet service; each
  // call waits for the channel to connect (see WorkersConnected).
  bool PlannerAnswers() {
    return WaitFor(
        [&] {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(2));
          context.set_wait_for_ready(true);
          v1::ListProbesResponse response;
          return fleet_->ListProbes(&context, {}, &response).ok();
        },
        30);
  }

  std::map<std::string, bool> Connected() {
    return ::headroom::testing::WorkersConnected(fleet_.get());
  }

  std::optional<v1::Probe> Get(const std::string& id) {
    return ::headroom::testing::ProbeSnapshot(fleet_.get(), id);
  }

  std::string Submit(const std::string& model, const std::string& gpu,
                     const std::vector<uint32_t>& batches) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_(model);
    request.set_gpu(gpu);
    for (uint32_t b : batches) request.add_batches(b);
    request.set_executor("sim");
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        fleet_->SubmitProbe(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.probe().id();
  }

  int port_ = 0;
  std::string address_;
  std::string db_;
  // One journal directory per worker id under it.
  std::string journals_;
  std::unique_ptr<Child> planner_;
  std::map<std::string, std::unique_ptr<Child>> workers_;
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<testing::PlannerStubs> planner_stub_;
};

TEST_F(FleetIntegrationTest, ProbesSurviveAWorkerKillAndAPlannerRestart) {
  StartPlanner();
  // The L4 worker steps slowly so that it can be killed mid-probe.
  StartWorker("sim-l4", "L4", 250);
  StartWorker("sim-a10g", "A10G", 60);
  StartWorker("sim-h100", "H100", 60);
  ASSERT_TRUE(WaitFor(
      [&] {
        auto c = Connected();
        return c["sim-l4"] && c["sim-a10g"] && c["sim-h100"];
      },
      30))
      << "workers did not connect";

  const std::vector<uint32_t> gpt2_batches = {8, 16, 32, 64};
  const std::vector<uint32_t> vit_batches = {8, 32, 96, 128};
  std::map<std::string, std::pair<std::string, std::string>> probes;
  const std::string l4_gpt2 = Submit("gpt2", "L4", gpt2_batches);
  probes[l4_gpt2] = {"gpt2", "L4"};
  for (const char* gpu : {"A10G", "H100"}) {
    probes[Submit("gpt2", gpu, gpt2_batches)] = {"gpt2", gpu};
  }
  for (const char* gpu : {"L4", "A10G", "H100"}) {
    probes[Submit("vit-b16", gpu, vit_batches)] = {"vit-b16", gpu};
  }
  ASSERT_EQ(probes.size(), 6u);

  // Kill the L4 worker once its first batch is stored, then bring up
  // another L4 worker: the re-queued assignment completes there.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto p = Get(l4_gpt2);
        return p && p->state() == v1::Probe::RUNNING && p->results_size() >= 1;
      },
      30));
  workers_["sim-l4"]->Kill(SIGKILL);
  StartWorker("sim-l4-b", "L4", 60);

  // Kill the planner mid-run (no clean shutdown) and start it again on the
  // same database and port; the workers reconnect and re-send.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  planner_->Kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  StartPlanner();

  std::map<std::string, v1::Probe> done;
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const auto& [id, what] : probes) {
          auto p = Get(id);
          if (!p) return false;
          if (p->state() == v1::Probe::SUCCEEDED ||
              p->state() == v1::Probe::FAILED) {
            done[id] = *p;
          }
        }
        return done.size() == probes.size();
      },
      90))
      << done.size() << " of " << probes.size() << " probes ended";

  for (const auto& [id, probe] : done) {
    const auto& [model, gpu] = probes[id];
    SCOPED_TRACE(id + " " + model + " on " + gpu);
    EXPECT_EQ(probe.state(), v1::Probe::SUCCEEDED) << probe.error();
    // Every batch exactly once, whatever was re-sent or re-run.
    std::multiset<uint32_t> batches;
    for (const auto& r : probe.results()) {
      batches.insert(r.batch());
      EXPECT_TRUE(r.simulated());
      EXPECT_TRUE(r.error().empty()) << r.error();
      if (model == "gpt2" && r.batch() == 64) {
        // 24 GB cards run out of memory at 64; the 80 GB card does not.
        EXPECT_EQ(r.oom(), gpu != "H100") << "batch 64";
      } else {
        EXPECT_FALSE(r.oom()) << "batch " << r.batch();
        EXPECT_GT(r.peak_allocated_gb(), 0);
      }
    }
    const auto& expected = model == "gpt2" ? gpt2_batches : vit_batches;
    EXPECT_EQ(batches,
              std::multiset<uint32_t>(expected.begin(), expected.end()));
  }
  // The killed worker's assignment finished on the new L4 worker.
  EXPECT_GE(done[l4_gpt2].attempts(), 2u);
  EXPECT_EQ(done[l4_gpt2].worker(), "sim-l4-b");

  // A refit sees the 24 new (simulated) runs only when asked to.
  auto refit = [&](bool include_simulated) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RefitRequest request;
    request.set_dry_run(true);
    request.set_include_simulated(include_simulated);
    v1::RefitResponse response;
    EXPECT_TRUE(
        planner_stub_->calibration->Refit(&context, request, &response).ok());
    return response.runs_used();
  };
  const int base = refit(false);
  EXPECT_EQ(base, 187);
  EXPECT_EQ(refit(true), base + 24);
}

TEST_F(FleetIntegrationTest, BadProbesAreRefusedAndNothingIsStored) {
  StartPlanner();
  ASSERT_TRUE(PlannerAnswers());
  struct Case {
    std::string what;
    v1::SubmitProbeRequest request;
    grpc::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  auto base = [] {
    v1::SubmitProbeRequest r;
    r.mutable_model()->set_template_("gpt2");
    r.set_gpu("L4");
    r.add_batches(8);
    return r;
  };
  cases.push_back({"no placement", base(), grpc::StatusCode::INVALID_ARGUMENT,
                   "placement"});
  cases.back().request.clear_gpu();
  cases.push_back({"unknown gpu", base(), grpc::StatusCode::NOT_FOUND, "gpu"});
  cases.back().request.set_gpu("Voodoo5");
  cases.push_back(
      {"unknown template", base(), grpc::StatusCode::NOT_FOUND, "gpt"});
  cases.back().request.mutable_model()->set_template_("gpt-17");
  cases.push_back(
      {"batch 0", base(), grpc::StatusCode::INVALID_ARGUMENT, "batches[1]"});
  cases.back().request.add_batches(0);
  cases.push_back(
      {"executor", base(), grpc::StatusCode::INVALID_ARGUMENT, "executor"});
  cases.back().request.set_executor("jax");
  cases.push_back({"repetitions", base(), grpc::StatusCode::INVALID_ARGUMENT,
                   "repetitions"});
  cases.back().request.set_repetitions(1000);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    grpc::ClientContext context;
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        fleet_->SubmitProbe(&context, c.request, &response);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_NE(status.error_message().find(c.says), std::string::npos)
        << status.error_message();
  }
  grpc::ClientContext context;
  v1::ListProbesResponse listed;
  ASSERT_TRUE(fleet_->ListProbes(&context, {}, &listed).ok());
  EXPECT_EQ(listed.probes_size(), 0);
  // Unknown probes: NOT_FOUND naming the id.
  grpc::ClientContext cancel_context;
  v1::CancelProbeRequest cancel;
  cancel.set_id("p-42");
  v1::CancelProbeResponse cancelled;
  const grpc::Status status =
      fleet_->CancelProbe(&cancel_context, cancel, &cancelled);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("p-42"), std::string::npos);
}

TEST_F(FleetIntegrationTest, BadWorkerMessagesEndTheStreamNotThePlanner) {
  StartPlanner();
  ASSERT_TRUE(PlannerAnswers());
  struct Case {
    std::string what;
    v1::WorkerMessage message;
    grpc::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases(3);
  cases[0] = {"bad worker id",
              {},
              grpc::StatusCode::INVALID_ARGUMENT,
              "hello.worker_id"};
  cases[0].message.mutable_hello()->set_worker_id("no spaces allowed");
  cases[1] = {"result before hello",
              {},
              grpc::StatusCode::FAILED_PRECONDITION,
              "hello first"};
  cases[1].message.mutable_result()->set_key("p-1/8/0");
  cases[2] = {"empty message",
              {},
              grpc::StatusCode::INVALID_ARGUMENT,
              "empty WorkerMessage"};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    auto stream = fleet_->Connect(&context);
    ASSERT_TRUE(stream->Write(c.message));
    v1::PlannerMessage reply;
    while (stream->Read(&reply)) {
    }
    const grpc::Status status = stream->Finish();
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_NE(status.error_message().find(c.says), std::string::npos)
        << status.error_message();
  }
  // The planner still serves, and no worker was registered.
  auto connected = Connected();
  EXPECT_TRUE(connected.empty());
  grpc::ClientContext context;
  v1::PingResponse pong;
  EXPECT_TRUE(planner_stub_->fit->Ping(&context, {}, &pong).ok());
}

}  // namespace
}  // namespace headroom

namespace headroom {
namespace {

v1::SubmitAutotuneRequest AutotuneRequest(uint32_t global_batch) {
  v1::SubmitAutotuneRequest request;
  v1::PlanMicrobatchRequest& plan = *request.mutable_plan();
  plan.set_template_("gpt2");
  plan.set_context(1024);
  plan.set_global_batch(global_batch);
  for (uint32_t c : {1, 2, 4, 8, 12, 16, 24, 32, 48, 64}) {
    plan.add_microbatch_candidates(c);
  }
  plan.set_compile_model(true);
  plan.set_attention_backend("eager");
  plan.set_vram_fraction(0.95);
  plan.set_reserve_gb(1);
  request.set_gpu("L4");
  request.set_executor("sim");
  request.set_steps(2);
  return request;
}

// Autotune on a sim L4 through the fleet: the worker searches, the record
// is stored in the cache and on the probe, the same request is then
// answered from the cache with no probe, and a changed setting misses.
TEST_F(FleetIntegrationTest, AutotuneRunsOnTheWorkerAndIsCached) {
  StartPlanner();
  ASSERT_TRUE(PlannerAnswers());
  StartWorker("sim-l4", "L4", 20);
  ASSERT_TRUE(WaitFor([&] { return Connected()["sim-l4"]; }, 30));

  const auto submit = [&](const v1::SubmitAutotuneRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::SubmitAutotuneResponse response;
    const grpc::Status status =
        fleet_->SubmitAutotune(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  const v1::SubmitAutotuneResponse first = submit(AutotuneRequest(64));
  ASSERT_FALSE(first.cache_reused());
  ASSERT_FALSE(first.probe().id().empty());
  EXPECT_EQ(first.plan().candidates_size(), 20);  // 10 eager + 10 compiled
  std::optional<v1::Probe> done;
  ASSERT_TRUE(WaitFor(
      [&] {
        done = Get(first.probe().id());
        return done.has_value() && done->state() != v1::Probe::QUEUED &&
               done->state() != v1::Probe::RUNNING;
      },
      90));
  ASSERT_EQ(done->state(), v1::Probe::SUCCEEDED) << done->error();

  // Each (microbatch, mode) stored once, and fewer runs than candidates.
  std::set<std::pair<uint32_t, std::string>> runs;
  for (const v1::BatchResult& r : done->results()) {
    EXPECT_TRUE(r.mode() == "eager" || r.mode() == "compiled") << r.mode();
    EXPECT_TRUE(runs.emplace(r.batch(), r.mode()).second)
        << r.mode() << " " << r.batch() << " stored twice";
  }
  EXPECT_GE(runs.size(), 2u);
  EXPECT_LT(runs.size(), 20u);

  v1::AutotuneRecord record;
  ASSERT_TRUE(
      google::protobuf::util::JsonStringToMessage(done->details_json(), &record)
          .ok())
      << done->details_json();
  ASSERT_TRUE(record.has_selected());
  EXPECT_EQ(record.cache_key().kind(), "sim");
  EXPECT_EQ(record.cache_key().gpu().name(), "L4");
  EXPECT_EQ(record.cache_key().settings().global_batch(), 64u);
  EXPECT_EQ(record.selection_policy(), "max_batch");
  EXPECT_EQ(record.measurements_size() +
                static_cast<int>(std::count_if(
                    record.failures().begin(), record.failures().end(),
                    [](const v1::MicrobatchFailure& f) {
                      return f.reason() == "oom";
                    })),
            static_cast<int>(runs.size()));

  {
    grpc::ClientContext context;
    v1::ListAutotuneRecordsResponse listed;
    ASSERT_TRUE(
        planner_stub_->microbatch->ListAutotuneRecords(&context, {}, &listed)
            .ok());
    ASSERT_EQ(listed.entries_size(), 1);
    EXPECT_EQ(listed.entries(0).record().selected().microbatch(),
              record.selected().microbatch());
    // Marked as the worker's: a client's put replaces it only with force.
    EXPECT_EQ(listed.entries(0).record().measured_by_probe().rfind("p-", 0), 0u)
        << listed.entries(0).record().measured_by_probe();
  }
  {
    // PlanMicrobatch with the record's key reuses it.
    v1::PlanMicrobatchRequest plan = AutotuneRequest(64).plan();
    plan.set_gpu("L4");
    *plan.mutable_cache_key() = record.cache_key();
    grpc::ClientContext context;
    v1::PlanMicrobatchResponse planned;
    ASSERT_TRUE(
        planner_stub_->microbatch->PlanMicrobatch(&context, plan, &planned)
            .ok());
    ASSERT_TRUE(planned.has_cached());
    EXPECT_TRUE(planned.cached().cache_reused());
    EXPECT_EQ(planned.measure_count(), 0);
  }

  const v1::SubmitAutotuneResponse again = submit(AutotuneRequest(64));
  EXPECT_TRUE(again.cache_reused());
  EXPECT_FALSE(again.has_probe());
  EXPECT_EQ(again.cached().selected().microbatch(),
            record.selected().microbatch());
  EXPECT_EQ(again.cached().selected().mode(), record.selected().mode());
  {
    grpc::ClientContext context;
    v1::ListProbesResponse probes;
    ASSERT_TRUE(fleet_->ListProbes(&context, {}, &probes).ok());
    EXPECT_EQ(probes.probes_size(), 1);
  }

  // Another global batch is another key: a probe, not the cache.
  const v1::SubmitAutotuneResponse changed = submit(AutotuneRequest(128));
  EXPECT_FALSE(changed.cache_reused());
  EXPECT_FALSE(changed.probe().id().empty());
  grpc::ClientContext context;
  v1::CancelProbeRequest cancel;
  cancel.set_id(changed.probe().id());
  v1::CancelProbeResponse cancelled;
  EXPECT_TRUE(fleet_->CancelProbe(&context, cancel, &cancelled).ok());
}

}  // namespace
}  // namespace headroom
