// The import pool's bounds against a real planner (PlannerApp on 127.0.0.1
// port 0): more concurrent large inline specs than the pool holds, by count
// or by bytes, get RESOURCE_EXHAUSTED saying why, the rest are answered,
// and the planner keeps serving. The pool is held by a test hook until the
// refusals have arrived, so no outcome depends on timing.

#include "server/service/planner_state.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "server/store/open_store.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// An inline spec of about `layers` x 30 bytes: over the 4 KiB an inline
// spec may have and still be answered on the calling thread.
v1::CheckFitRequest LargeSpecRequest(int layers) {
  v1::CheckFitRequest request;
  v1::ModelSpec* spec = request.mutable_model()->mutable_spec();
  spec->set_name("large");
  spec->set_positions(128);
  for (int i = 0; i < layers; ++i) {
    v1::Layer* layer = spec->add_layers();
    layer->set_name(absl::StrCat("block-", i, ".fc"));
    layer->mutable_linear()->set_in_features(256);
    layer->mutable_linear()->set_out_features(256);
  }
  request.add_batches(1);
  request.add_targets()->set_gpu("H100");
  return request;
}

struct Outcome {
  int ok = 0;
  int exhausted = 0;
  int other = 0;
  std::vector<std::string> refusals;
};

class ImportPoolBoundsTest : public ::testing::Test {
 protected:
  // Starts a planner whose import pool runs `threads` imports, holds
  // `queue` waiting and `queue_bytes` of requests; every import waits for
  // release_ first.
  void Start(int threads, int queue, size_t queue_bytes) {
    PlannerConfig config = ::headroom::testing::TestPlannerConfig();
    config.http_listen = "";
    config.import_threads = threads;
    config.import_queue = queue;
    config.import_queue_bytes = queue_bytes;
    config.before_import = [this] {
      release_.WaitForNotificationWithTimeout(absl::Seconds(60));
    };
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = std::move(*app);
    stub_ = v1::Fit::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }

  void TearDown() override {
    if (!release_.HasBeenNotified()) release_.Notify();
    app_.reset();
  }

  // Sends `calls` copies of `request` at once; once `refusals` of them are
  // refused lets the pool run, then waits for every answer (each bounded
  // by its deadline).
  Outcome Burst(const v1::CheckFitRequest& request, int calls, int refusals) {
    std::mutex mu;
    std::condition_variable cv;
    Outcome out;
    int done = 0;
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::unique_ptr<v1::CheckFitResponse>> responses;
    for (int i = 0; i < calls; ++i) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                    std::chrono::seconds(120));
      responses.push_back(std::make_unique<v1::CheckFitResponse>());
      stub_->async()->CheckFit(
          contexts.back().get(), &request, responses.back().get(),
          [&](grpc::Status status) {
            std::lock_guard<std::mutex> lock(mu);
            if (status.ok()) {
              ++out.ok;
            } else if (status.error_code() ==
                       grpc::StatusCode::RESOURCE_EXHAUSTED) {
              ++out.exhausted;
              out.refusals.push_back(status.error_message());
            } else {
              ++out.other;
              ADD_FAILURE()
                  << status.error_code() << " " << status.error_message();
            }
            ++done;
            cv.notify_all();
          });
    }
    std::unique_lock<std::mutex> lock(mu);
    // The held pool refuses at least `refusals` (bounded: each call's
    // deadline ends it).
    cv.wait_for(lock, std::chrono::seconds(120),
                [&] { return out.exhausted >= refusals || done == calls; });
    release_.Notify();
    cv.wait_for(lock, std::chrono::seconds(120), [&] { return done == calls; });
    EXPECT_EQ(done, calls);
    return out;
  }

  void ExpectServing() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    request.add_targets()->set_gpu("L4");
    v1::CheckFitResponse response;
    EXPECT_TRUE(stub_->CheckFit(&context, request, &response).ok());
  }

  absl::Notification release_;
  std::unique_ptr<PlannerApp> app_;
  std::unique_ptr<v1::Fit::Stub> stub_;
};

TEST_F(ImportPoolBoundsTest, MoreLargeSpecsThanTheQueueHoldsAreRefused) {
  Start(/*threads=*/1, /*queue=*/2, /*queue_bytes=*/size_t{64} << 20);
  const v1::CheckFitRequest request = LargeSpecRequest(2000);
  ASSERT_GT(request.ByteSizeLong(), 4096u);
  // One runs (held), two wait: at least 12 - 3 are refused.
  const Outcome out = Burst(request, 12, 9);
  EXPECT_GE(out.exhausted, 9);
  EXPECT_EQ(out.ok + out.exhausted, 12);
  EXPECT_GE(out.ok, 2);
  ASSERT_FALSE(out.refusals.empty());
  EXPECT_THAT(out.refusals[0],
              HasSubstr("the model import queue is full (2 imports wait, "
                        "--import_queue)"));
  ExpectServing();
}

