// What a worker may report (issue 19, item 4), against the real planner
// (PlannerApp on port 0) and a fake worker speaking Fleet.Connect: every
// attack found on the fleet gets a named refusal, nothing stored, and the
// planner goes on serving.

#include "server/service/fleet/worker_reports.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "server/store/sqlite_store.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/sqlite_files.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::headroom::testing::WaitFor;

// One Fleet.Connect stream driven by the test; every read is bounded by
// the call's deadline.
class FakeWorker {
 public:
  explicit FakeWorker(v1::Fleet::Stub* fleet) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(60));
    stream_ = fleet->Connect(&context_);
  }
  ~FakeWorker() { context_.TryCancel(); }

  bool Send(const v1::WorkerMessage& message) {
    return stream_->Write(message);
  }
  bool Send(const v1::ProbeResult& result) {
    v1::WorkerMessage message;
    *message.mutable_result() = result;
    return Send(message);
  }
  // Sends an H100 (80 GB) hello as `id` and reads until welcomed (or the
  // stream ends).
  bool Hello(const std::string& id) {
    v1::WorkerMessage message;
    *message.mutable_hello() = H100Hello(id);
    if (!Send(message)) return false;
    return Next([](const v1::PlannerMessage& m) { return m.has_welcome(); })
        .has_value();
  }
  static v1::WorkerHello H100Hello(const std::string& id) {
    v1::WorkerHello hello;
    hello.set_worker_id(id);
    hello.set_hostname(id);
    v1::GpuDevice& gpu = *hello.add_gpus();
    gpu.set_index(0);
    gpu.set_name("NVIDIA H100 80GB HBM3");
    gpu.set_memory_bytes(80'000'000'000);
    hello.add_executors("torch");
    return hello;
  }
  // The next message that `match`es, from those read before and skipped
  // (the planner may send the next assignment before an ack) or else from
  // the stream; nullopt when the stream ends first.
  std::optional<v1::PlannerMessage> Next(
      const std::function<bool(const v1::PlannerMessage&)>& match) {
    for (auto it = skipped_.begin(); it != skipped_.end(); ++it) {
      if (!match(*it)) continue;
      v1::PlannerMessage message = std::move(*it);
      skipped_.erase(it);
      return message;
    }
    v1::PlannerMessage message;
    for (int i = 0; i < 10000 && stream_->Read(&message); ++i) {
      if (match(message)) return message;
      if (skipped_.size() < 10000) skipped_.push_back(message);
    }
    return std::nullopt;
  }
  // The acknowledgement or rejection of the result sent as `key`.
  std::optional<v1::PlannerMessage> AnswerTo(const std::string& key) {
    return Next([&](const v1::PlannerMessage& m) {
      if (m.has_rejected()) return m.rejected().key() == key;
      if (!m.has_ack()) return false;
      for (const std::string& k : m.ack().keys()) {
        if (k == key) return true;
      }
      return false;
    });
  }
  // The status the planner ended the stream with.
  grpc::Status Finish() {
    stream_->WritesDone();
    v1::PlannerMessage message;
    for (int i = 0; i < 10000 && stream_->Read(&message); ++i) {
    }
    return stream_->Finish();
  }

 private:
  grpc::ClientContext context_;
  std::deque<v1::PlannerMessage> skipped_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::WorkerMessage, v1::PlannerMessage>>
      stream_;
};

class WorkerReportsTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(":memory:"); }
  // (Re)starts the planner on the store at `db`.
  void Start(const std::string& db) {
    if (app_ != nullptr) app_->Shutdown(std::chrono::milliseconds(500));
    app_.reset();
    PlannerConfig config = ::headroom::testing::TestPlannerConfig();
    config.worker_heartbeat_ms = 1000;
    config.db_path = db;
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = *std::move(app);
    auto channel =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    fleet_ = v1::Fleet::NewStub(channel);
    planner_ = std::make_unique<testing::PlannerStubs>(channel);
  }
  void TearDown() override {
    if (app_ != nullptr) app_->Shutdown(std::chrono::milliseconds(500));
  }

  std::string SubmitH100(uint32_t repetitions = 1) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("gpt2");
    request.set_gpu("H100");
    request.add_batches(8);
    request.add_batches(16);
    request.set_repetitions(repetitions);
    request.set_executor("torch");
    v1::SubmitProbeResponse response;
    EXPECT_TRUE(fleet_->SubmitProbe(&context, request, &response).ok());
    return response.probe().id();
  }

  std::optional<v1::Probe> Probe(const std::string& id) {
    return ::headroom::testing::ProbeSnapshot(fleet_.get(), id);
  }

  // Runs a dry-run refit (simulated runs excluded) and returns runs used.
  int RefitRuns() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RefitRequest request;
    request.set_dry_run(true);
    v1::RefitResponse response;
    EXPECT_TRUE(
        planner_->calibration->Refit(&context, request, &response).ok());
    return response.runs_used();
  }

  // headroom_worker_messages_rejected_total{reason="<reason>"}, from
  // /metrics.
  double Rejected(const std::string& reason) {
    const std::string body = ::headroom::testing::HttpBody(
        ::headroom::testing::HttpGet(app_->http_port(), "/metrics"));
    const std::string series =
        "headroom_worker_messages_rejected_total{reason=\"" + reason + "\"} ";
    const size_t at = body.find(series);
    if (at == std::string::npos) return -1;
    return std::stod(body.substr(at + series.size()));
  }

  bool Serving() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    v1::PingResponse pong;
    return planner_->fit->Ping(&context, {}, &pong).ok();
  }

  static v1::ProbeResult Batch(const v1::Assignment& assignment,
                               const std::string& key, uint32_t batch,
                               uint32_t repetition, double peak_gb) {
    v1::ProbeResult result;
    result.set_key(key);
    result.set_probe_id(assignment.probe_id());
    result.set_assignment_id(assignment.assignment_id());
    result.mutable_batch()->set_batch(batch);
    result.mutable_batch()->set_repetition(repetition);
    result.mutable_batch()->set_peak_allocated_gb(peak_gb);
    result.mutable_batch()->set_step_seconds(0.25);
    return result;
  }

  std::unique_ptr<PlannerApp> app_;
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<testing::PlannerStubs> planner_;
};

std::optional<v1::Assignment> AssignmentOf(FakeWorker& worker) {
  auto message = worker.Next(
      [](const v1::PlannerMessage& m) { return m.has_assignment(); });
  if (!message.has_value()) return std::nullopt;
  return message->assignment();
}

// A fake worker claiming an H100 takes a probe and reports NaN, -5 and
// 1e6 GB peaks, a batch never assigned, repetition 99, an OOM with a peak
// and zero step seconds: each refused by name, none stored, a refit sees
// none of them; a good result on the same stream is still stored.
TEST_F(WorkerReportsTest, ImplausibleReportsAreRejectedByNameAndNotStored) {
  const int runs_before = RefitRuns();
  ASSERT_GT(runs_before, 0);
  FakeWorker worker(fleet_.get());
  ASSERT_TRUE(worker.Hello("fake-h100"));
  const std::string probe_id = SubmitH100();
  const std::optional<v1::Assignment> assignment = AssignmentOf(worker);
  ASSERT_TRUE(assignment.has_value());
  ASSERT_EQ(assignment->probe_id(), probe_id);

  struct Case {
    std::string key;
    v1::ProbeResult result;
    std::string reason;
    std::string says;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<Case> cases = {
      {"nan", Batch(*assignment, "nan", 8, 0, nan), "implausible_value",
       "peak_allocated_gb = nan"},
      {"negative", Batch(*assignment, "negative", 8, 0, -5),
       "implausible_value", "peak_allocated_gb = -5"},
      {"huge", Batch(*assignment, "huge", 8, 0, 1e6), "implausible_value",
       "more than the card's 80 GB"},
      {"batch 7", Batch(*assignment, "batch 7", 7, 0, 10), "unknown_batch",
       "batch 7 repetition 0"},
      {"rep 99", Batch(*assignment, "rep 99", 8, 99, 10), "unknown_batch",
       "repetition 99"},
      {"oom and peak", Batch(*assignment, "oom and peak", 8, 0, 10),
       "implausible_value", "oom with peak_allocated_gb"},
      {"zero seconds", Batch(*assignment, "zero seconds", 8, 0, 10),
       "implausible_value", "step_seconds = 0"},
  };
  cases[5].result.mutable_batch()->set_oom(true);
  cases[6].result.mutable_batch()->set_step_seconds(0);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    ASSERT_TRUE(worker.Send(c.result));
    const auto answer = worker.AnswerTo(c.key);
    ASSERT_TRUE(answer.has_value());
    ASSERT_TRUE(answer->has_rejected()) << answer->DebugString();
    EXPECT_EQ(answer->rejected().reason(), c.reason);
    EXPECT_NE(answer->rejected().detail().find(c.says), std::string::npos)
        << answer->rejected().detail();
  }
  EXPECT_EQ(Rejected("implausible_value"), 5);
  EXPECT_EQ(Rejected("unknown_batch"), 2);
  EXPECT_EQ(Rejected("not_leased"), 0);
  EXPECT_EQ(Probe(probe_id)->results_size(), 0);
  EXPECT_EQ(RefitRuns(), runs_before);
  EXPECT_TRUE(Serving());

  // The stream still carries good work.
  ASSERT_TRUE(worker.Send(Batch(*assignment, "good", 8, 0, 30)));
  const auto answer = worker.AnswerTo("good");
  ASSERT_TRUE(answer.has_value() && answer->has_ack())
      << (answer ? answer->DebugString() : "stream ended");
  ASSERT_EQ(Probe(probe_id)->results_size(), 1);
  EXPECT_EQ(Probe(probe_id)->results(0).peak_allocated_gb(), 30);
  EXPECT_EQ(RefitRuns(), runs_before + 1);
}

