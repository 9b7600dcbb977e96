// Training energy end to end on loopback with the real binaries: a planner
// and one simulated L4 running memory probes of three templates at two
// batches. Before the probes the answer is the compute model; after them it
// is measured (the runs' energy over their timed steps / steps), the
// compute model beside it: the figure of issue 21, "training energy for
// three templates at two batches on sim workers, measured vs the compute
// model". The planner also draws /energy.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/sim_fleet.h"

namespace headroom {
namespace {

using ::headroom::testing::WaitFor;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kRoot = HEADROOM_SOURCE_DIR;
const std::vector<std::string> kTemplates = {"gpt2", "bert-base", "vit-b16"};
const std::vector<uint32_t> kBatches = {4, 8};
// The probes' timed steps (SubmitProbeRequest.steps = 0 means 3).
constexpr double kTimedSteps = 3;

class TrainEnergyIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(sim_.StartPlanner({"--store_poll_ms=100"}, /*http=*/true));
    fleet_ = v1::Fleet::NewStub(sim_.channel());
    energy_ = v1::Energy::NewStub(sim_.channel());
    ASSERT_TRUE(sim_.StartWorker(
        "sim-l4",
        {"--sim_gpu=L4", "--sim_seed=3", "--sim_step_ms=5", "--sample_ms=20"}));
  }

  grpc::Status Train(const std::string& model, uint32_t batch,
                     bool include_simulated, v1::TrainEnergyResponse* answer,
                     const std::string& gpu = "L4") {
    v1::TrainEnergyRequest request;
    request.set_template_(model);
    request.set_batch(batch);
    request.set_gpu(gpu);
    request.set_include_simulated(include_simulated);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return energy_->TrainEnergy(&context, request, answer);
  }

  ::headroom::testing::SimFleet sim_{"train-energy"};
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<v1::Energy::Stub> energy_;
};

