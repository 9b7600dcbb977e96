// Published runs never fit the component factors (issue 30): a refit with
// and without them gives the same factor set, even when a published run
// repeats a reference run's model and setup with a very different figure.

#include "core/calibration/calibrate.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "io/published_runs.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

TEST(PublishedFitTest, PublishedRunsLeaveTheFactorsAlone) {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl," + kRoot +
                            "/data/harness-runs.jsonl");
  ASSERT_TRUE(runs.ok()) << runs.status();
  auto published = LoadPublishedRuns(
      kRoot + "/tests/data/published/published-runs.jsonl", *catalog);
  ASSERT_TRUE(published.ok()) << published.status();
  ASSERT_FALSE(published->usable.empty());

  std::vector<v1::MeasuredRun> with = *runs;
  for (const auto* part : {&published->usable, &published->unused}) {
    with.insert(with.end(), part->begin(), part->end());
  }
  // Reference and harness runs re-labelled as published, at three times
  // their figure: fitted, they would move every factor; skipped, nothing.
  int relabelled = 0;
  for (const v1::MeasuredRun& run : *runs) {
    if (!run.has_measured_peak_gb() || !run.excluded().empty()) continue;
    v1::MeasuredRun copy = run;
    copy.set_measured_by(v1::PUBLISHED);
    copy.set_metric(v1::DEVICE);
    copy.set_measured_peak_gb(run.measured_peak_gb() * 3);
    with.push_back(copy);
    ++relabelled;
  }
  ASSERT_GT(relabelled, 100);

  auto without_fit = Calibrate(*runs, *catalog, FitOptions{}, "runs");
  auto with_fit = Calibrate(with, *catalog, FitOptions{}, "runs");
  ASSERT_TRUE(without_fit.ok()) << without_fit.status();
  ASSERT_TRUE(with_fit.ok()) << with_fit.status();
  const v1::FactorSet& a = without_fit->factor_set;
  const v1::FactorSet& b = with_fit->factor_set;
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(a.factors(),
                                                                 b.factors()))
      << a.factors().ShortDebugString() << " vs "
      << b.factors().ShortDebugString();
  EXPECT_EQ(a.k90(), b.k90());
  EXPECT_EQ(a.k95(), b.k95());
  // The held-out page, the regimes, each source's own fit and the
  // collective constants: the same bytes.
  EXPECT_TRUE(
      google::protobuf::util::MessageDifferencer::Equals(a.page(), b.page()));
  ASSERT_EQ(a.collectives_size(), b.collectives_size());
  for (int i = 0; i < a.collectives_size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        a.collectives(i), b.collectives(i)));
  }
  // The published runs get no prediction of the fit.
  for (size_t i = runs->size(); i < with.size(); ++i) {
    EXPECT_FALSE(with_fit->ours[i].has_value()) << i;
  }
}

}  // namespace
}  // namespace headroom
