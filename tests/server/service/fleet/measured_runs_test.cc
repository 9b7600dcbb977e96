// A probe's batch result as the measured run the calibration reads: what
// was measured, on which card, by whom; compiled runs and unknown cards
// stay out. How a worker's result is stored and its assignment ended, on a
// SQLite store: once, only from the worker holding the lease.

#include "server/service/fleet/measured_runs.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "server/service/fleet/probe_requests.h"
#include "server/service/fleet/worker_reports.h"
#include "tests/server/service/fleet/fleet_test_store.h"

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

// Issue 30: what the worker measured of the device goes into the run:
// reserved, device, the context and every phase.
void AddPhase(v1::BatchResult* batch, const char* name, double allocated,
              double reserved, double device) {
  v1::PhaseMeasurement* phase = batch->add_phases();
  phase->set_phase(name);
  phase->set_allocated_gb(allocated);
  phase->set_reserved_gb(reserved);
  phase->set_device_gb(device);
}

v1::ProbeResult WithDeviceMemory(v1::ProbeResult result) {
  v1::BatchResult* batch = result.mutable_batch();
  batch->set_peak_reserved_gb(7.25);
  batch->set_device_peak_gb(8.0);
  batch->set_device_context_gb(0.5);
  AddPhase(batch, "load", 0.75, 1.0, 1.5);
  AddPhase(batch, "step", 6.5, 7.25, 8.0);
  return result;
}

TEST(MeasuredRunForTest, ARunCarriesReservedDeviceContextAndPhases) {
  const std::optional<v1::MeasuredRun> run =
      MeasuredRunFor(BertOnL4("torch"), WithDeviceMemory(Result(6.5)), "w-1");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->measured_peak_gb(), 6.5);
  EXPECT_EQ(run->peak_reserved_gb(), 7.25);
  EXPECT_EQ(run->device_peak_gb(), 8.0);
  EXPECT_EQ(run->device_context_gb(), 0.5);
  ASSERT_EQ(run->phases_size(), 2);
  EXPECT_EQ(run->phases(0).phase(), "load");
  EXPECT_EQ(run->phases(1).reserved_gb(), 7.25);
  // Without them the run has none (as runs before issue 30).
  const std::optional<v1::MeasuredRun> plain =
      MeasuredRunFor(BertOnL4("torch"), Result(6.5), "w-1");
  ASSERT_TRUE(plain.has_value());
  EXPECT_FALSE(plain->has_peak_reserved_gb());
  EXPECT_FALSE(plain->has_device_context_gb());
  EXPECT_EQ(plain->phases_size(), 0);
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

