#include "client/energy_commands.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/json_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

EnergyOptions Shipped() {
  EnergyOptions options;
  options.offline = true;
  options.curves = kRoot + "/data/energy-curves.json";
  return options;
}

// A planner nobody listens at: only the offline paths may answer.
Options Nowhere() {
  Options options;
  options.server = "127.0.0.1:1";
  options.deadline_ms = 2000;
  return options;
}

TEST(EnergyCommandTest, JsonAnswerHasTheIssueFieldNames) {
  EnergyOptions options = Shipped();
  options.params_b = 7;
  options.gpu = "RTX 5090";
  options.quant = "nf4";
  options.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(EnergyEstimate(Nowhere(), options, out, err), 0) << err.str();
  for (const char* field :
       {"\"arch\": \"blackwell\"", "\"quant\": \"nf4\"", "\"params_b\": 7",
        "\"dE_pct\"", "\"fp16_j_per_1k\": 5508.56", "\"quant_j_per_1k\"",
        "\"crossover_b\": 4.75", "\"extrapolated\": false",
        "\"borrowed_from\": null", "\"resid_std\": 2.8022"}) {
    EXPECT_THAT(out.str(), HasSubstr(field)) << out.str();
  }
  // Still one JSON object of the response's schema.
  v1::EstimateEnergyResponse parsed;
  EXPECT_TRUE(ParseJson(out.str(), "stdout", false, &parsed).ok()) << out.str();
  EXPECT_EQ(parsed.fp16_j_per_1k(), 5508.56);
}

TEST(EnergyCommandTest, JsonNullCrossoverAndBorrow) {
  EnergyOptions options = Shipped();
  options.params_b = 13;
  options.gpu = "H100";
  options.quant = "int8";
  options.json = true;
  std::ostringstream out, err;
  ASSERT_EQ(EnergyEstimate(Nowhere(), options, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("\"crossover_b\": null"));
  EXPECT_THAT(out.str(), HasSubstr("\"borrowed_from\": \"ampere\""));
}

TEST(EnergyCommandTest, TextAnswerFlagsExtrapolation) {
  EnergyOptions options = Shipped();
  options.params_b = 70;
  options.arch = "turing";
  options.quant = "nf4";
  std::ostringstream out, err;
  ASSERT_EQ(EnergyEstimate(Nowhere(), options, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("EXTRAPOLATED: 63.00B outside (x10.00)"));
  EXPECT_THAT(out.str(), HasSubstr("crossover       2.126B (nf4 saves"));
}

TEST(EnergyCommandTest, BadInputExitsTwoWithTheReason) {
  EnergyOptions options = Shipped();
  options.params_b = 0;
  options.arch = "ada";
  options.quant = "nf4";
  std::ostringstream out, err;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--params_b is required"));
  options.params_b = -1;
  std::ostringstream out1, err1;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out1, err1), 2);
  EXPECT_THAT(err1.str(), HasSubstr("params_b must be in (0, 10000]"));

  options.params_b = 7;
  options.gpu = "T4";
  std::ostringstream out2, err2;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("exactly one of --gpu"));

  options.arch.clear();
  options.quant = "int4";
  std::ostringstream out3, err3;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out3, err3), 2);
  EXPECT_THAT(err3.str(), HasSubstr("allowed: fp16, nf4, int8"));

  options.curves = "/nonexistent/curves.json";
  std::ostringstream out4, err4;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out4, err4), 2);
  EXPECT_THAT(err4.str(), HasSubstr("/nonexistent/curves.json"));
}

TEST(EnergyCommandTest, RefitFromAnchorsPrintsEveryCurve) {
  EnergyOptions options = Shipped();
  options.from_anchors = true;
  options.out = ::testing::TempDir() + "/energy-refit.json";
  std::ostringstream out, err;
  ASSERT_EQ(EnergyRefit(Nowhere(), options, out, err), 0) << err.str();
  for (const char* curve : {"ada NF4", "ampere INT8", "ampere NF4",
                            "blackwell NF4", "turing NF4"}) {
    EXPECT_THAT(out.str(), HasSubstr(curve));
  }
  EXPECT_THAT(out.str(), HasSubstr("(3.6947)"));
  // The written set loads as a curve set.
  EnergyOptions reload = Shipped();
  reload.curves = options.out;
  reload.params_b = 3;
  reload.arch = "turing";
  reload.quant = "nf4";
  reload.json = true;
  std::ostringstream out2, err2;
  ASSERT_EQ(EnergyEstimate(Nowhere(), reload, out2, err2), 0) << err2.str();
  EXPECT_THAT(out2.str(), HasSubstr("\"curves_version\": \"local\""));
  std::remove(options.out.c_str());
}