// Issue 32: a worker stored energy 1e300 J and a step of 1e9 s, and a
// training-energy answer then said 3.3e299 J per step. A worker's result
// is held to the bounds a Refit holds an import to (one table): each is
// refused by name, nothing stored, and a refit sees none of them.
TEST_F(WorkerReportsTest, ResultsAreHeldToTheBoundsOfARefit) {
  const int runs_before = RefitRuns();
  FakeWorker worker(fleet_.get());
  ASSERT_TRUE(worker.Hello("fake-h100"));
  const std::string probe_id = SubmitH100();
  const std::optional<v1::Assignment> assignment = AssignmentOf(worker);
  ASSERT_TRUE(assignment.has_value());
  struct Case {
    std::string key;
    std::function<void(v1::BatchResult*)> edit;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"energy", [](v1::BatchResult* b) { b->set_energy_j(1e300); },
       "energy_j = 1e+300 is out of range; allowed [0, 6.3072e+10] J"},
      {"step", [](v1::BatchResult* b) { b->set_step_seconds(1e9); },
       "step_seconds = 1e+09 is out of range; allowed (0, 86400] s"},
      // Within the total, but 4 MJ over ten 0.25 s steps is 1.6 MW.
      {"power",
       [](v1::BatchResult* b) {
         b->set_energy_j(4e6);
         b->set_timed_steps(10);
       },
       "run.energy_j = 4e+06 J over 10 steps of 0.25 s on 1 GPU(s)"},
      {"steps", [](v1::BatchResult* b) { b->set_timed_steps(4294967295u); },
       "run.timed_steps = 4294967295 is out of range"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    v1::ProbeResult result = Batch(*assignment, c.key, 8, 0, 30);
    c.edit(result.mutable_batch());
    ASSERT_TRUE(worker.Send(result));
    const auto answer = worker.AnswerTo(c.key);
    ASSERT_TRUE(answer.has_value());
    ASSERT_TRUE(answer->has_rejected()) << answer->DebugString();
    EXPECT_EQ(answer->rejected().reason(), "implausible_value");
    EXPECT_NE(answer->rejected().detail().find(c.says), std::string::npos)
        << answer->rejected().detail();
  }
  EXPECT_EQ(Rejected("implausible_value"), 4);
  EXPECT_EQ(Probe(probe_id)->results_size(), 0);
  EXPECT_EQ(RefitRuns(), runs_before);

  // A plausible one on the same stream is stored: 700 W over its steps.
  v1::ProbeResult good = Batch(*assignment, "good", 8, 0, 30);
  good.mutable_batch()->set_timed_steps(10);
  good.mutable_batch()->set_energy_j(700 * 10 * 0.25);
  ASSERT_TRUE(worker.Send(good));
  const auto answer = worker.AnswerTo("good");
  ASSERT_TRUE(answer.has_value() && answer->has_ack())
      << (answer ? answer->DebugString() : "stream ended");
  EXPECT_EQ(Probe(probe_id)->results_size(), 1);
  EXPECT_TRUE(Serving());
}

