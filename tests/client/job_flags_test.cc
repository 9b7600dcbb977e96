#include "client/job_flags.h"

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/rpc.h"
#include "client/setup_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kRecipe =
    std::string(HEADROOM_SOURCE_DIR) +
    "/tests/data/jobs/torchtune-llama3_1-8B_lora_single_device.yaml";

// `fit --job FILE --lora_rank 64 --gpu H100`: the file's bytes go in
// request.job, the setup flag given beside it in job.overrides, and neither
// --model nor --batch is needed.
TEST(JobFlagsTest, JobFileAndGivenSetupFlagsGoInTheRequest) {
  CLI::App app;
  Options options;
  AddSetupFlags(&app, options);
  AddJobFlags(&app, options);
  app.add_option("--gpu", options.gpu);
  std::vector<std::string> args = {"--gpu", "H100",  "--lora_rank",
                                   "64",    "--job", kRecipe};
  std::reverse(args.begin(), args.end());  // CLI11 parses a reversed vector
  app.parse(args);
  options.job_overrides = GivenSetupFields(options);
  EXPECT_THAT(options.job_overrides, ElementsAre("lora.rank"));

  absl::StatusOr<v1::CheckFitRequest> request = FitRequest(options);
  ASSERT_TRUE(request.ok()) << request.status();
  absl::StatusOr<std::string> bytes = ReadFile(kRecipe);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(request->job().job().name(), kRecipe);
  EXPECT_EQ(request->job().job().content(), *bytes);
  EXPECT_EQ(request->job().job().kind(), v1::JobFile::KIND_UNSPECIFIED);
  EXPECT_THAT(request->job().overrides(), ElementsAre("lora.rank"));
  EXPECT_EQ(request->setup().lora().rank(), 64u);
  EXPECT_FALSE(request->has_model());
  EXPECT_TRUE(request->batches().empty());
}

TEST(JobFlagsTest, ErrorsNameTheFlagAndTheFile) {
  Options options;
  options.gpu = "H100";
  options.job = "/nonexistent/job.yaml";
  absl::StatusOr<v1::CheckFitRequest> request = FitRequest(options);
  EXPECT_EQ(request.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(request.status().message(),
              HasSubstr("--job /nonexistent/job.yaml"));
  options.job = kRecipe;
  options.job_kind = "nemo";
  request = FitRequest(options);
  EXPECT_THAT(request.status().message(),
              HasSubstr("--job_kind nemo is not known; allowed litgpt, "
                        "torchtune, axolotl, trl, training-args"));
  options.job.clear();
  options.job_kind.clear();
  options.model = "llama-3.1-8b";
  options.batch = "8";
  options.deepspeed = "ds.json";
  request = FitRequest(options);
  EXPECT_THAT(request.status().message(),
              HasSubstr("--deepspeed, --accelerate_config and --job_kind go "
                        "with --job FILE"));
}

TEST(JobFlagsTest, PrintsTheDerivation) {
  v1::JobDerivation job;
  job.set_kind(v1::JobFile::TORCHTUNE);
  job.set_model_id("llama3_1_8b");
  job.set_model("llama-3.1-8b");
  job.set_micro_batch(2);
  job.set_batch(16);
  job.add_from_file("r.yaml: batch_size = 2 -> micro-batch");
  job.add_overridden("setup.lora.rank");
  std::ostringstream out;
  PrintJob(job, out);
  EXPECT_EQ(out.str(),
            "job: TORCHTUNE, model llama3_1_8b -> llama-3.1-8b, micro-batch 2, "
            "step batch 16 per GPU\n"
            "  from file: r.yaml: batch_size = 2 -> micro-batch\n"
            "  overridden: setup.lora.rank\n");
}

}  // namespace
}  // namespace headroom::cli
