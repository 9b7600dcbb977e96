// Nothing stored can break a listing: a real planner (PlannerApp on
// 127.0.0.1 port 0) over a store holding many large entries answers every
// List page, and RankDensity over the stored runs, under the 4 MiB message
// limit, and following the pages yields every entry once.

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "server/store/sqlite_store.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/sqlite_files.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

constexpr size_t kMessageLimit = 4 << 20;
constexpr int kProbes = 12;
constexpr int kWorkers = 10;
constexpr int kDensityRuns = 30;

v1::DensityRawRun DensityRun(int i, size_t id_bytes) {
  v1::DensityRawRun run;
  run.set_id(absl::StrCat(std::string(id_bytes, 'r'), "|", i));
  run.set_mode("Tween");
  run.set_dtype("f32");
  run.set_arch("mlp");
  run.set_score(1 + i);
  run.set_soft_acc(1);
  run.set_avg_accuracy(50 + i % 10);
  run.set_throughput(100 + i);
  run.set_availability(50);
  run.set_ram_kib(1 + i);
  return run;
}

class ListBoundsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    db_path_ =
        new std::string((std::filesystem::temp_directory_path() /
                         absl::StrCat("headroom-list-bounds-", getpid(), ".db"))
                            .string());
    std::filesystem::remove(*db_path_);
    {
      // What the attacks of issue 19 left behind, and more of it: probes
      // with 1 to 3 MB configs, workers with 1 MB notes, density runs with
      // 1 MB ids.
      auto store = SqliteStore::Open(*db_path_);
      ASSERT_TRUE(store.ok()) << store.status();
      for (int i = 0; i < kProbes; ++i) {
        v1::Probe probe;
        probe.set_gpu("L4");
        probe.mutable_request()->add_batches(8);
        probe.mutable_request()->mutable_model()->set_hf_config(
            std::string(i == 0 ? 3 << 20 : (i % 3 + 1) * 300000, ' '));
        ASSERT_TRUE((*store)->AddProbe(probe).ok());
      }
      for (int i = 0; i < kWorkers; ++i) {
        v1::WorkerStatus worker;
        worker.mutable_hello()->set_worker_id(absl::StrCat("w-", i));
        worker.mutable_hello()->add_notes(std::string(1 << 20, 'n'));
        ASSERT_TRUE((*store)->PutWorker(worker).ok());
      }
      std::vector<v1::DensityRawRun> runs;
      for (int i = 0; i < kDensityRuns; ++i) {
        runs.push_back(DensityRun(i, i < 5 ? 1 << 20 : 100000));
      }
      ASSERT_TRUE((*store)->AddDensityRuns(runs).ok());
    }
    PlannerConfig config = ::headroom::testing::TestPlannerConfig();
    config.http_listen = "";
    config.db_path = *db_path_;
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = app->release();
  }
  static void TearDownTestSuite() {
    delete app_;
    app_ = nullptr;
    RemoveSqliteFiles(*db_path_);
    delete db_path_;
  }

  void SetUp() override {
    ASSERT_NE(app_, nullptr);
    // The client's default receive limit is the server's 4 MiB: a larger
    // response fails here.
    auto channel =
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", app_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    planner_ = std::make_unique<testing::PlannerStubs>(channel);
    fleet_ = v1::Fleet::NewStub(channel);
  }

  static void Deadline(grpc::ClientContext* context) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
  }

  static PlannerApp* app_;
  static std::string* db_path_;
  std::unique_ptr<testing::PlannerStubs> planner_;
  std::unique_ptr<v1::Fleet::Stub> fleet_;
};

PlannerApp* ListBoundsTest::app_ = nullptr;
std::string* ListBoundsTest::db_path_ = nullptr;

TEST_F(ListBoundsTest, EveryProbePageAnswersAndThePagesHoldEveryProbe) {
  v1::ListProbesRequest request;
  std::set<std::string> seen;
  int pages = 0;
  for (; pages < 100; ++pages) {
    grpc::ClientContext context;
    Deadline(&context);
    v1::ListProbesResponse page;
    const grpc::Status status = fleet_->ListProbes(&context, request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LT(page.ByteSizeLong(), kMessageLimit / 2);
    EXPECT_GE(page.probes_size(), 1);
    for (const v1::Probe& probe : page.probes()) {
      EXPECT_TRUE(seen.insert(probe.id()).second) << probe.id();
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(kProbes));
  // Pages stop at their byte budget, well before 100 entries.
  EXPECT_GT(pages, 3);
}

TEST_F(ListBoundsTest, EveryWorkerPageAnswers) {
  v1::ListWorkersRequest request;
  request.set_page_size(500);
  std::vector<std::string> ids;
  for (int pages = 0; pages < 100; ++pages) {
    grpc::ClientContext context;
    Deadline(&context);
    v1::ListWorkersResponse page;
    const grpc::Status status = fleet_->ListWorkers(&context, request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LT(page.ByteSizeLong(), kMessageLimit / 2);
    for (const v1::WorkerStatus& w : page.workers()) {
      ids.push_back(w.hello().worker_id());
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  ASSERT_EQ(ids.size(), static_cast<size_t>(kWorkers));
  EXPECT_EQ(ids.front(), "w-0");
  EXPECT_EQ(ids.back(), "w-9");
}

TEST_F(ListBoundsTest, RankingTheStoredRunsAnswersUnderTheLimit) {
  v1::RankDensityRequest request;
  request.set_use_stored(true);
  grpc::ClientContext context;
  Deadline(&context);
  v1::RankDensityResponse response;
  const grpc::Status status =
      planner_->density->RankDensity(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.leaderboard().n(), kDensityRuns);
  EXPECT_LT(response.ByteSizeLong(), kMessageLimit / 2);
  // Stored before the length limits: cut, and said so.
  EXPECT_THAT(response.truncated(), HasSubstr("are cut"));
  EXPECT_FALSE(response.leaderboard().formula().empty());
}

TEST_F(ListBoundsTest, PageSizeAndTokenAreChecked) {
  const auto list = [&](int32_t size, const std::string& token) {
    v1::ListFactorSetsRequest request;
    request.set_page_size(size);
    request.set_page_token(token);
    grpc::ClientContext context;
    Deadline(&context);
    v1::ListFactorSetsResponse response;
    return planner_->calibration->ListFactorSets(&context, request, &response);
  };
  for (int32_t size : {501, -1}) {
    const grpc::Status status = list(size, "");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("page_size"));
    EXPECT_THAT(status.error_message(), HasSubstr("1..500"));
  }
  EXPECT_TRUE(list(500, "").ok());
  for (const char* token : {"%%%", "d29ya2Vyczp3LTE="}) {  // workers:w-1
    const grpc::Status status = list(0, token);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("page_token"));
  }
}

}  // namespace
}  // namespace headroom
