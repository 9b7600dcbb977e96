#include "base/json_io.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(JsonIoTest, ParsesAndPrintsTheSameMessage) {
  v1::MeasuredRun run;
  ASSERT_TRUE(ParseJson(R"({"gpu": "L4", "batch": 8})", "run",
                        /*ignore_unknown=*/false, &run)
                  .ok());
  EXPECT_EQ(run.gpu(), "L4");
  EXPECT_EQ(run.batch(), 8u);
  run.set_measured_peak_gb(3.5);
  v1::MeasuredRun back;
  ASSERT_TRUE(ParseJson(ToJson(run, /*pretty=*/true), "printed",
                        /*ignore_unknown=*/false, &back)
                  .ok());
  EXPECT_EQ(back.SerializeAsString(), run.SerializeAsString());
}

TEST(JsonIoTest, PrintsZerosAndLowerCamelCase) {
  v1::MeasuredRun run;
  run.set_measured_peak_gb(3.5);
  const std::string json = ToJson(run, /*pretty=*/false);
  // Every primitive field printed, zeros included (a reader sees the field);
  // 64-bit integers as strings, as the Protobuf JSON mapping has them.
  EXPECT_THAT(json, HasSubstr("\"template\":\"\""));
  EXPECT_THAT(json, HasSubstr("\"batch\":\"0\""));
  EXPECT_THAT(json, HasSubstr("\"measuredPeakGb\":3.5"));
}

TEST(JsonIoTest, AnUnknownFieldIsRefusedUnlessAsked) {
  v1::MeasuredRun run;
  const absl::Status strict = ParseJson(R"({"no_such_field": 1})", "runs.json",
                                        /*ignore_unknown=*/false, &run);
  EXPECT_EQ(strict.code(), absl::StatusCode::kInvalidArgument);
  // The error names the input and the message type it was read as.
  EXPECT_THAT(strict.message(), HasSubstr("runs.json"));
  EXPECT_THAT(strict.message(), HasSubstr("headroom.v1.MeasuredRun"));
  EXPECT_TRUE(ParseJson(R"({"no_such_field": 1})", "runs.json",
                        /*ignore_unknown=*/true, &run)
                  .ok());
}

TEST(JsonIoTest, MalformedJsonIsAnErrorNotACrash) {
  v1::MeasuredRun run;
  for (const char* bad :
       {"", "{", "[1,2", "{\"batch\": \"eight\"}", "null x"}) {
    EXPECT_EQ(ParseJson(bad, "body", /*ignore_unknown=*/true, &run).code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(JsonIoTest, RunsJsonlSkipsBlankLinesAndNamesTheBadLine) {
  auto runs = ParseRunsJsonl("{\"gpu\": \"L4\"}\n\n  \n{\"gpu\": \"H100\"}\n");
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_EQ((*runs)[1].gpu(), "H100");

  auto bad = ParseRunsJsonl("{\"gpu\": \"L4\"}\n{\"gpu\": \n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("runs line 2"));
}

}  // namespace
}  // namespace headroom