TEST_F(TrainEnergyIntegrationTest, MeasuredVersusComputeModel) {
  // Nothing measured yet: the compute model, on the L4's datasheet.
  v1::TrainEnergyResponse before;
  ASSERT_TRUE(Train("gpt2", 8, true, &before).ok());
  EXPECT_FALSE(before.has_measured());
  EXPECT_THAT(before.answer().basis(),
              StartsWith("compute model: 2.322 TFLOP per step x 0.595 "
                         "J/TFLOP from the datasheet: TDP 72 W"));

  // Memory probes of three templates at two batches on the sim L4.
  std::map<std::string, std::string> probe_of;
  for (const std::string& model : kTemplates) {
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_(model);
    for (uint32_t batch : kBatches) request.add_batches(batch);
    request.set_gpu("L4");
    request.set_executor("sim");
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SubmitProbeResponse response;
    ASSERT_TRUE(fleet_->SubmitProbe(&context, request, &response).ok());
    probe_of[model] = response.probe().id();
  }
  std::map<std::string, v1::Probe> probes;
  for (const auto& [model, id] : probe_of) {
    ASSERT_TRUE(WaitFor(
        [&] {
          auto probe = ::headroom::testing::ProbeSnapshot(fleet_.get(), id);
          if (!probe.has_value() || probe->state() != v1::Probe::SUCCEEDED) {
            return false;
          }
          probes[model] = *probe;
          return true;
        },
        120))
        << model << " probe " << id << " never succeeded";
  }

  std::printf(
      "training energy on a simulated L4, measured vs the compute model\n"
      "%-10s %5s %8s %12s %12s %12s %12s %7s\n",
      "template", "batch", "tokens", "measured J", "model J", "meas J/1k",
      "model J/1k", "ratio");
  for (const std::string& model : kTemplates) {
    for (uint32_t batch : kBatches) {
      // The stored run's energy over its timed steps.
      double energy_j = 0;
      for (const v1::BatchResult& r : probes[model].results()) {
        if (r.batch() == batch) energy_j = r.energy_j();
      }
      ASSERT_GT(energy_j, 0) << model << " batch " << batch;
      v1::TrainEnergyResponse answer;
      // The stored runs (both batches) reach the evidence once it is
      // rebuilt.
      ASSERT_TRUE(WaitFor(
          [&] {
            return Train(model, batch, true, &answer).ok() &&
                   answer.has_measured() && answer.evidence().runs() == 2;
          },
          30))
          << model << " batch " << batch << ": " << answer.answer().basis();
      EXPECT_EQ(answer.answer().basis(),
                "measured: 2 runs of key " + answer.model_key() +
                    " on L4 (simulated), mean at the batch");
      EXPECT_DOUBLE_EQ(answer.answer().joules_per_step(),
                       energy_j / kTimedSteps);
      EXPECT_DOUBLE_EQ(answer.answer().joules_per_1k_tokens(),
                       answer.answer().joules_per_step() /
                           static_cast<double>(answer.tokens_per_step()) *
                           1000);
      EXPECT_EQ(answer.evidence().workers(0), "sim-l4");
      EXPECT_TRUE(answer.evidence().simulated());
      EXPECT_THAT(answer.compute_model().basis(),
                  StartsWith("compute model: "));
      EXPECT_GT(answer.compute_model().joules_per_step(), 0);
      std::printf("%-10s %5u %8llu %12.3f %12.3f %12.4f %12.4f %7.2f\n",
                  model.c_str(), batch,
                  static_cast<unsigned long long>(answer.tokens_per_step()),
                  answer.measured().joules_per_step(),
                  answer.compute_model().joules_per_step(),
                  answer.measured().joules_per_1k_tokens(),
                  answer.compute_model().joules_per_1k_tokens(),
                  answer.measured().joules_per_step() /
                      answer.compute_model().joules_per_step());
    }
  }

  // Simulated runs stay out unless asked for.
  v1::TrainEnergyResponse real_only;
  ASSERT_TRUE(Train("gpt2", 8, false, &real_only).ok());
  EXPECT_FALSE(real_only.has_measured());
  EXPECT_THAT(real_only.answer().basis(), StartsWith("compute model:"));
  // Between the measured batches: the line through them.
  v1::TrainEnergyResponse between;
  ASSERT_TRUE(Train("gpt2", 6, true, &between).ok());
  EXPECT_EQ(between.evidence().method(), "line through the batches");
  EXPECT_FALSE(between.evidence().extrapolated());
  // Runs measured on an L4 say nothing of an H100.
  v1::TrainEnergyResponse elsewhere;
  ASSERT_TRUE(Train("gpt2", 8, true, &elsewhere, "H100").ok());
  EXPECT_FALSE(elsewhere.has_measured());
  EXPECT_THAT(elsewhere.answer().basis(), HasSubstr("TDP 700 W / 989"));

  // Hostile input: named fields.
  v1::TrainEnergyResponse bad;
  grpc::Status status = Train("gpt2", 0, true, &bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("batch = 0 is out of range"));
  status = Train("gpt2", 8, true, &bad, "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("gpu is required"));
  status = Train("gpt2", 8, true, &bad, "L5");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  status = Train("no-such-model", 8, true, &bad);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);

  // The picture beside /calibration, and through the API.
  const std::string page =
      ::headroom::testing::HttpGet(sim_.http_port(), "/energy?arch=turing");
  EXPECT_THAT(page, HasSubstr("<svg"));
  EXPECT_THAT(page, HasSubstr("curves ec-1"));
  v1::PlotEnergyRequest plot;
  plot.set_arch("hopper");
  v1::PlotEnergyResponse drawn;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  ASSERT_TRUE(energy_->PlotEnergy(&context, plot, &drawn).ok());
  EXPECT_EQ(drawn.curves_version(), "ec-1");
  EXPECT_THAT(drawn.svg(), HasSubstr("borrowed from ampere"));
  EXPECT_EQ(drawn.points(), 0);
}

}  // namespace
}  // namespace headroom
