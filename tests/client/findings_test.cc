// Issue 33's CLI findings, one test (or more) per finding: each fails on the
// CLI as it was before the fix.

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "client/cli.h"
#include "client/commands.h"
#include "client/fit_advice.h"
#include "client/fit_output.h"
#include "client/flag_errors.h"
#include "client/fleet_commands.h"
#include "client/microbatch_commands.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/calibration.pb.h"
#include "server/service/planner_app.h"
#include "tests/support/test_planner.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kRoot = HEADROOM_SOURCE_DIR;

struct Result {
  int code;
  std::string out;
  std::string err;
};

// `headroom ARGS... --server SERVER`, in-process.
Result Headroom(std::vector<std::string> args,
                const std::string& server = "127.0.0.1:1") {
  args.insert(args.begin(), "headroom");
  args.push_back("--server=" + server);
  args.push_back("--deadline_ms=20000");
  args.push_back("--models_dir=" + kRoot + "/models");
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

// One in-process planner on the repo's catalog and runs for the tests that
// need answers.
class FindingsWithPlanner : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PlannerConfig config = headroom::testing::TestPlannerConfig();
    config.http_listen = "";
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = app->release();
  }
  static void TearDownTestSuite() {
    delete app_;
    app_ = nullptr;
  }
  static std::string Server() {
    return absl::StrCat("127.0.0.1:", app_->grpc_port());
  }
  static PlannerApp* app_;
};
PlannerApp* FindingsWithPlanner::app_ = nullptr;

// Finding: DOES_NOT_FIT with no next step. The README's first question
// (bert-base at 32, 256, 512 on L4, H100 and 16 GB) now ends with what to
// try, computed from the request: one GPU asked, checkpointing off, full
// fine-tuning, so --gpus auto, --checkpointing and LoRA/QLoRA; per card
// the accumulation that brings batch 512 under its largest FITS batch (the
// test planner's answer, on data/memory-runs.jsonl): L4 FITS up to 293:
// ceil(512 / 293) = 2, 512 % 2 = 0, so 2 microbatches of 256; 16 GB FITS
// up to 192: ceil(512 / 192) = 3, 512 % 3 = 2, so 4 (microbatches of 128).
TEST_F(FindingsWithPlanner, ANotFitsAnswerSaysWhatToTry) {
  const Result r = Headroom({"fit", "--model", "bert-base", "--batch",
                             "32,256,512", "--gpu", "L4,H100,16"},
                            Server());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("to try (each alone, then fit again):"));
  EXPECT_THAT(r.out, HasSubstr("  - --gpus auto:"));
  EXPECT_THAT(r.out, HasSubstr("  - --checkpointing:"));
  EXPECT_THAT(r.out, HasSubstr("  - --lora_rank 16 (LoRA"));
  EXPECT_THAT(r.out, HasSubstr("--quant_base nf4 too (QLoRA"));
  // Batch 512's device upper bound x 1.15 (49.87 x 1.15 = 57.35 GB) is over
  // 48 and under 80 GB.
  EXPECT_THAT(r.out, HasSubstr("a larger card: batch 512 needs "));
  EXPECT_THAT(r.out, HasSubstr("A100-80GB, A800, H100 (80 GB)"));
  EXPECT_THAT(r.out,
              HasSubstr("L4: batch 512 as --grad_accum 2 (2 microbatches of "
                        "256), or --batch 293"));
  EXPECT_THAT(r.out,
              HasSubstr("16 GB: batch 512 as --grad_accum 4 (4 microbatches "
                        "of 128), or --batch 192"));
  // Finding: "card constant -0.00 GB": L4's constant rounds to zero.
  EXPECT_THAT(r.out, Not(HasSubstr("-0.00")));
  EXPECT_THAT(r.out, HasSubstr("anchored; card constant 0.00 GB"));
  // Finding: "eager (1 layers ...)".
  EXPECT_THAT(r.out, HasSubstr("eager (1 layer; probabilities saved)"));
  // Answered with checkpointing and LoRA, neither is suggested again.
  const Result set = Headroom(
      {"fit", "--model", "bert-base", "--batch", "512", "--gpu", "16",
       "--checkpointing", "--lora_rank", "8", "--lora_targets", "all-linear"},
      Server());
  ASSERT_EQ(set.code, 0) << set.err;
  if (set.out.find("to try") != std::string::npos) {
    EXPECT_THAT(set.out, Not(HasSubstr("  - --checkpointing:")));
    EXPECT_THAT(set.out, Not(HasSubstr("  - --lora_rank 16")));
  }
  // FITS everywhere: nothing to try.
  const Result fits = Headroom(
      {"fit", "--model", "bert-base", "--batch", "32", "--gpu", "H100"},
      Server());
  ASSERT_EQ(fits.code, 0) << fits.err;
  EXPECT_THAT(fits.out, Not(HasSubstr("to try")));
}

