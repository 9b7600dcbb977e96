// Reads do not spend GPU time (issue 32, item 3): a planner with tokens on
// loopback, its learning probes going to a fake learner. A reader's learn
// queues nothing and the answer says why; an operator's learn queues one
// and the audit log names who asked; with --auto_probe every read may queue
// one, within a per-caller and an overall limit.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/learner.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/support/test_planner.h"
#include "tests/support/tiny_lm.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// SHA-256 of "reader-secret" and "operator-secret".
constexpr char kTokens[] =
    "r reader "
    "f03319dee240faa729e0cfa7ab5ffd80a1d64a127e3643f239009abff6382914\n"
    "ops operator "
    "ec585b7be286a5088d8687af4ce027f389cd098e2bb0dee876d5521fa4468f59\n";

// Queues every probe it is asked for and counts them.
class FakeLearner : public Learner {
 public:
  absl::StatusOr<Worker> WorkerFor(bool /*include_simulated*/) override {
    return Worker{"w-fake", "L4", 24, "sim", true};
  }
  absl::StatusOr<std::optional<std::string>> Outstanding(
      const std::string& /*key_id*/) override {
    return std::nullopt;
  }
  absl::StatusOr<std::string> QueueLearning(
      const v1::CheckFitRequest& /*request*/,
      const std::vector<uint32_t>& /*batches*/, const Worker& /*worker*/,
      const std::string& /*key_id*/) override {
    return "p-fake-" + std::to_string(++queued);
  }
  std::atomic<int> queued{0};
};

// TinyLm, BORDERLINE on 16 GB at batch 256 by the prior.
v1::CheckFitRequest PriorOnlyRequest() {
  v1::CheckFitRequest request;
  *request.mutable_model()->mutable_spec() = ::headroom::testing::TinyLm();
  request.add_batches(64);
  request.add_batches(256);
  request.add_targets()->set_memory_gb(16);
  request.set_learn(true);
  return request;
}

class FitLearnTest : public ::testing::Test {
 protected:
  void Start(bool auto_probe) {
    tokens_ =
        ::testing::TempDir() + "/fit-learn-tokens-" + std::to_string(getpid());
    std::ofstream(tokens_) << kTokens;
    PlannerConfig config = testing::TestPlannerConfig();
    config.http_listen = "";
    config.tokens_file = tokens_;
    config.learner = &learner_;
    config.auto_probe = auto_probe;
    config.auto_probe_per_caller = 2;
    config.auto_probe_total = 3;
    // A clock that stands still: every call falls in one window.
    config.learn_clock_ms = [] { return int64_t{1000}; };
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = *std::move(app);
    stub_ = v1::Fit::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    app_.reset();
    std::filesystem::remove(tokens_);
  }

  // CheckFit with `token` ("" sends none); the answer's learning line.
  std::string Learning(const std::string& token) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    context.set_wait_for_ready(true);
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::CheckFitResponse response;
    const grpc::Status status =
        stub_->CheckFit(&context, PriorOnlyRequest(), &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.learning();
  }

  FakeLearner learner_;
  std::string tokens_;
  std::unique_ptr<PlannerApp> app_;
  std::unique_ptr<v1::Fit::Stub> stub_;
};

TEST_F(FitLearnTest, AReadersLearnQueuesNothingAndSaysWhy) {
  Start(/*auto_probe=*/false);
  EXPECT_EQ(Learning("reader-secret"),
            "no probe queued: learning needs an operator token (this caller "
            "is reader), or a planner with --auto_probe=on");
  // Reads are open on this planner: an anonymous read is answered, and
  // queues nothing either.
  EXPECT_THAT(Learning(""), HasSubstr("(this caller is anonymous)"));
  EXPECT_EQ(learner_.queued, 0);
}

TEST_F(FitLearnTest, AnOperatorsLearnQueuesAProbeAndIsAudited) {
  Start(/*auto_probe=*/false);
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  const std::string learning = Learning("operator-secret");
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::find(sinks.begin(), sinks.end(), sink));
  EXPECT_THAT(learning, StartsWith("probe p-fake-1 queued on worker w-fake"));
  EXPECT_EQ(learner_.queued, 1);
  const std::string text = log.str();
  EXPECT_THAT(text, HasSubstr("event=audit method=/headroom.v1.Fit/CheckFit "
                              "action=learn identity=token:ops peer=ipv4:"
                              "127.0.0.1:"));
  EXPECT_THAT(text, HasSubstr("outcome=queued probe=p-fake-1 key="));
  EXPECT_THAT(text, HasSubstr("worker=w-fake auto_probe=false"));
}

