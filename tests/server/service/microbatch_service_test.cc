// A worker-measured autotune record is replaced only by an admin (issue 32,
// item 7): an operator can neither force a put over it nor drop it and put
// another; an admin may drop it; a record put by hand any operator drops.

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/store/open_store.h"
#include "tests/support/sqlite_files.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// SHA-256 of "operator-secret" and "admin".
constexpr char kTokens[] =
    "ops operator "
    "ec585b7be286a5088d8687af4ce027f389cd098e2bb0dee876d5521fa4468f59\n"
    "root admin "
    "8c6976e5b5410415bde908bd4dee15dfb167a9c873fc4bb8a81f6f2ab448a918\n";

class AutotuneDropTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string base =
        ::testing::TempDir() + "/autotune-drop-" + std::to_string(getpid());
    db_ = base + ".db";
    tokens_ = base + ".tokens";
    RemoveSqliteFiles(db_);
    std::ofstream(tokens_) << kTokens;
    // The store as the fleet leaves it after an autotune probe: one record
    // a worker measured, and one put by hand.
    {
      auto store = OpenStore(db_);
      ASSERT_TRUE(store.ok()) << store.status();
      v1::AutotuneRecord measured;
      measured.set_measured_by_probe("p-12");
      ASSERT_TRUE(
          (*store)->PutAutotuneRecord("measured01", "m", measured).ok());
      ASSERT_TRUE(
          (*store)
              ->PutAutotuneRecord("byhand0001", "h", v1::AutotuneRecord())
              .ok());
    }
    PlannerConfig config = testing::TestPlannerConfig();
    config.http_listen = "";
    config.db_path = db_;
    config.tokens_file = tokens_;
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = *std::move(app);
    stub_ = v1::Microbatch::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    app_.reset();
    RemoveSqliteFiles(db_);
    std::filesystem::remove(tokens_);
  }

  grpc::Status Drop(const std::string& token, const std::string& id) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    context.set_wait_for_ready(true);
    context.AddMetadata("authorization", "Bearer " + token);
    v1::DropAutotuneRecordRequest request;
    request.set_id(id);
    v1::DropAutotuneRecordResponse response;
    return stub_->DropAutotuneRecord(&context, request, &response);
  }

  std::string db_;
  std::string tokens_;
  std::unique_ptr<PlannerApp> app_;
  std::unique_ptr<v1::Microbatch::Stub> stub_;
};

TEST_F(AutotuneDropTest, OnlyAnAdminDropsAWorkerMeasuredRecord) {
  const grpc::Status refused = Drop("operator-secret", "measured01");
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("was measured by probe p-12 on a worker; only an "
                        "admin may drop it"));
  // Still there: the admin's drop finds it.
  EXPECT_TRUE(Drop("admin", "measured01").ok());
  EXPECT_EQ(Drop("admin", "measured01").error_code(),
            grpc::StatusCode::NOT_FOUND);
  // A record put by hand is an operator's to drop.
  EXPECT_TRUE(Drop("operator-secret", "byhand0001").ok());
}

}  // namespace
}  // namespace headroom
