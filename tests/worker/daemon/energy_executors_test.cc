// Issue 21 on the worker: the simulated card draws its catalog power (an L4
// within 16..72 W, not 300 W), a memory probe's energy covers the timed
// steps only, an energy probe's window follows the sim's hidden truth, and
// the torch executor reads the harness's energy (timed steps; generation
// windows) rather than the sampler's whole-process difference.

#include <atomic>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "core/memory/model_spec.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "worker/daemon/gpu_executors.h"
#include "worker/daemon/sim_executor.h"

namespace headroom::worker {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

class Collect : public ExecutionSink {
 public:
  void Sample(const v1::BatchRun&, int64_t, const GpuReading& r) override {
    if (r.power_w) watts.push_back(*r.power_w);
  }
  void BatchDone(const v1::BatchRun&, v1::BatchResult r) override {
    results.push_back(std::move(r));
  }
  std::vector<double> watts;
  std::vector<v1::BatchResult> results;
};

v1::ModelSpec Gpt2() {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  EXPECT_TRUE(catalog.ok()) << catalog.status();
  return **catalog->Find("gpt2");
}

TEST(SimPowerTest, AnL4DrawsItsCatalogPowerOverTheTimedStepsOnly) {
  SimGpuConfig config;
  config.kind = "L4";
  config.step_ms = 5;
  config.sample_ms = 1;
  SimExecutor sim(config);
  EXPECT_GT(sim.TrainingWatts(), 16 + 0.7 * (72 - 16) - 1e-9);
  EXPECT_LE(sim.TrainingWatts(), 72);
  v1::Assignment assignment;
  *assignment.mutable_spec() = Gpt2();
  assignment.set_warmup_steps(2);
  assignment.set_steps(3);
  assignment.add_runs()->set_batch(4);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  ASSERT_TRUE(sim.Run(assignment, &sink, stop).error.empty());
  ASSERT_FALSE(sink.watts.empty());
  for (double w : sink.watts) {
    EXPECT_GE(w, 16);
    EXPECT_LE(w, 72);
  }
  ASSERT_EQ(sink.results.size(), 1u);
  const v1::BatchResult& r = sink.results[0];
  EXPECT_EQ(r.timed_steps(), 3u);
  ASSERT_TRUE(r.has_energy_j());
  // The card's training power x the modelled step x the 3 timed steps
  // (the 2 warm-up steps excluded), within 5 sigma of the 2 % noise.
  const double expected = sim.TrainingWatts() * 3 * r.step_seconds();
  EXPECT_NEAR(r.energy_j() / expected, 1.0, 0.10);
}

TEST(SimPowerTest, AnEnergyProbeWindowFollowsTheHiddenTruth) {
  SimGpuConfig config;
  config.kind = "L4";
  config.step_ms = 2;
  config.sample_ms = 1;
  config.seed = 3;
  SimExecutor sim(config);
  v1::Assignment assignment;
  *assignment.mutable_spec() = Gpt2();
  assignment.mutable_energy()->set_new_tokens(200);
  assignment.mutable_energy()->set_prompt_tokens(32);
  for (const char* quant : {"fp16", "nf4", "int8", "fp8"}) {
    v1::BatchRun* run = assignment.add_runs();
    run->set_batch(1);
    run->set_mode(quant);
  }
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  ASSERT_TRUE(sim.Run(assignment, &sink, stop).error.empty());
  ASSERT_EQ(sink.results.size(), 4u);
  const double n_b = static_cast<double>(CountParams(Gpt2())) / 1e9;
  for (int i = 0; i < 3; ++i) {
    const v1::BatchResult& r = sink.results[i];
    ASSERT_TRUE(r.has_generation()) << r.ShortDebugString();
    const v1::GenerationEnergy& g = r.generation();
    EXPECT_EQ(g.quant(), r.mode());
    EXPECT_EQ(g.tokens_generated(), 200u);
    EXPECT_EQ(g.prompt_tokens(), 32u);
    EXPECT_NEAR(g.j_per_1k_tokens(), g.energy_j() * 1000 / 200, 1e-9);
    EXPECT_NEAR(g.j_per_1k_tokens() / sim.TrueJPer1k(n_b, r.mode()), 1.0, 0.10);
    EXPECT_NEAR(g.energy_j() / g.window_s(), sim.GenerationWatts(), 1e-6);
    EXPECT_LE(sim.GenerationWatts(), 72);
    EXPECT_NEAR(g.idle_w(), 16, 16 * 0.10);
    EXPECT_TRUE(r.simulated());
  }
  // dE% follows the hidden curve.
  EXPECT_NEAR(sim.TrueJPer1k(n_b, "nf4") / sim.TrueJPer1k(n_b, "fp16"),
              1 + sim.TrueDePct(n_b, "nf4") / 100, 1e-12);
  EXPECT_EQ(sink.results[3].error(), "unknown quantization 'fp8'");
}

TEST(SimPowerTest, AKindOutsideTheCatalogHasNoPowerModel) {
  SimGpuConfig config;
  config.kind = "Voodoo5";
  SimExecutor sim(config);
  EXPECT_FALSE(sim.Device().power_supported());
  v1::Assignment assignment;
  *assignment.mutable_spec() = Gpt2();
  assignment.set_steps(1);
  assignment.add_runs()->set_batch(1);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  sim.Run(assignment, &sink, stop);
  ASSERT_EQ(sink.results.size(), 1u);
  EXPECT_FALSE(sink.results[0].has_energy_j());
  EXPECT_TRUE(sink.watts.empty());
}

std::string FakeHarness(const std::string& name, const std::string& body) {
  const std::string path = ::testing::TempDir() + "/" + name + ".sh";
  std::ofstream(path) << body;
  return path;
}

TEST(TorchEnergyTest, TheHarnessEnergyIsTheTimedStepsAndTheWindow) {
  GpuExecutorOptions options;
  options.python = "/bin/sh";
  options.harness =
      FakeHarness("timed-energy",
                  "echo '{\"event\":\"result\",\"batch\":16,\"oom\":false,"
                  "\"peak_allocated_bytes\":1000000000,\"step_seconds\":0.5,"
                  "\"steps\":3,\"energy_j\":91.5,\"error\":\"\"}'\n");
  v1::Assignment assignment;
  assignment.set_assignment_id("p-9.1");
  assignment.mutable_spec()->set_name("tiny");
  assignment.set_steps(3);
  assignment.set_batch_timeout_s(30);
  assignment.add_runs()->set_batch(16);
  Collect sink;
  std::atomic<StopReason> stop{StopReason::kNone};
  TorchExecutor(options).Run(assignment, &sink, stop);
  ASSERT_EQ(sink.results.size(), 1u);
  EXPECT_DOUBLE_EQ(sink.results[0].energy_j(), 91.5);
  EXPECT_EQ(sink.results[0].timed_steps(), 3u);

  // An energy probe: one `generate` per quantization; its arguments are
  // echoed back so the test sees what the harness was asked.
  options.harness = FakeHarness(
      "generate",
      "case \"$*\" in\n"
      "  *'--quant int8'*) echo '{\"event\":\"generation\",\"quant\":"
      "\"int8\",\"error\":\"int8 needs bitsandbytes, which does not import "
      "here\"}' ;;\n"
      "  *'generate --hf_config'*'--new_tokens 64'*) echo "
      "'{\"event\":\"generation\",\"quant\":\"fp16\",\"tokens_generated\":64,"
      "\"energy_j\":32.0,\"idle_w\":15.5,\"window_s\":0.8,\"tokens_per_s\":"
      "80.0,\"j_per_1k_tokens\":500.0,\"params\":124000000}' ;;\n"
      "esac\n");
  v1::Assignment energy;
  energy.set_assignment_id("p-10.1");
  energy.mutable_spec()->set_name("gpt2");
  energy.set_batch_timeout_s(30);
  energy.mutable_energy()->set_hf_config(R"({"model_type": "gpt2"})");
  energy.mutable_energy()->set_new_tokens(64);
  energy.mutable_energy()->set_prompt_tokens(16);
  for (const char* quant : {"fp16", "int8"}) {
    v1::BatchRun* run = energy.add_runs();
    run->set_batch(1);
    run->set_mode(quant);
  }
  Collect windows;
  TorchExecutor(options).Run(energy, &windows, stop);
  ASSERT_EQ(windows.results.size(), 2u);
  const v1::GenerationEnergy& g = windows.results[0].generation();
  EXPECT_EQ(g.quant(), "fp16");
  EXPECT_EQ(g.tokens_generated(), 64u);
  EXPECT_DOUBLE_EQ(g.energy_j(), 32.0);
  EXPECT_DOUBLE_EQ(g.idle_w(), 15.5);
  EXPECT_DOUBLE_EQ(g.j_per_1k_tokens(), 500.0);
  EXPECT_EQ(g.params(), 124000000u);
  EXPECT_FALSE(windows.results[1].has_generation());
  EXPECT_EQ(windows.results[1].error(),
            "int8 needs bitsandbytes, which does not import here");

  // Without an HF config the harness cannot generate: a failure record.
  energy.mutable_energy()->clear_hf_config();
  Collect none;
  TorchExecutor(options).Run(energy, &none, stop);
  ASSERT_EQ(none.results.size(), 2u);
  EXPECT_NE(none.results[0].error().find("Hugging Face config"),
            std::string::npos);
}

}  // namespace
}  // namespace headroom::worker
