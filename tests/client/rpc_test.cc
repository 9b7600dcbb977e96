#include "client/rpc.h"

#include <chrono>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "tests/support/test_planner.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

TEST(SetDeadlineTest, IsTheFactorTimesDeadlineMsFromNow) {
  Options options;
  options.deadline_ms = 3000;
  const auto before = std::chrono::system_clock::now();
  grpc::ClientContext once, ten;
  SetDeadline(once, options);
  SetDeadline(ten, options, /*deadline_factor=*/10);
  const auto after = std::chrono::system_clock::now();
  EXPECT_GE(once.deadline(), before + std::chrono::milliseconds(3000));
  EXPECT_LE(once.deadline(), after + std::chrono::milliseconds(3000));
  EXPECT_GE(ten.deadline(), before + std::chrono::milliseconds(30000));
  EXPECT_LE(ten.deadline(), after + std::chrono::milliseconds(30000));
}

TEST(CallTest, AnUnreachablePlannerIsExitThreeNamingTheAddress) {
  Options options;
  options.server = "127.0.0.1:1";
  options.deadline_ms = 2000;
  v1::GetCalibrationRequest request;
  v1::GetCalibrationResponse response;
  std::ostringstream err;
  EXPECT_EQ(Call(options, &v1::Calibration::Stub::GetCalibration, request,
                 &response, err),
            kExitUnreachable);
  EXPECT_THAT(err.str(), HasSubstr("cannot reach the planner at 127.0.0.1:1"));
  EXPECT_FALSE(CallPlanner(options, &v1::Calibration::Stub::GetCalibration,
                           request, &response)
                   .ok());
}

// An answer is exit 0 and fills the response; a request the planner calls
// INVALID_ARGUMENT is bad usage (2) with the planner's message.
TEST(CallTest, AnswersAndRefusalsMapToTheirExitCodes) {
  PlannerConfig config = headroom::testing::TestPlannerConfig();
  config.http_listen = "";
  auto app = PlannerApp::Start(config);
  ASSERT_TRUE(app.ok()) << app.status();
  Options options;
  options.server = absl::StrCat("127.0.0.1:", (*app)->grpc_port());
  std::ostringstream err;
  v1::GetCalibrationResponse calibration;
  ASSERT_EQ(Call(options, &v1::Calibration::Stub::GetCalibration,
                 v1::GetCalibrationRequest(), &calibration, err),
            kExitAnswer)
      << err.str();
  EXPECT_FALSE(calibration.factor_set().version().empty());
  EXPECT_EQ(err.str(), "");

  v1::PromoteFactorSetRequest promote;
  promote.set_version("fs-1");
  promote.set_rollback(true);
  v1::PromoteFactorSetResponse promoted;
  EXPECT_EQ(Call(options, &v1::Calibration::Stub::PromoteFactorSet, promote,
                 &promoted, err),
            kExitUsage);
  EXPECT_THAT(err.str(), HasSubstr("set exactly one of version"));
}

}  // namespace
}  // namespace headroom::cli