TEST_F(FitLearnTest, AutoProbeIsRateLimitedPerCallerAndInAll) {
  Start(/*auto_probe=*/true);
  // A reader's reads queue two, then its allowance is spent.
  EXPECT_THAT(Learning("reader-secret"), StartsWith("probe p-fake-1 queued"));
  EXPECT_THAT(Learning("reader-secret"), StartsWith("probe p-fake-2 queued"));
  EXPECT_EQ(Learning("reader-secret"),
            "no probe queued: rate limited: token:r queued 2 of 2 learning "
            "probes allowed per 60 s (--auto_probe_per_caller)");
  // Another caller has its own allowance, until the planner's is spent.
  EXPECT_THAT(Learning(""), StartsWith("probe p-fake-3 queued"));
  EXPECT_EQ(Learning(""),
            "no probe queued: rate limited: the planner queued 3 of 3 "
            "learning probes allowed per 60 s (--auto_probe_total)");
  EXPECT_EQ(learner_.queued, 3);
  // An operator's own learn is not a read: not counted, not limited.
  EXPECT_THAT(Learning("operator-secret"), StartsWith("probe p-fake-4 queued"));
}

// Answers are kept per request (server/service/answer_cache.h) and sent
// as kept: every call gets the bytes a planner computing afresh sends, with
// the device figures and phases, and a learning line never leaks into
// another caller's answer.
class KeptAnswerTest : public ::testing::Test {
 protected:
  static std::unique_ptr<PlannerApp> StartPlanner() {
    PlannerConfig config = testing::TestPlannerConfig();
    config.http_listen = "";
    auto app = PlannerApp::Start(config);
    EXPECT_TRUE(app.ok()) << app.status();
    return app.ok() ? *std::move(app) : nullptr;
  }
  static v1::CheckFitResponse Ask(const PlannerApp& app,
                                  const v1::CheckFitRequest& request) {
    auto stub = v1::Fit::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app.grpc_port()),
                            grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::CheckFitResponse response;
    const grpc::Status status = stub->CheckFit(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
};

TEST_F(KeptAnswerTest, EveryCallGetsTheAnswerAFreshPlannerComputes) {
  std::unique_ptr<PlannerApp> warm = StartPlanner();
  ASSERT_NE(warm, nullptr);
  v1::CheckFitRequest catalog;
  catalog.mutable_model()->set_template_("bert-base");
  catalog.add_batches(8);
  catalog.add_batches(64);
  catalog.add_targets()->set_gpu("L4");
  catalog.add_targets()->set_gpu("H100");
  const v1::CheckFitRequest inline_spec = PriorOnlyRequest();
  for (v1::CheckFitRequest request : {catalog, inline_spec}) {
    request.set_learn(false);
    const v1::CheckFitResponse first = Ask(*warm, request);
    const v1::CheckFitResponse kept = Ask(*warm, request);
    // The device figures and phases are in the answer: 2 batches on the
    // first target, each with its load and step phases.
    ASSERT_GE(first.targets_size(), 1);
    ASSERT_EQ(first.targets(0).batches_size(), 2);
    EXPECT_EQ(first.targets(0).batches(0).phases_size(), 2);
    EXPECT_GT(first.targets(0).batches(0).figures().device_gb(), 0);
    EXPECT_EQ(kept.SerializeAsString(), first.SerializeAsString());
    // A learn asked by one caller: its answer carries a learning line ...
    v1::CheckFitRequest learn = request;
    learn.set_learn(true);
    EXPECT_FALSE(Ask(*warm, learn).learning().empty());
    // ... that the kept answer of the plain request does not.
    EXPECT_EQ(Ask(*warm, request).SerializeAsString(),
              first.SerializeAsString());
    // And a planner that has kept nothing computes the same bytes.
    std::unique_ptr<PlannerApp> fresh = StartPlanner();
    ASSERT_NE(fresh, nullptr);
    EXPECT_EQ(Ask(*fresh, request).SerializeAsString(),
              first.SerializeAsString());
  }
}

}  // namespace
}  // namespace headroom