// The larger card is the smallest catalog card holding the device upper
// bound x headroom: 30 x 1.15 = 34.5 GB -> A100-40GB (40 GB; the 32 GB
// V100-32GB and RTX 5090 are too small); 200 x 1.15 = 230 GB: none (the
// largest, MI300X, has 192).
TEST(FitAdviceTest, TheSmallestCardThatHoldsTheBatch) {
  v1::CheckFitRequest request;
  request.add_batches(8);
  request.add_batches(64);
  request.mutable_setup()->set_activation_checkpointing(true);
  request.mutable_setup()->mutable_lora()->set_rank(8);
  request.mutable_setup()->set_gpus(4);
  v1::CheckFitResponse response;
  response.set_headroom(1.15);
  response.add_estimates()->set_batch(8);
  response.add_estimates()->set_batch(64);
  v1::TargetResult* t = response.add_targets();
  t->set_name("L4");
  t->set_memory_gb(24);
  t->add_verdicts(v1::FITS);
  t->add_verdicts(v1::DOES_NOT_FIT);
  t->add_batches()->mutable_figures()->set_device_upper_gb(4);
  t->add_batches()->mutable_figures()->set_device_upper_gb(30);
  t->set_max_batch_fits(0);
  std::vector<std::string> steps = NextSteps(request, response);
  ASSERT_EQ(steps.size(), 1u) << ::testing::PrintToString(steps);
  EXPECT_EQ(steps[0],
            "a larger card: batch 64 needs 34.50 GB (device upper 30.00 GB x "
            "headroom 1.15); the smallest catalog card that holds it: "
            "A100-40GB (40 GB) (headroom gpus)");
  t->mutable_batches(1)->mutable_figures()->set_device_upper_gb(200);
  steps = NextSteps(request, response);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0],
            "no catalog card holds batch 64 on one GPU: it needs 230.00 GB "
            "(device upper 200.00 GB x headroom 1.15)");
  t->set_verdicts(1, v1::FITS);
  EXPECT_TRUE(NextSteps(request, response).empty());
}

TEST(FitOutputFindingsTest, NoNegativeZeroAndColumnsFromTheirValues) {
  EXPECT_EQ(SignedGb(-0.001), "0.00");
  EXPECT_EQ(SignedGb(-0.004999), "0.00");
  EXPECT_EQ(SignedGb(0.02), "+0.02");
  EXPECT_EQ(SignedGb(-0.31), "-0.31");
  // A 70B model's figures: each column as wide as its widest cell, two
  // spaces apart, so no two figures touch.
  v1::CheckFitResponse r;
  v1::BatchEstimate* e = r.add_estimates();
  e->set_batch(1024);
  e->set_peak_gb(12345.67);
  e->set_upper_gb(23456.78);
  e->mutable_components()->set_optimizer(1120.5);
  e->set_moment("backward start");
  std::ostringstream out;
  PrintFit(r, false, out);
  EXPECT_THAT(out.str(), HasSubstr("batch   peak GB  upper GB  optimizer"));
  EXPECT_THAT(out.str(), HasSubstr(" 1024  12345.67  23456.78    1120.50"));
}