// A second connection names another worker's running assignment: its
// results and its final are refused, the probe stays RUNNING with nothing
// measured.
TEST_F(WorkerReportsTest, AnotherConnectionCannotReportForAnAssignment) {
  FakeWorker owner(fleet_.get());
  ASSERT_TRUE(owner.Hello("owner"));
  const std::string probe_id = SubmitH100();
  const std::optional<v1::Assignment> assignment = AssignmentOf(owner);
  ASSERT_TRUE(assignment.has_value());

  FakeWorker intruder(fleet_.get());
  ASSERT_TRUE(intruder.Hello("intruder"));
  ASSERT_TRUE(intruder.Send(Batch(*assignment, "stolen", 8, 0, 20)));
  auto answer = intruder.AnswerTo("stolen");
  ASSERT_TRUE(answer.has_value() && answer->has_rejected());
  EXPECT_EQ(answer->rejected().reason(), "not_leased");
  EXPECT_NE(answer->rejected().detail().find("owner"), std::string::npos)
      << answer->rejected().detail();
  v1::ProbeResult final_result;
  final_result.set_key("stolen-final");
  final_result.set_probe_id(assignment->probe_id());
  final_result.set_assignment_id(assignment->assignment_id());
  final_result.set_final(true);
  ASSERT_TRUE(intruder.Send(final_result));
  answer = intruder.AnswerTo("stolen-final");
  ASSERT_TRUE(answer.has_value() && answer->has_rejected());
  EXPECT_EQ(answer->rejected().reason(), "not_leased");
  // Nor may anyone report for a probe that does not exist.
  v1::ProbeResult unknown = Batch(*assignment, "unknown-probe", 8, 0, 20);
  unknown.set_probe_id("p-999");
  ASSERT_TRUE(intruder.Send(unknown));
  answer = intruder.AnswerTo("unknown-probe");
  ASSERT_TRUE(answer.has_value() && answer->has_rejected());
  EXPECT_EQ(answer->rejected().reason(), "not_leased");

  // A heartbeat naming the owner's assignment does not keep its lease: the
  // intruder is told the assignment is not running there.
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat()->set_assignment_id(assignment->assignment_id());
  ASSERT_TRUE(intruder.Send(heartbeat));
  const auto cancel =
      intruder.Next([](const v1::PlannerMessage& m) { return m.has_cancel(); });
  ASSERT_TRUE(cancel.has_value());
  EXPECT_EQ(cancel->cancel().assignment_id(), assignment->assignment_id());

  const std::optional<v1::Probe> probe = Probe(probe_id);
  ASSERT_TRUE(probe.has_value());
  EXPECT_EQ(probe->state(), v1::Probe::RUNNING);
  EXPECT_EQ(probe->worker(), "owner");
  EXPECT_EQ(probe->results_size(), 0);
  EXPECT_EQ(Rejected("not_leased"), 3);
  EXPECT_TRUE(Serving());
}

// The same batch and repetition under four keys of the worker's choosing
// is stored once; every key is acknowledged.
TEST_F(WorkerReportsTest, ThePlannerDerivesTheIdempotencyKey) {
  FakeWorker worker(fleet_.get());
  ASSERT_TRUE(worker.Hello("rekeyer"));
  const std::string probe_id = SubmitH100();
  const std::optional<v1::Assignment> assignment = AssignmentOf(worker);
  ASSERT_TRUE(assignment.has_value());
  for (const char* key : {"k1", "k2", "k3", "k4"}) {
    ASSERT_TRUE(worker.Send(Batch(*assignment, key, 16, 0, 40)));
    const auto answer = worker.AnswerTo(key);
    ASSERT_TRUE(answer.has_value() && answer->has_ack()) << key;
  }
  EXPECT_EQ(Probe(probe_id)->results_size(), 1);
  EXPECT_EQ(StoredResultKey(probe_id, assignment->assignment_id(),
                            Batch(*assignment, "", 16, 0, 40).batch()),
            probe_id + "/" + assignment->assignment_id() + "/16/0/");
}