// Issue 32: a worker that said hello as a simulated L4 stored a
// non-simulated "H100" run by claiming one in the result's gpu field. As
// measured on the hello's card, the run is a simulated L4 run whatever the
// result claims, and the L4's memory bounds its rank peaks.
TEST(MeasuredRunForTest, TheHellosCardDecidesWhatARunMeasured) {
  v1::GpuDevice sim_l4;
  sim_l4.set_index(0);
  sim_l4.set_name("L4");
  sim_l4.set_catalog_gpu("L4");
  sim_l4.set_memory_bytes(24'000'000'000);
  sim_l4.set_simulated(true);
  v1::ProbeResult claims_h100 = Result(6.5);
  claims_h100.mutable_gpu()->set_name("NVIDIA H100 80GB HBM3");
  claims_h100.mutable_gpu()->set_catalog_gpu("H100");
  claims_h100.mutable_gpu()->set_memory_bytes(80'000'000'000);
  claims_h100.mutable_gpu()->set_simulated(false);
  claims_h100.mutable_batch()->set_simulated(false);

  const v1::ProbeResult measured = AsMeasuredOn(claims_h100, sim_l4);
  EXPECT_EQ(measured.gpu().catalog_gpu(), "L4");
  EXPECT_EQ(measured.batch().peak_allocated_gb(), 6.5);
  std::optional<v1::MeasuredRun> run =
      MeasuredRunFor(BertOnL4("torch"), measured, "sim-l4");
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->gpu(), "L4");
  EXPECT_TRUE(run->simulated());
  EXPECT_EQ(run->measured_by(), v1::SIM);
  // What the claim alone would have stored.
  EXPECT_EQ(MeasuredRunFor(BertOnL4("torch"), claims_h100, "sim-l4")->gpu(),
            "H100");

  // Rank peaks of 40 GB pass an 80 GB card, not a 24 GB one.
  v1::ProbeResult ranks = Ranks({40, 39, 38, 37}, 40);
  *ranks.mutable_gpu() = claims_h100.gpu();
  EXPECT_EQ(MeasuredRunFor(FourL4s(), ranks, "w")->excluded(), "");
  EXPECT_THAT(
      MeasuredRunFor(FourL4s(), AsMeasuredOn(ranks, sim_l4), "w")->excluded(),
      ::testing::HasSubstr("rank_peaks_gb[0] = 40 is not a peak; allowed "
                           "0..36 GB"));

  // An energy window alike.
  v1::Probe energy = BertOnL4("sim");
  energy.mutable_request()->mutable_energy()->add_quants("bf16");
  v1::ProbeResult window = claims_h100;
  window.mutable_batch()->set_mode("bf16");
  v1::GenerationEnergy& g = *window.mutable_batch()->mutable_generation();
  g.set_quant("bf16");
  g.set_tokens_generated(1000);
  g.set_energy_j(100);
  g.set_window_s(2);
  std::optional<v1::EnergyRun> energy_run =
      EnergyRunFor(energy, AsMeasuredOn(window, sim_l4), "sim-l4", 1);
  ASSERT_TRUE(energy_run.has_value());
  EXPECT_EQ(energy_run->gpu(), "L4");
  EXPECT_TRUE(energy_run->simulated());
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

// A bert-base probe on L4 claimed by w-1, and w-1's hello.
class ResultStoringTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto catalog =
        LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = *std::move(catalog);
    auto store = file_.Open();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    v1::Probe probe = BertOnL4("torch");
    probe.clear_id();
    ASSERT_TRUE(store_->AddProbe(probe).ok());
    auto claimed = store_->ClaimProbe("w-1", {"L4"}, {"torch"}, 1000, 60000);
    ASSERT_TRUE(claimed.ok()) << claimed.status();
    ASSERT_TRUE(claimed->has_value());
    probe_ = **claimed;
    hello_ = Hello("w-1");
  }

  static v1::WorkerHello Hello(const std::string& worker) {
    v1::WorkerHello hello;
    hello.set_worker_id(worker);
    v1::GpuDevice& gpu = *hello.add_gpus();
    gpu.set_index(0);
    gpu.set_name("NVIDIA L4");
    gpu.set_memory_bytes(24'000'000'000);
    StampCatalogGpus(&hello);
    return hello;
  }

  v1::ProbeResult Measured(double peak_gb) const {
    v1::ProbeResult result = Result(peak_gb);
    result.set_key("worker-key-1");
    result.set_probe_id(probe_.id());
    result.set_assignment_id(probe_.assignment_id());
    result.mutable_batch()->set_repetition(0);
    return result;
  }

  v1::Probe Stored() const {
    auto probe = store_->GetProbe(probe_.id());
    EXPECT_TRUE(probe.ok()) << probe.status();
    return probe.ok() ? *probe : v1::Probe();
  }

  ModelCatalog catalog_;
  TempStoreFile file_;
  std::unique_ptr<Store> store_;
  v1::Probe probe_;
  v1::WorkerHello hello_;
};

TEST_F(ResultStoringTest, ABatchIsStoredOnceAsARunOfTheHellosCard) {
  const ResultOutcome first = RecordBatchResult(store_.get(), catalog_, probe_,
                                                Measured(6.5), hello_, 100);
  EXPECT_FALSE(first.rejected.has_value());
  EXPECT_FALSE(first.retry);
  EXPECT_TRUE(first.run_stored);
  EXPECT_EQ(first.counted, "measured");
  ASSERT_TRUE(first.changed.has_value());
  ASSERT_EQ(first.changed->results_size(), 1);
  EXPECT_EQ(first.changed->results(0).peak_allocated_gb(), 6.5);
  // Stored under the planner's key, not the worker's.
  EXPECT_EQ(Stored().results_size(), 1);

  // Sent again (its acknowledgement lost): taken, not stored twice.
  const ResultOutcome again = RecordBatchResult(store_.get(), catalog_, probe_,
                                                Measured(6.5), hello_, 100);
  EXPECT_FALSE(again.rejected.has_value());
  EXPECT_FALSE(again.retry);
  EXPECT_FALSE(again.run_stored);
  EXPECT_EQ(again.counted, "duplicate");
  EXPECT_FALSE(again.changed.has_value());
  EXPECT_EQ(Stored().results_size(), 1);
}

TEST_F(ResultStoringTest, ABatchOfAnotherWorkerOrPastTheCardIsRefused) {
  const ResultOutcome other = RecordBatchResult(
      store_.get(), catalog_, probe_, Measured(6.5), Hello("w-2"), 100);
  ASSERT_TRUE(other.rejected.has_value());
  EXPECT_EQ(other.rejected->reason, WorkerRejection::kNotLeased);
  EXPECT_TRUE(other.counted.empty());

  // 30 GB on a 24 GB card (x kPeakSlack 1.05 = 25.2 at most).
  const ResultOutcome past = RecordBatchResult(store_.get(), catalog_, probe_,
                                               Measured(30), hello_, 100);
  ASSERT_TRUE(past.rejected.has_value());
  EXPECT_EQ(past.rejected->reason, WorkerRejection::kImplausibleValue);
  EXPECT_FALSE(past.run_stored);
  EXPECT_EQ(Stored().results_size(), 0);
}

TEST_F(ResultStoringTest, TheDeviceFiguresAreStoredAndReadBack) {
  const ResultOutcome stored =
      RecordBatchResult(store_.get(), catalog_, probe_,
                        WithDeviceMemory(Measured(6.5)), hello_, 100);
  ASSERT_FALSE(stored.rejected.has_value()) << stored.rejected->detail;
  EXPECT_TRUE(stored.run_stored);
  auto runs = store_->ListRuns();
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 1u);
  const v1::MeasuredRun& run = (*runs)[0];
  EXPECT_EQ(run.peak_reserved_gb(), 7.25);
  EXPECT_EQ(run.device_peak_gb(), 8.0);
  EXPECT_EQ(run.device_context_gb(), 0.5);
  ASSERT_EQ(run.phases_size(), 2);
  EXPECT_EQ(run.phases(1).phase(), "step");
  EXPECT_EQ(run.phases(1).device_gb(), 8.0);
}