TEST(EnergyCommandTest, RefitFromRunsFile) {
  const std::string path = ::testing::TempDir() + "/energy-runs.jsonl";
  {
    std::ofstream runs(path);
    // Blackwell NF4 at three sizes, fp16 partners alongside.
    const double n[] = {1.1, 3.0, 7.0};
    const double fp16[] = {1659.0, 3382.64, 5508.56};
    const double de[] = {26.49, 11.74, -11.45};
    const char* model[] = {"TinyLlama-1.1B", "Qwen2.5-3B", "Qwen2-7B"};
    for (int i = 0; i < 3; ++i) {
      for (int q = 0; q < 2; ++q) {
        runs << "{\"model\":\"" << model[i] << "\",\"params_b\":" << n[i]
             << ",\"gpu\":\"RTX 5090\",\"quant\":\"" << (q ? "nf4" : "fp16")
             << "\",\"tokens_generated\":2000,\"energy_j\":"
             << 2 * fp16[i] * (q ? 1 + de[i] / 100 : 1)
             << ",\"idle_w\":40,\"window_s\":10}\n";
      }
    }
  }
  EnergyOptions options = Shipped();
  options.runs = path;
  std::ostringstream out, err;
  ASSERT_EQ(EnergyRefit(Nowhere(), options, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("blackwell NF4         3"));
  EXPECT_THAT(out.str(), HasSubstr("carried over"));
  std::remove(path.c_str());

  EnergyOptions neither = Shipped();
  std::ostringstream out2, err2;
  EXPECT_EQ(EnergyRefit(Nowhere(), neither, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("--runs FILE or --from-anchors"));
}

TEST(EnergyCommandTest, PlotWritesAnSvg) {
  EnergyOptions options = Shipped();
  options.arch = "blackwell";
  options.svg = ::testing::TempDir() + "/energy-blackwell.svg";
  std::ostringstream out, err;
  ASSERT_EQ(EnergyPlot(Nowhere(), options, out, err), 0) << err.str();
  absl::StatusOr<std::string> svg = ReadFile(options.svg);
  ASSERT_TRUE(svg.ok());
  EXPECT_THAT(*svg, HasSubstr("crossover 4.75 B"));
  std::remove(options.svg.c_str());

  options.arch = "kepler";
  std::ostringstream out2, err2;
  EXPECT_EQ(EnergyPlot(Nowhere(), options, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("allowed: ada, ampere"));
}

TEST(EnergyCommandTest, ThePlannerAnswersUnlessOffline) {
  EnergyOptions options;
  options.params_b = 7;
  options.gpu = "L4";
  options.quant = "nf4";
  std::ostringstream out, err;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out, err), 3);
  EXPECT_THAT(err.str(), HasSubstr("cannot reach the planner at 127.0.0.1:1"));
  // A curves file belongs to --offline.
  options.curves = kRoot + "/data/energy-curves.json";
  std::ostringstream out2, err2;
  EXPECT_EQ(EnergyEstimate(Nowhere(), options, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("needs --offline"));
  // Offline without --curves: the shipped file, found from any directory,
  // and the answer names the curve set.
  options.curves.clear();
  options.offline = true;
  const std::filesystem::path cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::temp_directory_path());
  std::ostringstream out3, err3;
  const int code = EnergyEstimate(Nowhere(), options, out3, err3);
  std::filesystem::current_path(cwd);
  EXPECT_EQ(code, 0) << err3.str();
  EXPECT_THAT(out3.str(), HasSubstr("curves          shipped"));
  EnergyOptions plot;
  plot.arch = "ampere";
  plot.runs = "runs.jsonl";
  std::ostringstream out4, err4;
  EXPECT_EQ(EnergyPlot(Nowhere(), plot, out4, err4), 2);
  EXPECT_THAT(err4.str(), HasSubstr("--curves and --runs need --offline"));
  EnergyOptions refit;
  refit.from_anchors = true;
  std::ostringstream out5, err5;
  EXPECT_EQ(EnergyRefit(Nowhere(), refit, out5, err5), 2);
  EXPECT_THAT(err5.str(), HasSubstr("--from-anchors needs --offline"));
}

TEST(EnergyCommandTest, OfflinePlotDrawsARunsFilesPoints) {
  const std::string runs = ::testing::TempDir() + "/plot-runs.jsonl";
  {
    std::ofstream file(runs);
    file << R"({"model":"m","params_b":7,"gpu":"A100-80GB","quant":"fp16",)"
            R"("tokens_generated":1000,"energy_j":100,"idle_w":0,"window_s":1})"
         << "\n"
         << R"({"model":"m","params_b":7,"gpu":"A100-80GB","quant":"nf4",)"
            R"("tokens_generated":1000,"energy_j":90,"idle_w":0,"window_s":1})"
         << "\n";
  }
  EnergyOptions options = Shipped();
  options.arch = "ampere";
  options.runs = runs;
  std::ostringstream out, err;
  ASSERT_EQ(EnergyPlot(Nowhere(), options, out, err), 0) << err.str();
  EXPECT_THAT(out.str(), HasSubstr("class=\"measured\""));
  EXPECT_THAT(out.str(), HasSubstr("m on A100-80GB (NF4)"));
  EXPECT_THAT(out.str(), HasSubstr("-10.00%"));
}

TEST(EnergyCommandTest, TrainNeedsOneBatchAndOneGpuName) {
  Options options = Nowhere();
  options.model = "gpt2";
  options.gpu = "L4";
  std::ostringstream out, err;
  EXPECT_EQ(EnergyTrain(options, out, err), 2);
  EXPECT_THAT(err.str(), HasSubstr("--batch is required"));
  options.batch = "8";
  options.gpu = "24";
  std::ostringstream out2, err2;
  EXPECT_EQ(EnergyTrain(options, out2, err2), 2);
  EXPECT_THAT(err2.str(), HasSubstr("needs a catalog GPU name"));
  options.gpu = "L4";
  std::ostringstream out3, err3;
  EXPECT_EQ(EnergyTrain(options, out3, err3), 3);
}

}  // namespace
}  // namespace headroom::cli