// Finding: negative input shown as 18446744073709551611.
TEST(CliFindingsTest, NegativeValuesOfUnsignedOptionsAreRefused) {
  Result r = Headroom({"fit", "--model", "bert-base", "--batch", "8", "--gpu",
                       "L4", "--positions", "-5"});
  EXPECT_EQ(r.code, 2);
  // A setup flag: the setup vocabulary's range.
  EXPECT_THAT(r.err,
              HasSubstr("--positions '-5' is invalid; allowed 0..4294967296"));
  EXPECT_THAT(r.err, Not(HasSubstr("18446744073709551611")));
  r = Headroom({"microbatch", "plan", "--model", "gpt2", "--gpu", "L4",
                "--global_batch", "-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("--global_batch '-1' is invalid; allowed 1..1048576"));
  r = Headroom({"probe", "submit", "--model", "gpt2", "--gpu", "L4", "--batch",
                "4", "--steps", "-3"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--steps '-3' is invalid"));
}

// Finding: "--x is required" / "At Most 1 required" for a flag given twice.
TEST(CliFindingsTest, AFlagGivenTwiceIsSaidSo) {
  const Result r = Headroom({"fit", "--model", "bert-base", "--batch", "8",
                             "--batch", "16", "--gpu", "L4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--batch given 2 times ('8', '16'); give it "
                               "once"));
}

// Finding: help defaults printed as "=0" with "(default 8)" / "(0 = 3)".
TEST(CliFindingsTest, HelpShowsTheRealDefault) {
  const Result r = Headroom({"probe", "submit", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("--steps UINT=3"));
  EXPECT_THAT(r.out, HasSubstr("--warmup UINT=1"));
  EXPECT_THAT(r.out, Not(HasSubstr("(0 = 3)")));
  const Result fit = Headroom({"fit", "--help"});
  EXPECT_THAT(fit.out, Not(HasSubstr("--coverage FLOAT=0")));
}

// Finding: errors naming proto fields instead of the flag and the file.
TEST(FlagErrorsTest, FieldPathsAreNamedAsFlagsAndFiles) {
  Options options;
  options.model = "/some/dir/absurd.json";
  EXPECT_EQ(FlagsForFieldPaths("setup.lora.targets[0] = 'zz' is not allowed; "
                               "allowed q, k",
                               options),
            "--lora_targets 'zz' is not allowed; allowed q, k");
  EXPECT_EQ(FlagsForFieldPaths("model.hf_config: config.json: hidden_size = "
                               "-1 is out of range; allowed 1..1000000",
                               options),
            "--model absurd.json: hidden_size = -1 is out of range; allowed "
            "1..1000000");
  EXPECT_EQ(FlagsForFieldPaths("batches[1] = 7 is not a multiple of "
                               "setup.grad_accum = 2",
                               options),
            "--batch 7 is not a multiple of setup.grad_accum = 2");
  EXPECT_EQ(FlagsForFieldPaths("setup.positions = 9 is out of range", options),
            "--positions 9 is out of range");
  EXPECT_EQ(FlagsForFieldPaths("context = 9 is out of range", options),
            "--positions 9 is out of range");
  EXPECT_EQ(FlagsForFieldPaths("expires_s = 9999999 is out of range; "
                               "allowed 0..2592000 seconds",
                               options),
            "--expires_s 9999999 is out of range; allowed 0..2592000 seconds");
  EXPECT_EQ(FlagsForFieldPaths("probe 'p-9' is not stored", options),
            "probe 'p-9' is not stored");
}

TEST_F(FindingsWithPlanner, ThePlannersFieldPathsReachTheUserAsFlags) {
  const std::string path = ::testing::TempDir() + "/absurd.json";
  {
    std::ofstream file(path);
    file << R"({"model_type": "llama", "hidden_size": -1})";
  }
  Result r = Headroom({"fit", "--model", path, "--batch", "8", "--gpu", "L4"},
                      Server());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("headroom: --model absurd.json: hidden_size"));
  EXPECT_THAT(r.err, Not(HasSubstr("model.hf_config")));
  std::remove(path.c_str());
  // A word the vocabulary lacks is refused before asking; a combination
  // only the planner checks comes back named by the flag.
  r = Headroom({"fit", "--model", "bert-base", "--batch", "8", "--gpu", "L4",
                "--lora_rank", "8", "--lora_targets", "zz"},
               Server());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("headroom: --lora_targets 'zz' is unknown; "
                               "allowed q, k, v, o"));
  r = Headroom({"fit", "--model", "bert-base", "--batch", "8", "--gpu", "L4",
                "--lora_targets", "q,v"},
               Server());
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("headroom: --lora_rank 0 is not allowed"));
  EXPECT_THAT(r.err, Not(HasSubstr("setup.")));
}

// Finding: --include_simulated silently unused.
TEST_F(FindingsWithPlanner, IncludeSimulatedSaysWhenItChangedNothing) {
  const Result r = Headroom({"fit", "--model", "bert-base", "--batch", "32",
                             "--gpu", "L4", "--include_simulated"},
                            Server());
  ASSERT_EQ(r.code, 0) << r.err;
  // bert-base is anchored on the shipped reference runs.
  EXPECT_THAT(r.out, HasSubstr("--include_simulated changed nothing: "
                               "measured runs (reference)"));
}

// Finding: --include_simulated silently unused (energy plot --offline drew
// a runs file's simulated runs with or without it).
TEST(CliFindingsTest, OfflinePlotDrawsSimulatedRunsOnlyWhenAsked) {
  const std::string runs = ::testing::TempDir() + "/sim-plot-runs.jsonl";
  {
    std::ofstream file(runs);
    for (const char* quant : {"fp16", "nf4"}) {
      file << R"({"model":"m","params_b":7,"gpu":"A100-80GB","quant":")"
           << quant
           << R"(","tokens_generated":1000,"energy_j":100,"idle_w":0,)"
              R"("window_s":1,"simulated":true})"
           << "\n";
    }
  }
  const Result without = Headroom(
      {"energy", "plot", "--arch", "ampere", "--offline", "--runs", runs});
  ASSERT_EQ(without.code, 0) << without.err;
  EXPECT_THAT(without.out, Not(HasSubstr("class=\"measured\"")));
  const Result with =
      Headroom({"energy", "plot", "--arch", "ampere", "--offline", "--runs",
                runs, "--include_simulated"});
  ASSERT_EQ(with.code, 0) << with.err;
  EXPECT_THAT(with.out, HasSubstr("class=\"measured\""));
  std::remove(runs.c_str());
}

