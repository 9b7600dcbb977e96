#include "core/calibration/calibration_page.h"

#include "base/json_io.h"
#include "core/calibration/calibrate.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "io/files.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

class ReferencePageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
    ASSERT_TRUE(runs.ok()) << runs.status();
    runs_ = *runs;
    auto text = ReadFile(kRoot + "/data/memory-reference.json");
    ASSERT_TRUE(text.ok());
    ASSERT_TRUE(
        ParseJson(*text, "memory-reference.json", true, &reference_).ok());
    rules_.headroom = reference_.headroom();
    rules_.cards_gb.assign(reference_.cards_gb().begin(),
                           reference_.cards_gb().end());
  }
  std::vector<v1::MeasuredRun> runs_;
  v1::ReferencePlanner reference_;
  PageRules rules_;
};

TEST_F(ReferencePageTest, RunsFileHasItsRows) {
  EXPECT_EQ(runs_.size(), 187u);
  EXPECT_EQ(rules_.cards_gb, (std::vector<double>{16, 24, 40, 80}));
}

// The reference planner's and accelerate's columns reproduce the shipped
// summary to every digit.
TEST_F(ReferencePageTest, ReproducesEveryReferenceColumn) {
  ASSERT_EQ(reference_.summary_size(), 4);
  for (const auto& [column, expected] : reference_.summary()) {
    auto predictions = ColumnOf(runs_, column);
    ASSERT_TRUE(predictions.ok()) << predictions.status();
    const v1::ColumnSummary got = SummarizeColumn(runs_, *predictions, rules_);
    std::string diff;
    google::protobuf::util::MessageDifferencer differencer;
    differencer.ReportDifferencesToString(&diff);
    EXPECT_TRUE(differencer.Compare(expected, got))
        << column << ": " << diff << "\ngot " << ToJson(got, false);
  }
}

// Fed the reference planner's held-out predictions, the upper bound gives
// k = 1.17 and 1.43 and every verdict count of the file.
TEST_F(ReferencePageTest, ReproducesUpperBound) {
  auto predictions = ColumnOf(runs_, "reference_heldout");
  ASSERT_TRUE(predictions.ok());
  auto page = SummarizeUpperBound(runs_, *predictions, {0.9, 0.95}, rules_);
  ASSERT_TRUE(page.ok()) << page.status();
  const v1::UpperBoundPage& expected = reference_.upper_bound();
  EXPECT_EQ(page->runs(), expected.runs());
  ASSERT_EQ(page->bounds_size(), 2);
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        expected.bounds(i), page->bounds(i)))
        << ToJson(page->bounds(i), false) << " vs "
        << ToJson(expected.bounds(i), false);
  }
  EXPECT_DOUBLE_EQ(page->bounds(0).k(), 1.17);
  EXPECT_DOUBLE_EQ(page->bounds(1).k(), 1.43);
}

TEST_F(ReferencePageTest, UnknownColumnNamesTheAllowedOnes) {
  auto predictions = ColumnOf(runs_, "mystery");
  ASSERT_FALSE(predictions.ok());
  EXPECT_NE(predictions.status().message().find("reference_shipped"),
            std::string::npos);
}

TEST(CalibrationPageTest, OomOnSmallCardSaysNothingAboutLargerCards) {
  v1::MeasuredRun run;
  run.set_template_("x");
  run.set_oom_on_gb(24);
  const PageRules rules;
  // Predicted 10 GB: says fits on 16 (10*1.15 <= 16) and 24 but the run
  // OOMed on 24; 40 and 80 are unknown and not counted.
  const v1::ColumnSummary s = SummarizeColumn({run}, {10.0}, rules);
  EXPECT_EQ(s.said_fits_but_oom(), 2);
  EXPECT_EQ(s.agree(), 0);
  EXPECT_EQ(s.runs(), 0);
}

}  // namespace
}  // namespace headroom
