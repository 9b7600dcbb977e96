// The /calibration page from a known factor set and runs: simulated runs
// counted and listed apart unless asked, which regime answers for each GPU,
// and why runs are not drawn.

#include "pages/calibration_plot.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::MeasuredRun Run(const std::string& name, double peak_gb, bool simulated) {
  v1::MeasuredRun run;
  run.set_template_(name);
  run.set_family("transformer");
  run.set_gpu("L4");
  run.set_batch(8);
  run.set_measured_peak_gb(peak_gb);
  run.set_simulated(simulated);
  return run;
}

struct Page {
  v1::FactorSet set;
  std::vector<v1::MeasuredRun> runs;
  Predictions predictions;
};

// Three real runs drawn, one excluded, one without a prediction, and two
// simulated; an adopted L4 regime and a rejected A10G one, no source fit
// usable as a prior (so the global prior answers and L4's regime with it).
Page KnownPage() {
  Page page;
  page.set.set_version("fs-7");
  page.set.set_k95(1.2);
  for (const char* name : {"a", "b", "c"}) {
    page.runs.push_back(Run(name, 2.0, false));
    page.predictions.push_back(2.1);
  }
  page.runs.push_back(Run("excluded-one", 3.0, false));
  page.runs.back().set_excluded("spec mismatch");
  page.predictions.push_back(std::nullopt);
  page.runs.push_back(Run("unpredicted", 3.0, false));
  page.predictions.push_back(std::nullopt);
  for (const char* name : {"sim-x", "sim-y"}) {
    page.runs.push_back(Run(name, 5.0, true));
    page.predictions.push_back(4.5);
  }
  v1::Regime* l4 = page.set.add_regimes();
  l4->set_gpu("L4");
  l4->set_runs(40);
  l4->set_adopted(true);
  l4->set_k95(1.14);
  l4->set_reason("adopted: all three held");
  (*l4->mutable_page()->mutable_summary())["ours_heldout"].set_median_abs_err(
      0.0818);
  (*l4->mutable_page()->mutable_summary())["global_heldout"].set_median_abs_err(
      0.2058);
  v1::Regime* a10g = page.set.add_regimes();
  a10g->set_gpu("A10G");
  a10g->set_runs(92);
  a10g->set_reason("not adopted: less accurate");
  return page;
}

TEST(CalibrationHtmlTest, SimulatedRunsAreCountedAndListedApartByDefault) {
  const Page page = KnownPage();
  const std::string html =
      CalibrationHtml(page.set, page.runs, page.predictions, false);
  EXPECT_THAT(html, HasSubstr("The store holds 7 runs: 5 measured on real "
                              "GPUs and 2 simulated"));
  EXPECT_THAT(html, HasSubstr("predicted vs measured, 5 stored runs "
                              "(simulated ones apart)"));
  EXPECT_THAT(html, HasSubstr("<h2 id=\"simulated\">Simulated runs (2)</h2>"));
  EXPECT_THAT(html, HasSubstr("<td>sim-x</td><td>L4</td><td>8</td><td>5.000"
                              "</td><td>4.500</td>"));
  EXPECT_THAT(html, Not(HasSubstr("(simulated): predicted")));
  EXPECT_THAT(html, HasSubstr("3 of 5 runs drawn:"));
  EXPECT_THAT(html, HasSubstr("not drawn (2):"));
  EXPECT_THAT(html, HasSubstr("  1 excluded from calibration"));
  EXPECT_THAT(html, HasSubstr("  1 without a prediction"));
  EXPECT_THAT(html, HasSubstr("Predicted (global factors, in sample) vs "
                              "measured"));
  EXPECT_THAT(html, Not(HasSubstr("Predicted (held out)")));
}

TEST(CalibrationHtmlTest, IncludeSimulatedDrawsThemHollow) {
  const Page page = KnownPage();
  const std::string html =
      CalibrationHtml(page.set, page.runs, page.predictions, true);
  EXPECT_THAT(html, HasSubstr("predicted vs measured, 7 stored runs (2 "
                              "simulated)"));
  EXPECT_THAT(html, HasSubstr("5 of 7 runs drawn:"));
  EXPECT_THAT(html, HasSubstr("hollow, dotted: simulated (2)"));
  EXPECT_THAT(html, HasSubstr("sim-x L4 batch 8 (simulated): predicted 4.5 "
                              "GB, measured 5 GB"));
}

TEST(CalibrationHtmlTest, RegimeSectionSaysWhichRegimeAnswersForEachGpu) {
  const Page page = KnownPage();
  const std::string html =
      CalibrationHtml(page.set, page.runs, page.predictions, false);
  EXPECT_THAT(html, HasSubstr("uses the <code>reference</code> prior (k 1.20 "
                              "at 0.95)"));
  EXPECT_THAT(html, HasSubstr("<tr><td>L4</td><td>40</td><td>yes</td><td>L4"
                              "</td><td>0.0818</td><td>0.2058</td>"));
  EXPECT_THAT(html, HasSubstr("<tr><td>A10G</td><td>92</td><td>no</td><td>"
                              "global</td>"));
  // Under the torch harness's prior an adopted regime does not answer.
  Page harness = KnownPage();
  v1::SourceFit* fit = harness.set.mutable_page()->add_sources();
  fit->set_source("torch-harness");
  fit->set_usable_as_prior(true);
  fit->set_k95(1.33);
  const std::string under_harness =
      CalibrationHtml(harness.set, harness.runs, harness.predictions, false);
  EXPECT_THAT(under_harness,
              HasSubstr("<tr><td>L4</td><td>40</td><td>yes</td><td>global (the "
                        "torch-harness prior)</td>"));
}

TEST(CalibrationHtmlTest, EveryColumnHeadingLinksToItsDefinition) {
  const Page page = KnownPage();
  const std::string html =
      CalibrationHtml(page.set, page.runs, page.predictions, false);
  for (const char* heading : {"runs", "medianAbsErr", "within25", "under",
                              "saidFitsButOom", "saidNoButFits", "agree"}) {
    EXPECT_THAT(html, HasSubstr(std::string("\">") + heading + "</a></th>"))
        << heading;
    EXPECT_THAT(html, HasSubstr(std::string("\">") + heading + "</dt>"))
        << heading;
  }
  EXPECT_THAT(html, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\" "
                              "id=\"calibration-plot\" width=\"1060\""));
}

}  // namespace
}  // namespace headroom
