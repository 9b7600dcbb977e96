// Energy probes, end to end on loopback with the real binaries (issue 21's
// figure): a planner and one simulated L4. Energy probes of four model sizes
// (Hugging Face configs, so any model reference works) at fp16, NF4 and INT8
// are stored as energy runs; a refit from the stored runs without the
// simulated ones refits nothing and the shipped curves stay current; with
// them, the refitted ada curves are within the sim's noise of its hidden
// truth, the answers name the new version and say the points near N were
// measured, and a rollback brings the shipped curves back.

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/energy/energy_curves.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "tests/support/fleet_client.h"
#include "tests/support/sim_fleet.h"
#include "worker/daemon/sim_executor.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

using ::headroom::testing::WaitFor;

// Llama-architecture configs of four sizes (about 0.4, 1.1, 3.2 and 6.7
// billion parameters).
std::string LlamaConfig(int hidden, int intermediate, int layers, int heads,
                        int kv_heads, int vocab) {
  return absl::StrCat(
      R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], )",
      R"("hidden_size": )", hidden, R"(, "intermediate_size": )", intermediate,
      R"(, "num_hidden_layers": )", layers, R"(, "num_attention_heads": )",
      heads, R"(, "num_key_value_heads": )", kv_heads, R"(, "vocab_size": )",
      vocab,
      R"(, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, )"
      R"("tie_word_embeddings": false, "hidden_act": "silu"})");
}

const std::vector<std::string>& Configs() {
  static const std::vector<std::string> configs = {
      LlamaConfig(1024, 2816, 24, 16, 16, 32000),
      LlamaConfig(2048, 5632, 22, 32, 4, 32000),
      LlamaConfig(3072, 8192, 28, 24, 8, 128256),
      LlamaConfig(4096, 11008, 32, 32, 32, 32000),
  };
  return configs;
}

constexpr int kRepetitions = 2;
// The sim's relative noise on each window's energy (SimGpuConfig.noise).
constexpr double kNoise = 0.02;

class EnergyIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        sim_.StartPlanner({"--runs=" + kRoot + "/data/memory-runs.jsonl",
                           "--probe_lease_ms=3000", "--store_poll_ms=100"},
                          /*http=*/true));
    fleet_ = v1::Fleet::NewStub(sim_.channel());
    energy_ = v1::Energy::NewStub(sim_.channel());
    ASSERT_TRUE(sim_.StartWorker(
        "sim-l4",
        {"--sim_gpu=L4", "--sim_seed=7", "--sim_step_ms=5", "--sample_ms=5"}));
  }

  grpc::Status Refit(const v1::RefitEnergyRequest& request,
                     v1::RefitEnergyResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    return energy_->RefitEnergy(&context, request, response);
  }

  v1::EstimateEnergyResponse Estimate(double n_b, const std::string& quant) {
    v1::EstimateEnergyRequest request;
    request.set_params_b(n_b);
    request.set_gpu("L4");
    request.set_quant(quant);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::EstimateEnergyResponse response;
    const grpc::Status status =
        energy_->EstimateEnergy(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  ::headroom::testing::SimFleet sim_{"energy"};
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<v1::Energy::Stub> energy_;
};

TEST_F(EnergyIntegrationTest, ProbesRefitToTheSimsHiddenTruth) {
  // The shipped curves answer first, under the version the planner stored.
  EXPECT_EQ(Estimate(1.1, "nf4").curves_version(), "ec-1");

  std::vector<std::string> probe_ids;
  for (const std::string& config : Configs()) {
    v1::SubmitEnergyProbeRequest request;
    request.mutable_model()->set_hf_config(config);
    request.set_gpu("L4");
    request.add_quants("fp16");
    request.add_quants("NF4");
    request.add_quants("int8");
    request.set_repetitions(kRepetitions);
    request.set_new_tokens(256);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        fleet_->SubmitEnergyProbe(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.warning(), "");
    probe_ids.push_back(response.probe().id());
  }
  for (const std::string& id : probe_ids) {
    std::optional<v1::Probe> probe;
    ASSERT_TRUE(WaitFor(
        [&] {
          probe = ::headroom::testing::ProbeSnapshot(fleet_.get(), id);
          return probe.has_value() && probe->state() == v1::Probe::SUCCEEDED;
        },
        120))
        << (probe.has_value() ? probe->ShortDebugString() : "no probe");
    ASSERT_EQ(probe->results_size(), 3 * kRepetitions);
    for (const v1::BatchResult& result : probe->results()) {
      ASSERT_TRUE(result.has_generation()) << result.ShortDebugString();
      EXPECT_TRUE(result.simulated());
      EXPECT_EQ(result.generation().tokens_generated(), 256u);
      // An L4's power: the window's mean within idle..72 W.
      const double watts =
          result.generation().energy_j() / result.generation().window_s();
      EXPECT_GT(watts, 16.0);
      EXPECT_LE(watts, 72.0);
    }
  }

  // Without the simulated runs there is nothing to refit: the shipped
  // curves stay current.
  v1::RefitEnergyRequest real_only;
  real_only.set_stored(true);
  v1::RefitEnergyResponse kept;
  const grpc::Status refused = Refit(real_only, &kept);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find(
                absl::StrCat(4 * 3 * kRepetitions, " simulated runs left out")),
            std::string::npos)
      << refused.error_message();
  EXPECT_EQ(Estimate(1.1, "nf4").curves_version(), "ec-1");

  // With them: a new set, promoted by the rule (ada NF4 no worse held out
  // than the shipped curve on the L4's points; ada INT8 is new).
  v1::RefitEnergyRequest with_sim = real_only;
  with_sim.set_include_simulated(true);
  v1::RefitEnergyResponse refit;
  const grpc::Status status = Refit(with_sim, &refit);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(refit.promoted()) << refit.promotion_reason();
  EXPECT_EQ(refit.curve_set().version(), "ec-2");
  EXPECT_EQ(refit.current_version(), "ec-2");
  EXPECT_EQ(refit.stored_runs(), 4 * 3 * kRepetitions);

  for (const v1::CurveFitSummary& c : refit.curves()) {
    if (!c.refit()) continue;
    std::printf("energy: %s %s held out %.2f pp, current set %s pp\n",
                c.arch().c_str(), c.quant().c_str(), c.heldout_mae(),
                c.has_current_heldout_mae()
                    ? absl::StrCat(c.current_heldout_mae()).c_str()
                    : "none");
  }
  std::printf("energy: %s %s: %s\n", refit.curve_set().version().c_str(),
              refit.promoted() ? "promoted" : "kept",
              refit.promotion_reason().c_str());

  worker::SimGpuConfig config;
  config.kind = "L4";
  config.seed = 7;
  const worker::SimExecutor sim(config);
  const v1::QuantCurves& ada = refit.curve_set().curves().at("ada");
  std::ifstream file(kRoot + "/data/energy-curves.json");
  const std::string text((std::istreambuf_iterator<char>(file)),
                         std::istreambuf_iterator<char>());
  absl::StatusOr<v1::EnergyCurveSet> shipped_set =
      ParseCurveSet(text, "energy-curves.json");
  ASSERT_TRUE(shipped_set.ok()) << shipped_set.status();
  const v1::EnergyCurve shipped_nf4 = shipped_set->curves().at("ada").nf4();
  ASSERT_TRUE(ada.has_nf4());
  ASSERT_TRUE(ada.has_int8());
  std::printf(
      "energy: sim L4 (seed 7, noise %.0f %%, %d windows per point), "
      "refitted from stored runs vs hidden truth\n"
      "  curve      N (B)   fitted dE%%   truth dE%%   shipped dE%%   "
      "|fit - truth| / sigma\n",
      100 * kNoise, kRepetitions);
  for (const auto& [name, curve] :
       {std::pair<std::string, const v1::EnergyCurve*>{"nf4", &ada.nf4()},
        {"int8", &ada.int8()}}) {
    ASSERT_EQ(curve->anchors_size(), 4) << name;
    for (const v1::EnergyAnchor& anchor : curve->anchors()) {
      const double fitted = DePct(*curve, anchor.n());
      const double truth = sim.TrueDePct(anchor.n(), name);
      // dE% is 100 (q / fp16 - 1) of two means of kRepetitions windows,
      // each with relative noise kNoise: its standard deviation.
      const double sigma =
          100 * (1 + truth / 100) * kNoise * std::sqrt(2.0 / kRepetitions);
      const std::string shipped =
          name == "nf4"
              ? absl::StrCat(std::round(100 * DePct(shipped_nf4, anchor.n())) /
                             100)
              : "none";
      std::printf("  ada %-5s %7.3f %11.2f %11.2f %12s %12.2f\n", name.c_str(),
                  anchor.n(), fitted, truth, shipped.c_str(),
                  std::fabs(fitted - truth) / sigma);
      EXPECT_LE(std::fabs(fitted - truth), 3 * sigma)
          << "ada " << name << " at " << anchor.n() << "B: fitted " << fitted
          << ", hidden truth " << truth;
    }
  }
  // fp16 anchors: the mean of kRepetitions windows, within 3 sigma.
  const v1::Fp16Energy& fp16 = refit.curve_set().fp16_energy().at("ada");
  ASSERT_EQ(fp16.anchors_size(), 4);
  for (const v1::Fp16Anchor& anchor : fp16.anchors()) {
    const double truth = sim.TrueJPer1k(anchor.n(), "fp16");
    std::printf("  ada fp16  %7.3f  %9.1f J/1k  truth %9.1f J/1k\n", anchor.n(),
                anchor.e_j1k(), truth);
    EXPECT_NEAR(anchor.e_j1k() / truth, 1.0,
                3 * kNoise / std::sqrt(kRepetitions));
  }

  // Answers name the new version and whether the points near N were
  // measured.
  const double n0 = ada.nf4().anchors(1).n();
  const v1::EstimateEnergyResponse near = Estimate(n0, "nf4");
  EXPECT_EQ(near.curves_version(), "ec-2");
  EXPECT_EQ(near.points_near_n(), "measured");
  EXPECT_NEAR(near.de_pct(), DePct(ada.nf4(), n0), 1e-9);
  const v1::EstimateEnergyResponse far = Estimate(70, "nf4");
  EXPECT_EQ(far.points_near_n(), "extrapolated");
  EXPECT_TRUE(far.extrapolated());

  // A rollback brings the shipped curves back.
  v1::PromoteEnergyCurveSetRequest rollback;
  rollback.set_rollback(true);
  v1::PromoteEnergyCurveSetResponse rolled;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    ASSERT_TRUE(
        energy_->PromoteEnergyCurveSet(&context, rollback, &rolled).ok());
  }
  EXPECT_EQ(rolled.current_version(), "ec-1");
  EXPECT_EQ(Estimate(n0, "nf4").curves_version(), "ec-1");
}

