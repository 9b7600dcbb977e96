#include "client/commands.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "client/rpc.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/planner.pb.h"
#include "io/files.h"
#include "server/service/planner_app.h"
#include "server/store/sqlite_store.h"
#include "tests/core/frontends/onnx_test_graphs.h"
#include "tests/support/test_planner.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

// `headroom calib page --runs memory-runs.jsonl --json` prints the five
// columns in the field names of memory-reference.json; the reference and
// accelerate columns equal the file's.
TEST(CalibPageCommandTest, JsonPageMatchesReferenceFile) {
  Options options;
  options.json = true;
  options.runs = kRoot + "/data/memory-runs.jsonl";
  options.models_dir = kRoot + "/models";
  std::ostringstream out, err;
  ASSERT_EQ(CalibPage(options, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("\"summary\""));
  EXPECT_THAT(out.str(), HasSubstr("\"medianAbsErr\""));
  EXPECT_THAT(out.str(), HasSubstr("\"saidFitsButOom\""));
  v1::CalibrationPage page;
  ASSERT_TRUE(ParseJson(out.str(), "stdout", false, &page).ok());
  v1::ReferencePlanner reference;
  ASSERT_TRUE(ParseJson(*ReadFile(kRoot + "/data/memory-reference.json"),
                        "reference", true, &reference)
                  .ok());
  for (const char* column : {"ours", "accelerate_fp32", "accelerate_bf16",
                             "reference_shipped", "reference_heldout"}) {
    ASSERT_EQ(page.summary().count(column), 1u) << column;
  }
  for (const auto& [column, expected] : reference.summary()) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        expected, page.summary().at(column)))
        << column;
  }
  // Ours is over the same 91 runs of at least 1 GB and the same 4 cards.
  const v1::ColumnSummary& ours = page.summary().at("ours");
  EXPECT_EQ(ours.runs(), 91);
  EXPECT_EQ(ours.said_fits_but_oom() + ours.said_no_but_fits() + ours.agree(),
            3 + 12 + 625);
}

TEST(CalibPageCommandTest, MissingRunsFileIsAClearError) {
  Options options;
  options.runs = "/nonexistent/runs.jsonl";
  options.models_dir = kRoot + "/models";
  std::ostringstream out, err;
  EXPECT_NE(CalibPage(options, out, err), 0);
  EXPECT_THAT(err.str(), HasSubstr("/nonexistent/runs.jsonl"));
}

TEST(FitCommandTest, OnnxAndModelAreExclusiveAndFilesMustExist) {
  Options options;
  options.batch = "8";
  options.gpu = "L4";
  std::ostringstream out, err;
  EXPECT_EQ(Fit(options, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("give one model: --model"));
  options.model = "bert-base";
  options.onnx = "/nonexistent/model.onnx";
  EXPECT_EQ(Fit(options, out, err), 2);
  options.model.clear();
  err.str("");
  EXPECT_EQ(Fit(options, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("cannot open /nonexistent/model.onnx"));
}

TEST(FitCommandTest, BadBatchIsRejectedBeforeAnyCall) {
  Options options;
  options.model = "bert-base";
  options.batch = "8,abc";
  options.gpu = "L4";
  std::ostringstream out, err;
  EXPECT_EQ(Fit(options, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--batch 'abc'"));
}

// --gpu: a catalog name wins over a number ("4090" is the RTX 4090, not a
// 4090 GB card); a size may carry its unit.
TEST(FitCommandTest, GpuNamesBeforeSizes) {
  Options options;
  options.model = "bert-base";
  options.batch = "8";
  options.gpu = "4090,24GB,16, 48 gb,L4";
  absl::StatusOr<v1::CheckFitRequest> request = FitRequest(options);
  ASSERT_TRUE(request.ok()) << request.status();
  ASSERT_EQ(request->targets_size(), 5);
  EXPECT_EQ(request->targets(0).gpu(), "4090");
  EXPECT_EQ(request->targets(1).memory_gb(), 24);
  EXPECT_EQ(request->targets(2).memory_gb(), 16);
  EXPECT_EQ(request->targets(3).memory_gb(), 48);
  EXPECT_EQ(request->targets(4).gpu(), "L4");
}

TEST(FitCommandTest, UnreachableServerSaysWhere) {
  Options options;
  options.model = "bert-base";
  options.batch = "8";
  options.gpu = "L4";
  options.server = "127.0.0.1:1";
  options.deadline_ms = 2000;
  std::ostringstream out, err;
  EXPECT_EQ(Fit(options, out, err), 3);
  EXPECT_THAT(err.str(), HasSubstr("127.0.0.1:1"));
}

// `headroom factors list` follows the pages: with more factor sets than one
// page holds (500), every one is printed, oldest first, as before paging.
TEST(FactorsListCommandTest, FollowsEveryPage) {
  const std::string path = ::testing::TempDir() + "factors_list_pages.db";
  std::remove(path.c_str());
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    for (int i = 0; i < 520; ++i) {
      ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), i == 519).ok());
    }
  }
  PlannerConfig config = headroom::testing::TestPlannerConfig();
  config.http_listen = "";
  config.db_path = path;
  auto app = PlannerApp::Start(config);
  ASSERT_TRUE(app.ok()) << app.status();
  Options options;
  options.server = absl::StrCat("127.0.0.1:", (*app)->grpc_port());
  std::ostringstream out, err;
  ASSERT_EQ(FactorsList(options, out, err), 0) << err.str();
  const std::string text = out.str();
  size_t lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  EXPECT_EQ(lines, 1u + 520u);  // the header and one line per set
  EXPECT_THAT(text, HasSubstr("  fs-1 "));
  EXPECT_THAT(text, HasSubstr("* fs-520"));
  EXPECT_LT(text.find("  fs-499 "), text.find("  fs-501 "));
  options.json = true;
  std::ostringstream json;
  ASSERT_EQ(FactorsList(options, json, err), 0) << err.str();
  v1::ListFactorSetsResponse listed;
  ASSERT_TRUE(ParseJson(json.str(), "stdout", false, &listed).ok());
  EXPECT_EQ(listed.factor_sets_size(), 520);
  EXPECT_EQ(listed.next_page_token(), "");
  EXPECT_EQ(listed.current_version(), "fs-520");
}

}  // namespace
}  // namespace headroom::cli
