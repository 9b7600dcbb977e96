// A probe's batch result as the measured run the calibration reads: what
// was measured, on which card, by whom; compiled runs and unknown cards
// stay out.

#include "server/service/fleet/measured_runs.h"

#include <string>

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