// A hello reusing the id of a connected, live worker is refused and the
// real worker keeps its stream; once the first has been silent for two
// heartbeats, a new connection may take over.
TEST_F(WorkerReportsTest, ALiveWorkersIdIsNotTakenOver) {
  FakeWorker real(fleet_.get());
  ASSERT_TRUE(real.Hello("gpu-7"));
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat();
  ASSERT_TRUE(real.Send(heartbeat));
  {
    FakeWorker impostor(fleet_.get());
    v1::WorkerMessage hello;
    *hello.mutable_hello() = FakeWorker::H100Hello("gpu-7");
    ASSERT_TRUE(impostor.Send(hello));
    const grpc::Status status = impostor.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    EXPECT_NE(status.error_message().find("connected and alive"),
              std::string::npos)
        << status.error_message();
  }
  EXPECT_EQ(Rejected("already_connected"), 1);
  // The real worker still works: it is given a probe and reports.
  const std::string probe_id = SubmitH100();
  const std::optional<v1::Assignment> assignment = AssignmentOf(real);
  ASSERT_TRUE(assignment.has_value());
  ASSERT_TRUE(real.Send(Batch(*assignment, "still-here", 8, 0, 20)));
  const auto answer = real.AnswerTo("still-here");
  ASSERT_TRUE(answer.has_value() && answer->has_ack());

  // Silent from now: a later connection replaces it (bounded retries).
  std::unique_ptr<FakeWorker> successor;
  EXPECT_TRUE(WaitFor(
      [&] {
        successor = std::make_unique<FakeWorker>(fleet_.get());
        return successor->Hello("gpu-7");
      },
      30));
  EXPECT_EQ(real.Finish().error_code(), grpc::StatusCode::ABORTED);
  EXPECT_TRUE(Serving());
}

// A worker that keeps handing an assignment back: the third hand-back
// fails the probe, saying so, instead of queueing it again.
TEST_F(WorkerReportsTest, HandBacksAreBounded) {
  FakeWorker worker(fleet_.get());
  ASSERT_TRUE(worker.Hello("quitter"));
  const std::string probe_id = SubmitH100();
  for (int i = 1; i <= 3; ++i) {
    SCOPED_TRACE(i);
    const std::optional<v1::Assignment> assignment = AssignmentOf(worker);
    ASSERT_TRUE(assignment.has_value());
    v1::ProbeResult back;
    back.set_key(assignment->assignment_id() + "/handback");
    back.set_probe_id(probe_id);
    back.set_assignment_id(assignment->assignment_id());
    back.set_handed_back(true);
    ASSERT_TRUE(worker.Send(back));
    const auto answer = worker.AnswerTo(back.key());
    ASSERT_TRUE(answer.has_value());
    if (i < 3) {
      EXPECT_TRUE(answer->has_ack()) << answer->DebugString();
    } else {
      ASSERT_TRUE(answer->has_rejected());
      EXPECT_EQ(answer->rejected().reason(), "handback_limit");
    }
  }
  const std::optional<v1::Probe> probe = Probe(probe_id);
  ASSERT_TRUE(probe.has_value());
  EXPECT_EQ(probe->state(), v1::Probe::FAILED);
  EXPECT_EQ(probe->handbacks(), 3u);
  EXPECT_NE(probe->error().find("handed back 3 times"), std::string::npos)
      << probe->error();
  EXPECT_EQ(Rejected("handback_limit"), 1);
}

