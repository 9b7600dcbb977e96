#include "client/cli.h"

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/cli_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Result {
  int code;
  std::string out;
  std::string err;
};

// Runs `headroom ARGS...` in-process against a port nothing listens on.
Result RunHeadroom(std::vector<std::string> args) {
  args.insert(args.begin(), "headroom");
  args.push_back("--server=127.0.0.1:1");
  args.push_back("--deadline_ms=2000");
  args.push_back(std::string("--models_dir=") + HEADROOM_SOURCE_DIR +
                 "/models");
  std::ostringstream out, err;
  const int code = RunCli(args, out, err);
  return {code, out.str(), err.str()};
}

TEST(ClosestMatchTest, NamesTheNearestWord) {
  EXPECT_EQ(ClosestMatch("fitt", {"fit", "gpus", "models"}), "fit");
  EXPECT_EQ(ClosestMatch("--bathc", {"--batch", "--gpu"}), "--batch");
  EXPECT_EQ(ClosestMatch("zzzzzz", {"fit", "gpus"}), "");
}

TEST(CliTest, UnknownCommandIsNamedWithTheClosest) {
  const Result r = RunHeadroom({"fitt"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown command 'fitt'"));
  EXPECT_THAT(r.err, HasSubstr("closest: fit"));
}

TEST(CliTest, UnknownFlagIsAUsageErrorNamingTheClosest) {
  const Result r = RunHeadroom({"fit", "--bathc", "8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bathc for 'headroom fit'"));
  EXPECT_THAT(r.err, HasSubstr("closest: --batch"));
}

TEST(CliTest, HelpAndDashHListTheCommandsFlagsAndExitZero) {
  for (const char* help : {"-h", "--help"}) {
    const Result top = RunHeadroom({help});
    EXPECT_EQ(top.code, 0) << help;
    EXPECT_THAT(top.out, HasSubstr("Exit codes: 0 an answer"));
    EXPECT_THAT(top.out, HasSubstr("--server TEXT=127.0.0.1:50051"));
    const Result fit = RunHeadroom({"fit", help});
    EXPECT_EQ(fit.code, 0) << help;
    EXPECT_THAT(fit.out, HasSubstr("Usage: headroom fit"));
    EXPECT_THAT(fit.out, HasSubstr("--precision WORD"));
    // The planner's default, said in words, not a bound variable's "=0".
    EXPECT_THAT(fit.out, HasSubstr("; default fp32\n"));
    EXPECT_THAT(fit.out,
                HasSubstr("--gpus_per_node N           GPUs per node"));
    EXPECT_THAT(fit.out, Not(HasSubstr("--params_b")));
    const Result watch = RunHeadroom({"probe", "watch", help});
    EXPECT_EQ(watch.code, 0);
    EXPECT_THAT(watch.out, HasSubstr("--watch_timeout_s INT=3600"));
  }
}

TEST(CliTest, AGroupWithoutItsCommandSaysWhichExist) {
  const Result r = RunHeadroom({"calib"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("needs a command: page, rows, show, eval"));
}

TEST(CliTest, AMissingModelFileSaysSoNamingModel) {
  const Result r = RunHeadroom(
      {"fit", "--model", "no/such.json", "--batch", "8", "--gpu", "L4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--model no/such.json: no such file"));
  EXPECT_THAT(r.err, Not(HasSubstr("closest")));
}

TEST(CliTest, AConfigWithoutModelTypeIsNeitherSpecNorHfConfig) {
  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR")
                                             : "/tmp") +
      "/cli_test_config.json";
  std::ofstream(path) << R"({"hidden_size": 768, "num_hidden_layers": 2})";
  const Result r =
      RunHeadroom({"fit", "--model", path, "--batch", "8", "--gpu", "L4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--model: " + path + " is not a model file"));
  EXPECT_THAT(r.err, HasSubstr("\"model_type\""));
  EXPECT_THAT(r.err, HasSubstr("\"layers\""));
  EXPECT_THAT(r.err, Not(HasSubstr("Cannot find field")));
}

TEST(CliTest, BadGpuValuesNameTheGpuFlag) {
  Result r =
      RunHeadroom({"fit", "--model", "gpt2", "--batch", "8", "--gpu", "0"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpu 0: a card size in GB must be in"));
  EXPECT_THAT(r.err, Not(HasSubstr("targets[0]")));
  r = RunHeadroom({"fit", "--model", "gpt2", "--batch", "8", "--gpu", "A100"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpu: GPU 'A100' is ambiguous: say "
                               "A100-40GB or A100-80GB"));
  r = RunHeadroom({"fit", "--model", "gpt2", "--batch", "8", "--gpu", "Q9000"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpu: GPU 'Q9000' is not in the catalog"));
}

TEST(CliTest, ABatchThatIsNotANumberSaysSo) {
  const Result r =
      RunHeadroom({"fit", "--model", "gpt2", "--batch", "abc", "--gpu", "L4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--batch 'abc' is not a number"));
}

TEST(CliTest, EnergyNamesItsFlags) {
  Result r = RunHeadroom(
      {"energy", "--gpu", "80", "--quant", "nf4", "--params_b", "7"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpu 80: energy needs a catalog GPU name"));
  r = RunHeadroom({"energy", "--gpu", "H100", "--quant", "nf4"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--params_b is required"));
  // Dashes are accepted as well as underscores.
  r = RunHeadroom({"energy", "--gpu", "H100", "--quant", "nf4", "--params-b",
                   "7", "--offline"});
  EXPECT_EQ(r.code, 0) << r.err;
  // Without --offline the planner answers: none listens here.
  r = RunHeadroom(
      {"energy", "--gpu", "H100", "--quant", "nf4", "--params-b", "7"});
  EXPECT_EQ(r.code, 3) << r.err;
}

// Issue 21: energy probe needs a placement; refit's server flags need
// --stored; both go to the planner once the flags are right.
TEST(CliTest, EnergyProbeAndStoredRefitCheckTheirFlags) {
  Result r = RunHeadroom({"energy", "probe", "--model", "gpt2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--gpu KIND (one catalog GPU, e.g. --gpu L4) "
                               "or --worker ID is required"));
  r = RunHeadroom(
      {"energy", "probe", "--model", "gpt2", "--gpu", "L4", "--worker", "w-1"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("not both"));
  r = RunHeadroom({"energy", "probe", "--model", "gpt2", "--gpu", "L4",
                   "--quant", "fp16,nf4", "--new_tokens", "64"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the planner"));
  r = RunHeadroom({"energy", "refit", "--include_simulated"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err,
              HasSubstr("--include_simulated and --force need --stored"));
  r = RunHeadroom({"energy", "refit", "--stored", "--runs", "x.jsonl"});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("--runs and --from_anchors refit a file"));
  r = RunHeadroom({"energy", "refit", "--stored", "--include_simulated"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the planner"));
}

TEST(CliTest, AnUnreachablePlannerExitsThree) {
  const Result r =
      RunHeadroom({"fit", "--model", "gpt2", "--batch", "8", "--gpu", "L4"});
  EXPECT_EQ(r.code, 3);
  EXPECT_THAT(r.err, HasSubstr("cannot reach the planner at 127.0.0.1:1"));
}

TEST(CliTest, CatalogsAreListed) {
  Result r = RunHeadroom({"gpus"});
  EXPECT_EQ(r.code, 0);
  EXPECT_THAT(r.out, HasSubstr("RTX 4090"));
  r = RunHeadroom({"models"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("bert-base"));
  EXPECT_THAT(r.out,
              HasSubstr("cut-down: reduced to 1 of its 12 encoder layers "
                        "(full model: bert-base-uncased)"));
  EXPECT_THAT(r.out, HasSubstr("full model: models/hf/llama-3.2-1b.json "
                               "(meta-llama/Llama-3.2-1B)"));
  r = RunHeadroom({"models", "--json"});
  EXPECT_THAT(r.out, HasSubstr("\"params\": 31120896"));
}

TEST(CliTest, CalibRowsJsonIsJson) {
  const Result r = RunHeadroom(
      {"calib", "rows", "--runs",
       std::string(HEADROOM_SOURCE_DIR) + "/data/memory-runs.jsonl", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out[0], '[');
  EXPECT_THAT(r.out, HasSubstr("\"heldoutGb\""));
}

// A family's registration: a command carries the connection and exit-code
// footer, runs what it was given, and a group without an action has none.
TEST(CliContextTest, RegistersCommandsAndTheirActions) {
  std::ostringstream out, err;
  CliContext ctx(out, err);
  CLI::App app{"test", "headroom"};
  CLI::App* group = ctx.Command(&app, "group", "a group");
  CLI::App* leaf = ctx.Command(group, "leaf", "a leaf");
  EXPECT_THAT(leaf->get_footer(), HasSubstr("Connection flags (--server"));
  EXPECT_THAT(leaf->get_footer(), HasSubstr("Exit codes: 0 an answer"));
  std::string& kept = ctx.Keep<std::string>();
  leaf->add_option("--name", kept, "a name");
  ctx.Run(leaf, [&ctx, &kept] {
    ctx.out << kept;
    return 7;
  });
  EXPECT_EQ(ctx.ActionOf(group), nullptr);
  // CLI11 takes the words last first: headroom group leaf --name x.
  std::vector<std::string> words = {"x", "--name", "leaf", "group"};
  app.parse(words);
  const std::function<int()>* action = ctx.ActionOf(leaf);
  ASSERT_NE(action, nullptr);
  EXPECT_EQ((*action)(), 7);
  EXPECT_EQ(out.str(), "x");
}

}  // namespace
}  // namespace headroom::cli