// Reserved below allocated, device below reserved, a phase out of that
// order or of an unknown name: refused by name, nothing stored.
TEST_F(ResultStoringTest, FiguresOutOfTheDevicesOrderAreRefusedByName) {
  const struct {
    void (*spoil)(v1::BatchResult*);
    const char* message;
  } cases[] = {
      {[](v1::BatchResult* b) { b->set_peak_reserved_gb(6.0); },
       "run.peak_reserved_gb = 6 is below run.measured_peak_gb = 6.5"},
      {[](v1::BatchResult* b) { b->set_device_peak_gb(7.0); },
       "run.device_peak_gb = 7 is below run.peak_reserved_gb = 7.25"},
      {[](v1::BatchResult* b) { b->mutable_phases(0)->set_reserved_gb(0.5); },
       "run.phases[0].reserved_gb = 0.5 is below run.phases[0].allocated_gb = "
       "0.75"},
      {[](v1::BatchResult* b) { b->mutable_phases(1)->set_device_gb(7.0); },
       "run.phases[1].device_gb = 7 is below run.phases[1].reserved_gb = "
       "7.25"},
      {[](v1::BatchResult* b) { b->mutable_phases(1)->set_phase("lunch"); },
       "run.phases[1].phase = \"lunch\" is unknown; allowed load, "
       "first-step, step, eval, generate, save"},
  };
  for (const auto& c : cases) {
    v1::ProbeResult result = WithDeviceMemory(Measured(6.5));
    c.spoil(result.mutable_batch());
    const ResultOutcome refused =
        RecordBatchResult(store_.get(), catalog_, probe_, result, hello_, 100);
    ASSERT_TRUE(refused.rejected.has_value()) << c.message;
    EXPECT_EQ(refused.rejected->reason, WorkerRejection::kImplausibleValue);
    EXPECT_THAT(refused.rejected->detail, ::testing::HasSubstr(c.message));
    EXPECT_FALSE(refused.run_stored);
  }
  EXPECT_EQ(Stored().results_size(), 0);
  EXPECT_EQ(store_->ListRuns()->size(), 0u);
}