// Hellos beyond the inventory bounds end their stream with
// INVALID_ARGUMENT naming the field; no worker is registered.
TEST_F(WorkerReportsTest, OversizedHellosAreRefused) {
  struct Case {
    std::string what;
    v1::WorkerHello hello;
    std::string says;
  };
  std::vector<Case> cases;
  cases.push_back({"gpus", FakeWorker::H100Hello("big-1"), "hello.gpus has"});
  for (int i = 0; i < kMaxGpusPerWorker; ++i) {
    *cases.back().hello.add_gpus() = cases.back().hello.gpus(0);
  }
  cases.push_back(
      {"gpu name", FakeWorker::H100Hello("big-2"), "hello.gpus[0].name"});
  cases.back().hello.mutable_gpus(0)->set_name(std::string(300, 'x'));
  cases.push_back(
      {"memory", FakeWorker::H100Hello("big-3"), "hello.gpus[0].memory_bytes"});
  cases.back().hello.mutable_gpus(0)->set_memory_bytes(uint64_t{2} << 40);
  cases.push_back({"notes", FakeWorker::H100Hello("big-4"), "hello.notes[0]"});
  cases.back().hello.add_notes(std::string(5000, 'n'));
  cases.push_back({"framework versions", FakeWorker::H100Hello("big-5"),
                   "hello.framework_versions[torch]"});
  (*cases.back().hello.mutable_framework_versions())["torch"] =
      std::string(300, '2');
  cases.push_back({"host memory", FakeWorker::H100Hello("big-6"),
                   "hello.host_memory_bytes = 70000000000000 (70000 GB); "
                   "allowed up to 65536 GB"});
  cases.back().hello.set_host_memory_bytes(uint64_t{70000} * 1000000000);
  cases.push_back({"same card twice", FakeWorker::H100Hello("big-7"),
                   "hello.gpus[1].uuid = \"GPU-1\" is another GPU's too"});
  cases.back().hello.mutable_gpus(0)->set_uuid("GPU-1");
  *cases.back().hello.add_gpus() = cases.back().hello.gpus(0);
  cases.back().hello.mutable_gpus(1)->set_index(1);
  cases.push_back({"index", FakeWorker::H100Hello("big-8"),
                   "hello.gpus[0].index = 5000; allowed 0..1023"});
  cases.back().hello.mutable_gpus(0)->set_index(5000);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    FakeWorker worker(fleet_.get());
    v1::WorkerMessage hello;
    *hello.mutable_hello() = c.hello;
    ASSERT_TRUE(worker.Send(hello));
    const grpc::Status status = worker.Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find(c.says), std::string::npos)
        << status.error_message();
  }
  EXPECT_EQ(Rejected("inventory_too_large"), 8);
  EXPECT_TRUE(::headroom::testing::WorkersConnected(fleet_.get()).empty());
  EXPECT_TRUE(Serving());
}

// Issue 32: a hello declared an "L4" of 1024 GB, and the peak bound then
// took 900 GB peaks. A card must agree with the catalog entry its name
// resolves to: the hello is refused naming the GPU's index and field, and
// no worker is registered.
TEST_F(WorkerReportsTest, ACardThatIsNotItsKindIsRefused) {
  FakeWorker worker(fleet_.get());
  v1::WorkerMessage hello;
  *hello.mutable_hello() = FakeWorker::H100Hello("big-l4");
  v1::GpuDevice& gpu = *hello.mutable_hello()->mutable_gpus(0);
  gpu.set_name("L4");
  gpu.set_simulated(true);
  gpu.set_memory_bytes(1'024'000'000'000);
  ASSERT_TRUE(worker.Send(hello));
  const grpc::Status status = worker.Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              ::testing::HasSubstr("hello.gpus[0] (index 0).memory_bytes = "
                                   "1024000000000 (1024 GB) is not a L4"));
  EXPECT_EQ(Rejected("implausible_value"), 1);
  EXPECT_TRUE(::headroom::testing::WorkersConnected(fleet_.get()).empty());
  EXPECT_TRUE(Serving());
}