TEST_F(ImportPoolBoundsTest, LargeSpecsPastTheQueueBytesAreRefused) {
  const v1::CheckFitRequest request = LargeSpecRequest(2000);
  const size_t bytes = request.ByteSizeLong();
  // Room for two such requests, although 64 may wait by count.
  Start(/*threads=*/1, /*queue=*/64, /*queue_bytes=*/2 * bytes + bytes / 2);
  const Outcome out = Burst(request, 12, 10);
  EXPECT_GE(out.exhausted, 10);
  EXPECT_EQ(out.ok + out.exhausted, 12);
  ASSERT_FALSE(out.refusals.empty());
  EXPECT_THAT(out.refusals[0],
              HasSubstr(absl::StrCat("the model import queue is full: 2 "
                                     "imports hold ",
                                     2 * bytes, " bytes of requests")));
  ExpectServing();
}

// Issue 35 item 3: a run stored in the store (as the fleet stores a
// probe's result, or another replica) reaches answers by an update of its
// key's group, not a rebuild of the evidence.
TEST(EvidenceByTheRunTest, AStoredRunReachesAnswersWithoutARebuild) {
  const std::string db =
      absl::StrCat(::testing::TempDir(), "/evidence-run-", getpid(), ".db");
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((db + suffix).c_str());
  }
  PlannerConfig config = ::headroom::testing::TestPlannerConfig();
  config.http_listen = "";
  config.db_path = db;
  config.store_poll_ms = 60000;  // no sync: only the update under test
  auto app = PlannerApp::Start(config);
  ASSERT_TRUE(app.ok()) << app.status();
  auto stub = v1::Fit::NewStub(
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*app)->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  // bf16 bert-base was never measured: the prior answers.
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.mutable_setup()->set_precision(v1::TrainingSetup::BF16_MIXED);
  request.add_batches(32);
  request.add_targets()->set_gpu("L4");
  const auto basis = [&] {
    grpc::ClientContext context;
    v1::CheckFitResponse response;
    const grpc::Status status = stub->CheckFit(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.estimates_size() > 0 ? response.estimates(0).basis()
                                         : v1::Basis();
  };
  EXPECT_EQ(basis().kind(), v1::Basis::PRIOR);
  PlannerState* state = (*app)->state();
  const int64_t rebuilds = state->evidence_rebuilds();

  auto store = OpenStore(db, 1);
  ASSERT_TRUE(store.ok()) << store.status();
  std::vector<v1::MeasuredRun> runs(2);
  for (size_t i = 0; i < runs.size(); ++i) {
    runs[i].set_template_("bert-base");
    *runs[i].mutable_setup() = request.setup();
    runs[i].set_gpu("L4");
    runs[i].set_batch(16 * (i + 1));
    runs[i].set_measured_peak_gb(3.5 + 1.5 * static_cast<double>(i));
    runs[i].set_measured_by(v1::TORCH_HARNESS);
    runs[i].set_source(absl::StrCat("test run ", i));
  }
  ASSERT_TRUE((*store)->AddRuns(runs).ok());
  state->EvidenceStale();
  state->WaitForEvidence();
  const v1::Basis anchored = basis();
  EXPECT_EQ(anchored.kind(), v1::Basis::ANCHORED);
  EXPECT_EQ(anchored.runs(), 2);
  EXPECT_EQ(anchored.max_batch(), 32u);
  // One card, two batches: no cell for the GPU constants, so no rebuild.
  EXPECT_EQ(state->evidence_rebuilds(), rebuilds);

  // Another run of the key joins the same group.
  v1::MeasuredRun third = runs[1];
  third.set_batch(48);
  third.set_measured_peak_gb(6.6);
  third.set_source("test run 2");
  ASSERT_TRUE((*store)->AddRuns({third}).ok());
  state->EvidenceStale();
  state->WaitForEvidence();
  EXPECT_EQ(basis().runs(), 3);
  EXPECT_EQ(basis().max_batch(), 48u);
  EXPECT_EQ(state->evidence_rebuilds(), rebuilds);
  app->reset();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::remove((db + suffix).c_str());
  }
}

}  // namespace
}  // namespace headroom