TEST_F(ResultStoringTest, TheFinalResultEndsTheAssignmentOnce) {
  v1::ProbeResult last = Measured(6.5);
  last.clear_batch();
  last.set_final(true);
  const ResultOutcome other =
      EndAssignment(store_.get(), probe_, last, Hello("w-2"), 3);
  ASSERT_TRUE(other.rejected.has_value());
  EXPECT_EQ(other.rejected->reason, WorkerRejection::kNotLeased);
  EXPECT_EQ(Stored().state(), v1::Probe::RUNNING);

  const ResultOutcome ended =
      EndAssignment(store_.get(), probe_, last, hello_, 3);
  EXPECT_FALSE(ended.rejected.has_value());
  EXPECT_FALSE(ended.retry);
  ASSERT_TRUE(ended.changed.has_value());
  EXPECT_EQ(ended.changed->state(), v1::Probe::SUCCEEDED);

  // Its acknowledgement lost, the worker sends it again: taken, nothing
  // changes.
  const ResultOutcome resent =
      EndAssignment(store_.get(), Stored(), last, hello_, 3);
  EXPECT_FALSE(resent.rejected.has_value());
  EXPECT_FALSE(resent.retry);
  EXPECT_FALSE(resent.changed.has_value());
  EXPECT_EQ(Stored().state(), v1::Probe::SUCCEEDED);
}

TEST_F(ResultStoringTest, AHandBackRequeuesUntilTheLimitFailsTheProbe) {
  v1::ProbeResult back = Measured(6.5);
  back.clear_batch();
  back.set_handed_back(true);
  const ResultOutcome requeued =
      EndAssignment(store_.get(), probe_, back, hello_, 3);
  EXPECT_FALSE(requeued.rejected.has_value());
  ASSERT_TRUE(requeued.changed.has_value());
  EXPECT_EQ(requeued.changed->state(), v1::Probe::QUEUED);

  auto claimed = store_->ClaimProbe("w-1", {"L4"}, {"torch"}, 2000, 60000);
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  back.set_assignment_id((*claimed)->assignment_id());
  const ResultOutcome failed =
      EndAssignment(store_.get(), **claimed, back, hello_, 2);
  ASSERT_TRUE(failed.rejected.has_value());
  EXPECT_EQ(failed.rejected->reason, WorkerRejection::kHandbackLimit);
  ASSERT_TRUE(failed.changed.has_value());
  EXPECT_EQ(failed.changed->state(), v1::Probe::FAILED);
  EXPECT_EQ(failed.rejected->detail, failed.changed->error());
}

}  // namespace
}  // namespace headroom