// Finding: --positions and --context, --attention and --attention_backend
// both accepted and one silently ignored.
TEST(CliFindingsTest, OldMicrobatchNamesMustAgreeWithTheSetups) {
  Result r = Headroom({"microbatch", "plan", "--model", "gpt2", "--gpu", "L4",
                       "--global_batch", "8", "--context", "512", "--positions",
                       "1024"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--context 512 and --positions 1024 differ"));
  r = Headroom({"microbatch", "plan", "--model", "gpt2", "--gpu", "L4",
                "--global_batch", "8", "--attention_backend", "eager",
                "--attention", "sdpa"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--attention_backend eager and --attention sdpa "
                               "differ"));
}

// Finding: microbatch plan and fit giving different peaks for the same
// model, card and batch: the plan says why.
TEST_F(FindingsWithPlanner, MicrobatchPlanSaysWhyItIsNotFit) {
  const Result r = Headroom(
      {"microbatch", "plan", "--model", "gpt2", "--gpu", "L4", "--global_batch",
       "64", "--candidates", "8,16", "--positions", "512"},
      Server());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("headroom fit answers another question"));
  EXPECT_THAT(r.out, HasSubstr("the allocator's peak"));
}

// Finding: microbatch select naming neither model nor GPU; GiB mid-output.
// The record's budget 92.5217 GiB x 1.073741824 = 99.34 GB; its selected
// peak 89.3779 GiB = 95.97 GB; total_memory 101975851008 bytes = 101.98 GB.
TEST(MicrobatchFindingsTest, SelectNamesGpuAndModelInGb) {
  std::ostringstream out, err;
  ASSERT_EQ(MicrobatchSelect(kRoot + "/data/microbatch-autotune.json", "",
                             /*json=*/false, out, err),
            0)
      << err.str();
  EXPECT_THAT(out.str(),
              HasSubstr("GPU NVIDIA RTX PRO 6000 Blackwell Server Edition "
                        "(101.98 GB); model source sha256 d52752a64023..."));
  EXPECT_THAT(out.str(), HasSubstr("budget 99.34 GB"));
  EXPECT_THAT(out.str(), HasSubstr("peak 95.97 GB"));
  EXPECT_THAT(out.str(), Not(HasSubstr("GiB")));
}

// Finding: probe cancel on a finished probe reporting success.
TEST_F(FindingsWithPlanner, CancellingAFinishedProbeSaysSo) {
  const Result submitted = Headroom({"probe", "submit", "--model", "gpt2",
                                     "--gpu", "L4", "--batch", "4", "--json"},
                                    Server());
  ASSERT_EQ(submitted.code, 0) << submitted.err;
  v1::Probe probe;
  ASSERT_TRUE(ParseJson(submitted.out, "stdout", true, &probe).ok());
  const Result first = Headroom({"probe", "cancel", probe.id()}, Server());
  EXPECT_EQ(first.code, 0) << first.err;
  EXPECT_THAT(first.out, HasSubstr(" cancelled "));
  const Result again = Headroom({"probe", "cancel", probe.id()}, Server());
  EXPECT_EQ(again.code, 1);
  EXPECT_THAT(again.err, HasSubstr("had already been cancelled; nothing to "
                                   "cancel"));
}

// Finding: calib show and factors show dumping the same JSON with a raw
// epoch.
TEST_F(FindingsWithPlanner, CalibShowAndFactorsShowShowTheirOwnThing) {
  const Result calib = Headroom({"calib", "show"}, Server());
  ASSERT_EQ(calib.code, 0) << calib.err;
  EXPECT_THAT(calib.out, HasSubstr("factor set fs-1 (the current one), "
                                   "created 20"));
  EXPECT_THAT(calib.out, HasSubstr("column               runs"));
  EXPECT_THAT(calib.out, Not(HasSubstr("createdUnix")));
  const Result factors = Headroom({"factors", "show"}, Server());
  ASSERT_EQ(factors.code, 0) << factors.err;
  EXPECT_THAT(factors.out, HasSubstr("factors: optimizer "));
  EXPECT_THAT(factors.out, Not(HasSubstr("column               runs")));
  EXPECT_NE(calib.out, factors.out);
  const Result page = Headroom({"calib", "show", "--json"}, Server());
  v1::CalibrationPage parsed_page;
  EXPECT_TRUE(ParseJson(page.out, "stdout", false, &parsed_page).ok());
  const Result set = Headroom({"factors", "show", "--json"}, Server());
  v1::FactorSet parsed_set;
  EXPECT_TRUE(ParseJson(set.out, "stdout", false, &parsed_set).ok());
  EXPECT_EQ(parsed_set.version(), "fs-1");
}

// Finding: model inspect without the per-kind breakdown, saying seq_len.
TEST(CliFindingsTest, ModelInspectBreaksStatesDownByKind) {
  const Result r = Headroom({"model", "inspect", "llama-3.2-1b"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("model states (GB): weights "));
  EXPECT_THAT(r.out, HasSubstr(", gradients "));
  EXPECT_THAT(r.out, HasSubstr(", optimizer state "));
  // 1,235,814,400 parameters, all trained in a full fine-tuning.
  EXPECT_THAT(r.out, HasSubstr("parameters: 1235814400 trainable, 0 frozen"));
  EXPECT_THAT(r.out, Not(HasSubstr("seq_len")));
  EXPECT_THAT(r.out, HasSubstr("set --positions to change"));
}

// Finding: density rank's jargon unexplained.
TEST(CliFindingsTest, DensityRankExplainsItsColumns) {
  const Result help = Headroom({"density", "rank", "--help"});
  EXPECT_THAT(help.out, HasSubstr("lpd (learning per density)"));
  const Result r = Headroom(
      {"density", "rank", "--runs", kRoot + "/data/density-leaderboard.json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Columns: rel_acc", 0), 0u);
}

// Finding: energy takes no --model. llama-3.1-8b has 8,030,261,248
// parameters: 8.03B.
TEST(CliFindingsTest, EnergyTakesACatalogModel) {
  const Result r = Headroom({"energy", "--model", "llama-3.1-8b", "--gpu", "L4",
                             "--quant", "nf4", "--offline"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("nf4 at 8.03B (L4)"));
  const Result both =
      Headroom({"energy", "--model", "llama-3.1-8b", "--params_b", "7", "--gpu",
                "L4", "--quant", "nf4", "--offline"});
  EXPECT_EQ(both.code, 2);
}

// Finding: the energy refit step dead-ending on "needs at least 3 points".
TEST(CliFindingsTest, ARefitShortOfPointsSaysWhereTheyComeFrom) {
  const std::string path = ::testing::TempDir() + "/two-sizes.jsonl";
  {
    std::ofstream runs(path);
    for (double n : {1.1, 3.0}) {
      for (const char* quant : {"fp16", "nf4"}) {
        runs << "{\"model\":\"m\",\"params_b\":" << n
             << ",\"gpu\":\"RTX 5090\",\"quant\":\"" << quant
             << "\",\"tokens_generated\":2000,\"energy_j\":3000,"
                "\"idle_w\":40,\"window_s\":10}\n";
      }
    }
  }
  const Result r = Headroom({"energy", "refit", "--runs", path, "--offline"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("needs at least 3"));
  EXPECT_THAT(r.err, HasSubstr("headroom energy probe --model MODEL"));
  std::remove(path.c_str());
}

// Finding: NOT_FOUND: prefixes on some errors only.
TEST(CliFindingsTest, OneErrorFormat) {
  const Result r =
      Headroom({"calib", "page", "--runs", "/nonexistent/runs.jsonl"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("headroom: ", 0), 0u) << r.err;
  EXPECT_THAT(r.err, Not(HasSubstr("NOT_FOUND")));
}

// Finding: headroom models without digit grouping, inconsistent families.
TEST(CliFindingsTest, ModelsGroupDigitsAndShareFamilies) {
  const Result r = Headroom({"models"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("1,235,814,400"));
  // gpt2 (cut down) and gpt2-124m are one family.
  std::istringstream lines(r.out);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("gpt2 ", 0) == 0) {
      EXPECT_THAT(line, HasSubstr("  transformer; cut-down")) << line;
    }
  }
}

// Finding: bytes in workers --json where the README says GB.
TEST(CliFindingsTest, WorkersJsonHasGb) {
  v1::ListWorkersResponse response;
  v1::WorkerHello* hello = response.add_workers()->mutable_hello();
  hello->set_host_memory_bytes(68719476736);         // 64 GiB = 68.72 GB
  hello->add_gpus()->set_memory_bytes(24152899584);  // an L4: 24.15 GB
  const nlohmann::json json = WorkersJson(response);
  EXPECT_DOUBLE_EQ(json["workers"][0]["hello"]["hostMemoryGb"], 68.72);
  EXPECT_DOUBLE_EQ(json["workers"][0]["hello"]["gpus"][0]["memoryGb"], 24.15);
}

}  // namespace
}  // namespace headroom::cli
