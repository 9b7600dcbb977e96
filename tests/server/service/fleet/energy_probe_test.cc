// Issue 21: the probe a SubmitEnergyProbeRequest becomes, the runs its
// assignment holds, the windows a worker may report for it, and the energy
// run each window is stored as.

#include <cmath>
#include <string>

#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "server/service/fleet/dispatch.h"
#include "server/service/fleet/measured_runs.h"
#include "server/service/fleet/probe_requests.h"
#include "server/service/fleet/worker_reports.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const ModelCatalog& Catalog() {
  static const ModelCatalog* catalog = [] {
    auto loaded =
        LoadModelCatalog(std::string(HEADROOM_SOURCE_DIR) + "/models");
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    return new ModelCatalog(loaded.ok() ? *std::move(loaded) : ModelCatalog());
  }();
  return *catalog;
}

v1::SubmitEnergyProbeRequest Request() {
  v1::SubmitEnergyProbeRequest request;
  request.mutable_model()->set_template_("gpt2");
  request.set_gpu("L4");
  return request;
}

v1::Probe ProbeOf(const v1::SubmitEnergyProbeRequest& request) {
  absl::StatusOr<v1::SubmitProbeRequest> probe_request =
      EnergyProbeRequest(request);
  EXPECT_TRUE(probe_request.ok()) << probe_request.status();
  absl::StatusOr<v1::Probe> probe =
      NewProbe(*probe_request, Catalog(), 4 << 20, 1000);
  EXPECT_TRUE(probe.ok()) << probe.status();
  probe->set_id("p-7");
  return *probe;
}

TEST(EnergyProbeRequestTest, DefaultsAndCanonicalQuantizations) {
  v1::SubmitEnergyProbeRequest request = Request();
  absl::StatusOr<v1::SubmitProbeRequest> all = EnergyProbeRequest(request);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(all->energy().quants(),
              ::testing::ElementsAre("fp16", "nf4", "int8"));
  EXPECT_EQ(all->energy().prompt_tokens(), kDefaultPromptTokens);
  EXPECT_EQ(all->energy().new_tokens(), kDefaultNewTokens);
  EXPECT_THAT(all->batches(), ::testing::ElementsAre(1u));
  EXPECT_EQ(all->gpu(), "L4");

  request.add_quants("INT8");
  request.add_quants("fp16");
  request.set_new_tokens(300);
  request.mutable_model()->set_hf_config(R"({"model_type": "gpt2"})");
  absl::StatusOr<v1::SubmitProbeRequest> two = EnergyProbeRequest(request);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_THAT(two->energy().quants(), ::testing::ElementsAre("fp16", "int8"));
  EXPECT_EQ(two->energy().new_tokens(), 300u);
  EXPECT_EQ(two->energy().hf_config(), R"({"model_type": "gpt2"})");
}

