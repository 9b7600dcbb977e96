// Multi-GPU probes end to end on loopback with the real binaries (issue 18,
// item 4): a planner, a simulated one-L4 node and a simulated 4 x L4 node.
// A probe asking for 4 GPUs under FSDP full sharding is never taken by the
// one-L4 node (it expires saying why, and a one-GPU probe queued behind it
// still runs there); on the 4 x L4 node it succeeds, every batch reports
// four rank peaks whose largest is the run's peak, samples name every
// rank's GPU, and each stored measured run keeps the four peaks and the
// setup; a refit fits the FSDP collective constant from them. The figures
// (per-rank peaks beside the planner's per-GPU prediction, made before any
// run was stored, and the fitted constant beside the sim's hidden one) are
// printed.

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/store/sqlite_store.h"
#include "tests/support/fleet_client.h"
#include "tests/support/sim_fleet.h"
#include "worker/daemon/sim_executor.h"

namespace headroom {
namespace {

using ::headroom::testing::WaitFor;
using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;
const std::vector<uint32_t> kBatches = {4, 8, 16};
constexpr uint32_t kGpus = 4;
constexpr uint64_t kSeed = 5;

v1::TrainingSetup FourGpuFsdp() {
  v1::TrainingSetup setup;
  setup.set_gpus(kGpus);
  setup.set_parallel(v1::TrainingSetup::FSDP_FULL);
  return setup;
}

class MultiGpuIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sim_.StartPlanner({"--store_poll_ms=100", "--dispatch_ms=50"}));
    fleet_ = v1::Fleet::NewStub(sim_.channel());
    fit_ = v1::Fit::NewStub(sim_.channel());
    calibration_ = v1::Calibration::NewStub(sim_.channel());
  }

  // Starts a simulated node of `gpus` L4s and waits until it is connected.
  void StartWorker(const std::string& id, int gpus) {
    ASSERT_TRUE(sim_.StartWorker(
        id, {"--sim_gpu=L4", "--sim_gpus=" + std::to_string(gpus),
             "--sim_host_memory_gb=128", "--sim_seed=" + std::to_string(kSeed),
             "--sim_step_ms=100", "--sample_ms=20"}));
  }

  v1::SubmitProbeResponse Submit(const v1::TrainingSetup& setup,
                                 const std::vector<uint32_t>& batches,
                                 uint32_t expires_s) {
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("gpt2");
    *request.mutable_setup() = setup;
    for (uint32_t batch : batches) request.add_batches(batch);
    request.set_gpu("L4");
    request.set_executor("sim");
    request.set_expires_s(expires_s);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        fleet_->SubmitProbe(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  // The probe once it is in `state`, waiting up to `seconds`.
  std::optional<v1::Probe> WaitForState(const std::string& id,
                                        v1::Probe::State state, int seconds) {
    std::optional<v1::Probe> probe;
    const bool reached = WaitFor(
        [&] {
          probe = ::headroom::testing::ProbeSnapshot(fleet_.get(), id);
          return probe.has_value() && probe->state() == state;
        },
        seconds);
    if (!reached) return std::nullopt;
    return probe;
  }

  ::headroom::testing::SimFleet sim_{"multigpu"};
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<v1::Fit::Stub> fit_;
  std::unique_ptr<v1::Calibration::Stub> calibration_;
};

TEST_F(MultiGpuIntegrationTest, AFourGpuProbeRunsOnlyOnAFourGpuNode) {
  // The planner's per-GPU prediction, before any run is stored.
  v1::CheckFitRequest ask;
  ask.mutable_model()->set_template_("gpt2");
  *ask.mutable_setup() = FourGpuFsdp();
  for (uint32_t batch : kBatches) ask.add_batches(batch);
  ask.add_targets()->set_gpu("L4");
  v1::CheckFitResponse predicted;
  ASSERT_TRUE(WaitFor(
      [&] {
        grpc::ClientContext attempt;
        attempt.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(5));
        return fit_->CheckFit(&attempt, ask, &predicted).ok();
      },
      60))
      << "the planner never answered CheckFit";
  ASSERT_EQ(predicted.estimates_size(), static_cast<int>(kBatches.size()));

  // A one-L4 node alone: the 4-GPU probe waits (the submit warns why) and
  // expires saying so; the one-GPU probe behind it runs.
  StartWorker("sim-1xl4", 1);
  const v1::SubmitProbeResponse wide = Submit(FourGpuFsdp(), {4}, 2);
  EXPECT_THAT(wide.warning(),
              HasSubstr("needs 4 x L4 on one node; the largest node has 1"));
  const v1::SubmitProbeResponse narrow = Submit(v1::TrainingSetup(), {4}, 0);
  const std::optional<v1::Probe> ran =
      WaitForState(narrow.probe().id(), v1::Probe::SUCCEEDED, 60);
  ASSERT_TRUE(ran.has_value()) << "the one-GPU probe never succeeded";
  EXPECT_EQ(ran->worker(), "sim-1xl4");
  const std::optional<v1::Probe> expired =
      WaitForState(wide.probe().id(), v1::Probe::FAILED, 60);
  ASSERT_TRUE(expired.has_value()) << "the 4-GPU probe never expired";
  EXPECT_EQ(expired->attempts(), 0u);
  EXPECT_THAT(expired->error(), HasSubstr("expired: queued longer than 2 s"));
  EXPECT_THAT(expired->error(),
              HasSubstr("needs 4 x L4 on one node; the largest node has 1"));

  // A 4 x L4 node: it says so, and it takes the next 4-GPU probe.
  StartWorker("sim-4xl4", 4);
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::ListWorkersRequest request;
    v1::ListWorkersResponse listed;
    ASSERT_TRUE(fleet_->ListWorkers(&context, request, &listed).ok());
    bool seen = false;
    for (const v1::WorkerStatus& w : listed.workers()) {
      if (w.hello().worker_id() != "sim-4xl4") continue;
      seen = true;
      ASSERT_EQ(w.hello().gpus_size(), 4);
      std::set<std::string> uuids;
      for (int i = 0; i < 4; ++i) {
        EXPECT_EQ(w.hello().gpus(i).index(), static_cast<uint32_t>(i));
        EXPECT_EQ(w.hello().gpus(i).catalog_gpu(), "L4");
        uuids.insert(w.hello().gpus(i).uuid());
      }
      EXPECT_EQ(uuids.size(), 4u);
      EXPECT_EQ(w.hello().host_memory_bytes(), uint64_t{128'000'000'000});
    }
    EXPECT_TRUE(seen);
  }
  const v1::SubmitProbeResponse probe = Submit(FourGpuFsdp(), kBatches, 0);
  EXPECT_EQ(probe.warning(), "");
  // Samples of every rank's GPU, followed to the end.
  std::set<uint32_t> sampled_gpus;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
    v1::WatchProbeRequest request;
    request.set_id(probe.probe().id());
    request.set_follow(true);
    auto reader = fleet_->WatchProbe(&context, request);
    v1::ProbeEvent event;
    while (reader->Read(&event)) {
      if (event.has_samples()) {
        for (const v1::Sample& s : event.samples().samples()) {
          sampled_gpus.insert(s.gpu_index());
        }
      }
    }
    (void)reader->Finish();
  }
  EXPECT_EQ(sampled_gpus, (std::set<uint32_t>{0, 1, 2, 3}));
  const std::optional<v1::Probe> done =
      WaitForState(probe.probe().id(), v1::Probe::SUCCEEDED, 60);
  ASSERT_TRUE(done.has_value()) << "the 4-GPU probe never succeeded";
  EXPECT_EQ(done->worker(), "sim-4xl4");
  ASSERT_EQ(done->results_size(), static_cast<int>(kBatches.size()));
  for (const v1::BatchResult& r : done->results()) {
    ASSERT_EQ(r.rank_peaks_gb_size(), static_cast<int>(kGpus));
    EXPECT_FALSE(r.oom());
    EXPECT_DOUBLE_EQ(
        r.peak_allocated_gb(),
        *std::max_element(r.rank_peaks_gb().begin(), r.rank_peaks_gb().end()));
  }

  // The stored measured runs: four rank peaks each, the largest the peak.
  std::map<uint32_t, v1::MeasuredRun> runs;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto store = SqliteStore::Open(sim_.db());
        if (!store.ok()) return false;
        auto listed = (*store)->ListRuns();
        if (!listed.ok()) return false;
        runs.clear();
        for (const v1::MeasuredRun& run : *listed) {
          if (run.source() == "probe " + probe.probe().id() + " repetition 0") {
            runs[run.batch()] = run;
          }
        }
        return runs.size() == kBatches.size();
      },
      30))
      << "the 4-GPU probe's runs were never stored";
  std::printf(
      "gpt2 on a simulated 4 x L4 node, FSDP full sharding, per GPU\n"
      "%5s %10s %10s %10s %10s %10s %11s %8s\n",
      "batch", "rank 0", "rank 1", "rank 2", "rank 3", "peak GB", "predicted",
      "ratio");
  for (size_t i = 0; i < kBatches.size(); ++i) {
    const v1::MeasuredRun& run = runs[kBatches[i]];
    EXPECT_EQ(run.excluded(), "") << run.batch();
    EXPECT_TRUE(run.simulated());
    EXPECT_EQ(run.setup().gpus(), kGpus);
    EXPECT_EQ(run.setup().parallel(), v1::TrainingSetup::FSDP_FULL);
    EXPECT_EQ(run.worker(), "sim-4xl4");
    ASSERT_EQ(run.rank_peaks_gb_size(), static_cast<int>(kGpus));
    const double largest = *std::max_element(run.rank_peaks_gb().begin(),
                                             run.rank_peaks_gb().end());
    EXPECT_DOUBLE_EQ(run.measured_peak_gb(), largest);
    const double prediction = predicted.estimates(i).peak_gb();
    EXPECT_GT(prediction, 0);
    std::printf("%5u %10.3f %10.3f %10.3f %10.3f %10.3f %11.3f %8.3f\n",
                static_cast<unsigned>(run.batch()), run.rank_peaks_gb(0),
                run.rank_peaks_gb(1), run.rank_peaks_gb(2),
                run.rank_peaks_gb(3), largest, prediction,
                largest / prediction);
  }

  // The same question once the runs are stored (simulated runs asked
  // for): answered from the 4-GPU FSDP key's own runs, anchored as a
  // one-GPU key is by its runs.
  ask.set_include_simulated(true);
  v1::CheckFitResponse anchored;
  ASSERT_TRUE(WaitFor(
      [&] {
        grpc::ClientContext attempt;
        attempt.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(5));
        return fit_->CheckFit(&attempt, ask, &anchored).ok() &&
               anchored.estimates_size() == static_cast<int>(kBatches.size()) &&
               anchored.estimates(0).basis().kind() == v1::Basis::ANCHORED &&
               anchored.estimates(0).basis().runs() ==
                   static_cast<int>(kBatches.size());
      },
      30))
      << "the three stored 4-GPU runs never anchored the 4-GPU answer";
  double prior_err = 0, anchored_err = 0;
  std::printf("%5s %10s %11s %10s\n", "batch", "peak GB", "anchored", "ratio");
  for (size_t i = 0; i < kBatches.size(); ++i) {
    const double measured = runs[kBatches[i]].measured_peak_gb();
    const double answer = anchored.estimates(i).peak_gb();
    prior_err += std::abs(predicted.estimates(i).peak_gb() - measured);
    anchored_err += std::abs(answer - measured);
    std::printf("%5u %10.3f %11.3f %10.3f\n",
                static_cast<unsigned>(kBatches[i]), measured, answer,
                measured / answer);
  }
  EXPECT_LT(anchored_err, prior_err);

  // A refit (dry run, simulated runs included) uses them: the FSDP full
  // collective constant is fitted from the three runs, beside the sim's
  // hidden one (the fitted constant also absorbs the factors' mismatch).
  v1::RefitRequest refit;
  refit.set_dry_run(true);
  refit.set_include_simulated(true);
  v1::RefitResponse refitted;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(120));
    const grpc::Status status = calibration_->Refit(&context, refit, &refitted);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_FALSE(refitted.stored());
  const v1::CollectiveConstant* fsdp = nullptr;
  for (const v1::CollectiveConstant& c : refitted.factor_set().collectives()) {
    if (c.strategy() == "fsdp-full") fsdp = &c;
  }
  ASSERT_NE(fsdp, nullptr) << "the refit fitted no fsdp-full constant";
  EXPECT_EQ(fsdp->runs(), static_cast<int>(kBatches.size()));
  EXPECT_TRUE(std::isfinite(fsdp->constant_gb()));
  worker::SimGpuConfig config;
  config.kind = "L4";
  config.seed = kSeed;
  const worker::SimExecutor sim(config);
  std::printf(
      "refit (dry run, %d runs used): fsdp-full collective constant %.3f GB "
      "fitted from %d runs (median |residual| %.3f GB); the sim's hidden "
      "constant %.3f GB, rank 0 +%.2f %%\n",
      refitted.runs_used(), fsdp->constant_gb(), fsdp->runs(),
      fsdp->residual_gb(), sim.CollectiveGb(v1::TrainingSetup::FSDP_FULL),
      100 * sim.rank0_extra());
}

}  // namespace
}  // namespace headroom
