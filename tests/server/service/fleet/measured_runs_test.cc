// A probe's batch result as the measured run the calibration reads: what
// was measured, on which card, by whom; compiled runs and unknown cards
// stay out.

#include "server/service/fleet/measured_runs.h"

#include <cmath>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/io/catalog_files.h"
#include "server/service/fleet/probe_requests.h"

namespace headroom {
namespace {

v1::Probe BertOnL4(const std::string& executor) {
  auto catalog = LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  v1::SubmitProbeRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.set_gpu("L4");
  request.set_executor(executor);
  request.add_batches(8);
  auto probe = NewProbe(request, *catalog, 4 << 20, 1);
  EXPECT_TRUE(probe.ok()) << probe.status();
  probe->set_id("p-4");
  return *probe;
}

v1::ProbeResult Result(double peak_gb) {
  v1::ProbeResult result;
  result.mutable_gpu()->set_name("NVIDIA L4");
  result.mutable_gpu()->set_driver_version("550.54");
  (*result.mutable_framework_versions())["torch"] = "2.3";
  (*result.mutable_framework_versions())["cuda"] = "12.4";
  result.mutable_batch()->set_batch(8);
  result.mutable_batch()->set_repetition(1);
  result.mutable_batch()->set_peak_allocated_gb(peak_gb);
  return result;
}

TEST(MeasuredRunForTest, AMeasuredPeakIsARunOfTheWorker) {
  const std::optional<v1::MeasuredRun> run =
      MeasuredRunFor(BertOnL4("torch"), Result(6.5), "w-1");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->template_(), "bert-base");
  EXPECT_EQ(run->gpu(), "L4");
  EXPECT_EQ(run->batch(), 8u);
  EXPECT_EQ(run->measured_peak_gb(), 6.5);
  EXPECT_EQ(run->measured_by(), v1::TORCH_HARNESS);
  EXPECT_EQ(run->worker(), "w-1");
  EXPECT_EQ(run->source(), "probe p-4 repetition 1");
  EXPECT_EQ(run->framework(), "cuda 12.4, torch 2.3");
  EXPECT_EQ(run->driver_version(), "550.54");
  EXPECT_FALSE(run->simulated());
  EXPECT_FALSE(run->model_key().empty());
  // A catalog template's spec is the catalog's: it does not travel.
  EXPECT_FALSE(run->has_spec());
}

TEST(MeasuredRunForTest, OomErrorAndSimulatedRuns) {
  v1::ProbeResult oom = Result(0);
  oom.mutable_batch()->clear_peak_allocated_gb();
  oom.mutable_batch()->set_oom(true);
  std::optional<v1::MeasuredRun> run =
      MeasuredRunFor(BertOnL4("cuda"), oom, "w-1");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->oom_on_gb(), 24);
  EXPECT_EQ(run->measured_by(), v1::CUDA_PROBE);

  v1::ProbeResult failed = Result(1);
  failed.mutable_batch()->set_error("segfault");
  run = MeasuredRunFor(BertOnL4(""), failed, "w-1");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->excluded(), "probe error: segfault");

  v1::ProbeResult simulated = Result(3);
  simulated.mutable_gpu()->set_simulated(true);
  run = MeasuredRunFor(BertOnL4("sim"), simulated, "w-1");
  ASSERT_TRUE(run.has_value());
  EXPECT_TRUE(run->simulated());
  EXPECT_EQ(run->measured_by(), v1::SIM);
}

v1::Probe FourL4s() {
  v1::Probe probe = BertOnL4("sim");
  probe.mutable_request()->mutable_setup()->set_gpus(4);
  probe.mutable_request()->mutable_setup()->set_parallel(
      v1::TrainingSetup::FSDP_FULL);
  return probe;
}

v1::ProbeResult Ranks(std::vector<double> peaks, double peak_gb) {
  v1::ProbeResult result = Result(peak_gb);
  result.mutable_gpu()->set_simulated(true);
  for (double gb : peaks) result.mutable_batch()->add_rank_peaks_gb(gb);
  return result;
}

TEST(MeasuredRunForTest, AMultiGpuRunKeepsEveryRanksPeakAndItsSetup) {
  std::optional<v1::MeasuredRun> run =
      MeasuredRunFor(FourL4s(), Ranks({3.1, 3.0, 2.9, 3.05}, 3.1), "w-4");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->excluded(), "");
  EXPECT_EQ(run->measured_peak_gb(), 3.1);
  ASSERT_EQ(run->rank_peaks_gb_size(), 4);
  EXPECT_EQ(run->rank_peaks_gb(3), 3.05);
  EXPECT_EQ(run->setup().gpus(), 4u);
  EXPECT_EQ(run->setup().parallel(), v1::TrainingSetup::FSDP_FULL);
}

TEST(MeasuredRunForTest, BadRankPeaksExcludeTheRunNamingTheField) {
  const struct {
    std::vector<double> peaks;
    double peak_gb;
    const char* says;
  } cases[] = {
      {{3.1, 3.0, 2.9},
       3.1,
       "rank_peaks_gb has 3 entries; setup.gpus = 4 needs one per rank"},
      {{}, 3.1, "rank_peaks_gb has 0 entries"},
      {{3.1, std::nan(""), 2.9, 3.0}, 3.1, "rank_peaks_gb[1] = nan"},
      {{3.1, -0.5, 2.9, 3.0}, 3.1, "rank_peaks_gb[1] = -0.5 is not a peak"},
      // An L4 holds 24 GB: 36 GB (x 1.5) at most.
      {{3.1, 3.0, 37, 3.0},
       37,
       "rank_peaks_gb[2] = 37 is not a peak; allowed 0..36 GB"},
      {{3.1, 3.0, 2.9, 3.0},
       3.0,
       "rank_peaks_gb's largest, 3.1 GB, is not peak_allocated_gb (3)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    std::optional<v1::MeasuredRun> run =
        MeasuredRunFor(FourL4s(), Ranks(c.peaks, c.peak_gb), "w-4");
    ASSERT_TRUE(run.has_value());
    EXPECT_NE(run->excluded().find(c.says), std::string::npos)
        << run->excluded();
    EXPECT_FALSE(run->has_measured_peak_gb());
    EXPECT_EQ(run->rank_peaks_gb_size(), 0);
  }
  // One GPU: no list, or the peak alone.
  EXPECT_EQ(MeasuredRunFor(BertOnL4("sim"), Ranks({3.1}, 3.1), "w")->excluded(),
            "");
  EXPECT_EQ(
      MeasuredRunFor(BertOnL4("sim"), Ranks({3.1, 3.0}, 3.1), "w")->excluded(),
      "rank_peaks_gb has 2 entries for a one-GPU run; allowed none");
}

TEST(MeasuredRunForTest, CompiledRunsAndUnknownCardsStayOut) {
  v1::ProbeResult compiled = Result(3);
  compiled.mutable_batch()->set_mode("compiled");
  EXPECT_FALSE(MeasuredRunFor(BertOnL4(""), compiled, "w-1").has_value());

  v1::Probe unknown = BertOnL4("");
  unknown.set_gpu("");
  v1::ProbeResult card = Result(3);
  card.mutable_gpu()->set_name("Mystery GPU");
  EXPECT_FALSE(MeasuredRunFor(unknown, card, "w-1").has_value());
}

}  // namespace
}  // namespace headroom