// Over the wire: a bad quantization is INVALID_ARGUMENT naming the field,
// an unknown GPU NOT_FOUND, and SubmitProbe refuses an energy plan.
TEST_F(EnergyIntegrationTest, SubmitEnergyProbeRefusesBadInput) {
  const auto submit = [&](const v1::SubmitEnergyProbeRequest& request,
                          v1::SubmitProbeResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return fleet_->SubmitEnergyProbe(&context, request, response);
  };
  v1::SubmitEnergyProbeRequest request;
  request.mutable_model()->set_template_("gpt2");
  request.set_gpu("L4");
  request.add_quants("fp4");
  v1::SubmitProbeResponse response;
  grpc::Status status = submit(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("quants[0]"), std::string::npos)
      << status.error_message();
  request.clear_quants();
  request.set_gpu("Voodoo5");
  status = submit(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(status.error_message().find("gpu: "), std::string::npos);

  v1::SubmitProbeRequest sneaky;
  sneaky.mutable_model()->set_template_("gpt2");
  sneaky.set_gpu("L4");
  sneaky.add_batches(1);
  sneaky.mutable_energy()->add_quants("fp16");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  status = fleet_->SubmitProbe(&context, sneaky, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("energy is set by SubmitEnergyProbe"),
            std::string::npos);
}

}  // namespace
}  // namespace headroom