TEST(EnergyProbeRequestTest, EachBoundIsRefusedNamingTheField) {
  const auto refused = [](const v1::SubmitEnergyProbeRequest& request) {
    absl::StatusOr<v1::SubmitProbeRequest> probe = EnergyProbeRequest(request);
    EXPECT_EQ(probe.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(probe.status().message());
  };
  v1::SubmitEnergyProbeRequest bad = Request();
  bad.add_quants("fp8");
  EXPECT_THAT(refused(bad), HasSubstr("quants[0]"));
  EXPECT_THAT(refused(bad), HasSubstr("fp16, nf4, int8"));
  bad = Request();
  bad.add_quants("nf4");
  bad.add_quants("NF4");
  EXPECT_THAT(refused(bad), HasSubstr("quants[1] = nf4 is named twice"));
  bad = Request();
  bad.set_new_tokens(kMaxGenerationTokens + 1);
  EXPECT_THAT(refused(bad), HasSubstr("new_tokens = 8193 is out of range"));
  bad = Request();
  bad.set_prompt_tokens(1u << 31);
  EXPECT_THAT(refused(bad), HasSubstr("prompt_tokens"));
  bad = Request();
  bad.set_executor("cuda");
  EXPECT_THAT(refused(bad), HasSubstr("\"torch\", \"sim\" or empty"));
  // The rest is NewProbe's: no placement, too many repetitions.
  v1::SubmitEnergyProbeRequest nowhere = Request();
  nowhere.clear_gpu();
  absl::StatusOr<v1::SubmitProbeRequest> request = EnergyProbeRequest(nowhere);
  ASSERT_TRUE(request.ok());
  EXPECT_THAT(NewProbe(*request, Catalog(), 4 << 20, 1).status().message(),
              HasSubstr("placement is empty"));
}

TEST(EnergyProbeAssignmentTest, OneRunPerQuantizationAndRepetition) {
  v1::SubmitEnergyProbeRequest request = Request();
  request.set_repetitions(2);
  request.add_quants("fp16");
  request.add_quants("nf4");
  v1::Probe probe = ProbeOf(request);
  v1::BatchResult done;
  done.set_batch(1);
  done.set_repetition(0);
  done.set_mode("fp16");
  *probe.add_results() = done;  // measured already: not assigned again
  v1::GpuDevice l4;
  l4.set_catalog_gpu("L4");
  l4.set_index(3);
  const v1::Assignment assignment = AssignmentFor(probe, {l4}, {});
  EXPECT_TRUE(assignment.has_energy());
  EXPECT_EQ(assignment.gpu_index(), 3u);
  ASSERT_EQ(assignment.runs_size(), 3);
  EXPECT_EQ(assignment.runs(0).mode(), "fp16");
  EXPECT_EQ(assignment.runs(0).repetition(), 1u);
  EXPECT_EQ(assignment.runs(1).mode(), "nf4");
  EXPECT_EQ(assignment.runs(2).mode(), "nf4");
  for (const v1::BatchRun& run : assignment.runs()) {
    EXPECT_EQ(run.batch(), 1u);
  }
}

v1::BatchResult Window(const std::string& quant) {
  v1::BatchResult result;
  result.set_batch(1);
  result.set_mode(quant);
  v1::GenerationEnergy* g = result.mutable_generation();
  g->set_quant(quant);
  g->set_tokens_generated(128);
  g->set_prompt_tokens(64);
  g->set_energy_j(120);
  g->set_idle_w(16);
  g->set_window_s(2.5);
  g->set_tokens_per_s(51.2);
  g->set_j_per_1k_tokens(937.5);
  return result;
}

TEST(EnergyProbeReportTest, OnlyItsWindowsWithPlausibleFigures) {
  v1::SubmitEnergyProbeRequest request = Request();
  request.add_quants("fp16");
  request.add_quants("int8");
  const v1::Probe probe = ProbeOf(request);
  EXPECT_FALSE(CheckBatchResult(probe, Window("fp16"), 24).has_value());
  EXPECT_FALSE(CheckBatchResult(probe, Window("int8"), 24).has_value());
  // A failure record (bitsandbytes missing) is a run of the probe too.
  v1::BatchResult failed;
  failed.set_batch(1);
  failed.set_mode("int8");
  failed.set_error("int8 needs bitsandbytes, which does not import here");
  EXPECT_FALSE(CheckBatchResult(probe, failed, 24).has_value());

  const auto reason = [&](const v1::BatchResult& result) {
    std::optional<Rejection> bad = CheckBatchResult(probe, result, 24);
    EXPECT_TRUE(bad.has_value()) << result.ShortDebugString();
    return bad.has_value() ? bad->detail : std::string();
  };
  EXPECT_THAT(reason(Window("nf4")), HasSubstr("is not a run of probe p-7"));
  v1::BatchResult batch8 = Window("fp16");
  batch8.set_batch(8);
  EXPECT_THAT(reason(batch8), HasSubstr("is not a run of probe p-7"));
  v1::BatchResult mislabelled = Window("fp16");
  mislabelled.mutable_generation()->set_quant("int8");
  EXPECT_THAT(reason(mislabelled), HasSubstr("generation.quant = \"int8\""));
  v1::BatchResult no_tokens = Window("fp16");
  no_tokens.mutable_generation()->set_tokens_generated(0);
  EXPECT_THAT(reason(no_tokens), HasSubstr("generation.tokens_generated = 0"));
  v1::BatchResult negative = Window("fp16");
  negative.mutable_generation()->set_energy_j(-1);
  EXPECT_THAT(reason(negative), HasSubstr("generation.energy_j = -1"));
  v1::BatchResult nan = Window("fp16");
  nan.mutable_generation()->set_window_s(std::nan(""));
  EXPECT_THAT(reason(nan), HasSubstr("generation.window_s = nan"));
  v1::BatchResult furnace = Window("fp16");
  furnace.mutable_generation()->set_energy_j(1e6);  // 400 kW for 2.5 s
  EXPECT_THAT(reason(furnace), HasSubstr("is more than 2000 W"));
}

TEST(EnergyRunForTest, AWindowIsAnEnergyRunOfTheCardAndWorker) {
  v1::SubmitEnergyProbeRequest request = Request();
  const v1::Probe probe = ProbeOf(request);
  v1::ProbeResult result;
  result.mutable_gpu()->set_name("NVIDIA L4");
  (*result.mutable_framework_versions())["torch"] = "2.5.1";
  (*result.mutable_framework_versions())["bitsandbytes"] = "0.45.0";
  *result.mutable_batch() = Window("int8");
  result.mutable_batch()->set_repetition(1);
  const std::optional<v1::EnergyRun> run =
      EnergyRunFor(probe, result, "w-1", 1764590000);
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->model(), "gpt2");
  EXPECT_EQ(run->gpu(), "L4");
  EXPECT_EQ(run->arch(), "ada");
  EXPECT_EQ(run->quant(), "int8");
  EXPECT_GT(run->params_b(), 0);
  EXPECT_DOUBLE_EQ(run->params_b(),
                   static_cast<double>(CountParams(probe.spec())) / 1e9);
  EXPECT_EQ(run->tokens_generated(), 128u);
  EXPECT_EQ(run->energy_j(), 120);
  EXPECT_EQ(run->idle_w(), 16);
  EXPECT_EQ(run->window_s(), 2.5);
  EXPECT_EQ(run->framework(), "bitsandbytes 0.45.0, torch 2.5.1");
  EXPECT_FALSE(run->simulated());
  EXPECT_EQ(run->worker(), "w-1");
  EXPECT_EQ(run->measured_unix(), 1764590000);
  EXPECT_EQ(run->source(), "probe p-7 repetition 1");
  // Not a memory run; a failure record is no energy run.
  EXPECT_FALSE(MeasuredRunFor(probe, result, "w-1").has_value());
  result.mutable_batch()->clear_generation();
  result.mutable_batch()->set_error("no bitsandbytes");
  EXPECT_FALSE(EnergyRunFor(probe, result, "w-1", 1).has_value());
  // A simulated card's window says so.
  *result.mutable_batch() = Window("fp16");
  result.mutable_batch()->set_simulated(true);
  EXPECT_TRUE(EnergyRunFor(probe, result, "w-1", 1)->simulated());
}

}  // namespace
}  // namespace headroom