// Issue 32: a worker that said hello as a simulated L4 stored a
// non-simulated "H100" run by saying so in each result's gpu field. Now the
// hello's card decides: the peak is bounded by the L4's 24 GB, and the
// stored run is a simulated L4 run, which a refit leaves out.
TEST_F(WorkerReportsTest, AResultIsMeasuredOnTheCardOfItsHello) {
  const std::string db = ::testing::TempDir() + "/worker-reports-" +
                         std::to_string(getpid()) + ".db";
  RemoveSqliteFiles(db);
  Start(db);
  const int runs_before = RefitRuns();
  FakeWorker worker(fleet_.get());
  v1::WorkerMessage hello;
  *hello.mutable_hello() = FakeWorker::H100Hello("sim-l4");
  v1::GpuDevice& card = *hello.mutable_hello()->mutable_gpus(0);
  card.set_name("L4");
  card.set_simulated(true);
  card.set_memory_bytes(24'000'000'000);
  ASSERT_TRUE(worker.Send(hello));
  ASSERT_TRUE(
      worker.Next([](const v1::PlannerMessage& m) { return m.has_welcome(); })
          .has_value());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  v1::SubmitProbeRequest request;
  request.mutable_model()->set_template_("gpt2");
  request.set_gpu("L4");
  request.add_batches(8);
  request.set_executor("torch");
  v1::SubmitProbeResponse response;
  ASSERT_TRUE(fleet_->SubmitProbe(&context, request, &response).ok());
  const std::optional<v1::Assignment> assignment = AssignmentOf(worker);
  ASSERT_TRUE(assignment.has_value());

  // Claims an 80 GB, real H100.
  const auto claiming_h100 = [&](const std::string& key, double peak_gb) {
    v1::ProbeResult result = Batch(*assignment, key, 8, 0, peak_gb);
    result.mutable_gpu()->set_name("NVIDIA H100 80GB HBM3");
    result.mutable_gpu()->set_catalog_gpu("H100");
    result.mutable_gpu()->set_memory_bytes(80'000'000'000);
    result.mutable_gpu()->set_simulated(false);
    return result;
  };
  ASSERT_TRUE(worker.Send(claiming_h100("too big", 60)));
  auto answer = worker.AnswerTo("too big");
  ASSERT_TRUE(answer.has_value() && answer->has_rejected());
  EXPECT_THAT(answer->rejected().detail(),
              ::testing::HasSubstr("more than the card's 24 GB"));
  ASSERT_TRUE(worker.Send(claiming_h100("fits", 9.5)));
  answer = worker.AnswerTo("fits");
  ASSERT_TRUE(answer.has_value() && answer->has_ack())
      << (answer ? answer->DebugString() : "stream ended");

  auto store = SqliteStore::Open(db, 1);
  ASSERT_TRUE(store.ok()) << store.status();
  auto runs = (*store)->ListRuns();
  ASSERT_TRUE(runs.ok()) << runs.status();
  int found = 0;
  for (const v1::MeasuredRun& run : *runs) {
    if (run.source() != "probe " + assignment->probe_id() + " repetition 0") {
      continue;
    }
    ++found;
    EXPECT_EQ(run.gpu(), "L4");
    EXPECT_TRUE(run.simulated());
    EXPECT_EQ(run.measured_by(), v1::SIM);
    EXPECT_EQ(run.measured_peak_gb(), 9.5);
    EXPECT_EQ(run.worker(), "sim-l4");
  }
  EXPECT_EQ(found, 1);
  EXPECT_EQ(RefitRuns(), runs_before);  // simulated: not in a refit
  store->reset();
  app_->Shutdown(std::chrono::milliseconds(500));
  app_.reset();
  RemoveSqliteFiles(db);
}

// The checks themselves, without a planner.
TEST(CheckHelloCardsTest, ACardAgreesWithItsCatalogEntry) {
  const auto hello_of = [](const std::string& name, uint64_t bytes) {
    v1::WorkerHello hello;
    hello.set_worker_id("w");
    v1::GpuDevice& gpu = *hello.add_gpus();
    gpu.set_index(3);
    gpu.set_name(name);
    gpu.set_memory_bytes(bytes);
    return hello;
  };
  // A real L4 reports 23.0 GB; 24 GiB is 25.8 GB; 0 is not known; a card
  // the catalog does not know has no entry to agree with.
  for (const auto& [name, bytes] :
       std::vector<std::pair<std::string, uint64_t>>{
           {"NVIDIA L4", 23'034'466'304},
           {"L4", uint64_t{24} << 30},
           {"NVIDIA L4", 0},
           {"NVIDIA H100 NVL", 93'600'000'000},
           {"Voodoo5 6000", 500'000'000'000}}) {
    EXPECT_TRUE(CheckHelloCards(hello_of(name, bytes)).ok()) << name;
  }
  for (const auto& [name, bytes, says] :
       std::vector<std::tuple<std::string, uint64_t, std::string>>{
           {"L4", 1'024'000'000'000,
            "hello.gpus[0] (index 3).memory_bytes = 1024000000000 (1024 GB) "
            "is not a L4 (\"L4\"): the catalog's has 24 GB; allowed within "
            "10 % of it, or 0 (not known)"},
           {"NVIDIA H100 80GB HBM3", 94'000'000'000, "is not a H100"},
           {"NVIDIA L4", 21'000'000'000, "(21 GB) is not a L4"}}) {
    const absl::Status status = CheckHelloCards(hello_of(name, bytes));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(status.message(), ::testing::HasSubstr(says));
  }
  // CheckHello refuses such a hello as an implausible value.
  const std::optional<Rejection> refused =
      CheckHello(hello_of("L4", 1'024'000'000'000), "");
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason, WorkerRejection::kImplausibleValue);
}

TEST(CheckHelloTest, AWorkerCredentialSaysHelloAsItsWorkerOnly) {
  v1::WorkerHello hello;
  hello.set_worker_id("w1");
  EXPECT_FALSE(CheckHello(hello, "").has_value());  // open planner
  EXPECT_FALSE(CheckHello(hello, "cert:w1").has_value());
  EXPECT_FALSE(CheckHello(hello, "token:w1").has_value());
  for (const char* other : {"cert:w2", "token:w2", "token:w1x"}) {
    const std::optional<Rejection> refused = CheckHello(hello, other);
    ASSERT_TRUE(refused.has_value()) << other;
    EXPECT_EQ(refused->reason, WorkerRejection::kIdentityMismatch);
    EXPECT_THAT(refused->detail,
                ::testing::HasSubstr(std::string("hello.worker_id 'w1' is not "
                                                 "the worker '") +
                                     other + "'"));
  }
}

// The card a result counts as measured on is the one the dispatcher gave
// the probe, from the hello: never the result's own claim.
TEST(MeasuringDeviceTest, TheCardTheDispatcherAssigned) {
  v1::WorkerHello hello;
  for (const auto& [index, name] :
       std::vector<std::pair<uint32_t, std::string>>{
           {0, "NVIDIA H100 80GB HBM3"}, {1, "NVIDIA L4"}, {2, "NVIDIA L4"}}) {
    v1::GpuDevice& gpu = *hello.add_gpus();
    gpu.set_index(index);
    gpu.set_name(name);
  }
  v1::Probe probe;
  probe.set_gpu("L4");
  const v1::GpuDevice* device = MeasuringDevice(probe, hello);
  ASSERT_NE(device, nullptr);
  EXPECT_EQ(device->index(), 1u);
  EXPECT_EQ(CardMemoryGb(probe, device), 24);  // the catalog's: none reported
  probe.set_gpu("H100");
  ASSERT_NE(MeasuringDevice(probe, hello), nullptr);
  EXPECT_EQ(MeasuringDevice(probe, hello)->index(), 0u);
  // Pinned (no GPU kind): the worker's most numerous kind.
  probe.clear_gpu();
  probe.mutable_request()->set_worker("w");
  ASSERT_NE(MeasuringDevice(probe, hello), nullptr);
  EXPECT_EQ(MeasuringDevice(probe, hello)->index(), 1u);
  // A kind the worker lacks: none.
  probe.set_gpu("A100-80GB");
  EXPECT_EQ(MeasuringDevice(probe, hello), nullptr);
  EXPECT_EQ(CardMemoryGb(probe, nullptr), 80);
}

TEST(CheckBatchResultTest, AcceptsTheRequestsRunsWithinTheCard) {
  v1::Probe probe;
  probe.set_id("p-1");
  probe.mutable_request()->add_batches(8);
  probe.mutable_request()->set_repetitions(2);
  v1::BatchResult batch;
  batch.set_batch(8);
  batch.set_repetition(1);
  batch.set_peak_allocated_gb(84);  // 80 GB x 1.05
  batch.set_energy_j(12);
  EXPECT_FALSE(CheckBatchResult(probe, batch, 80).has_value());
  batch.set_peak_allocated_gb(84.1);
  ASSERT_TRUE(CheckBatchResult(probe, batch, 80).has_value());
  EXPECT_EQ(CheckBatchResult(probe, batch, 80)->reason,
            WorkerRejection::kImplausibleValue);
  batch.set_peak_allocated_gb(10);
  batch.set_energy_j(-1);
  EXPECT_NE(CheckBatchResult(probe, batch, 80)->detail.find("energy_j"),
            std::string::npos);
  batch.set_energy_j(1);
  // Per-rank figures: at most one per GPU of a node; a host peak in range.
  for (int i = 0; i <= kMaxGpusPerWorker; ++i) batch.add_rank_peaks_gb(1);
  EXPECT_THAT(CheckBatchResult(probe, batch, 80)->detail,
              ::testing::HasSubstr("rank_peaks_gb has 65 entries"));
  batch.clear_rank_peaks_gb();
  batch.set_host_peak_gb(std::nan(""));
  EXPECT_THAT(CheckBatchResult(probe, batch, 80)->detail,
              ::testing::HasSubstr("host_peak_gb = nan"));
  batch.set_host_peak_gb(120);
  EXPECT_FALSE(CheckBatchResult(probe, batch, 80).has_value());
  batch.set_mode("compiled");
  EXPECT_EQ(CheckBatchResult(probe, batch, 80)->reason,
            WorkerRejection::kUnknownBatch);
}

}  // namespace
}  // namespace headroom
