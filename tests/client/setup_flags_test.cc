// The setup flags of issue 31 item 4, parsed as users type them and turned
// into the API's TrainingSetup.

#include "client/setup_flags.h"

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "core/setup/setup_words.h"
#include "gtest/gtest.h"

namespace headroom::cli {
namespace {

using v1::TrainingSetup;

// The setup `args` give, or the FillSetup error's message in `error`.
TrainingSetup Parse(std::vector<std::string> args, std::string* error) {
  CLI::App app;
  Options options;
  AddSetupFlags(&app, options);
  args.insert(args.begin(), "headroom");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), argv.data());
  TrainingSetup setup;
  const absl::Status s = FillSetup(options, &setup);
  if (error != nullptr) *error = std::string(s.message());
  return setup;
}

TEST(SetupFlagsTest, CheckpointingBareFullOrSelective) {
  std::string error;
  // A bare --checkpointing stays what it always was: the old bool, FULL.
  TrainingSetup bare =
      Parse({"--checkpointing", "--activation_offloading"}, &error);
  EXPECT_EQ(error, "");
  EXPECT_TRUE(bare.activation_checkpointing());
  EXPECT_EQ(bare.checkpointing(), TrainingSetup::CHECKPOINTING_UNSPECIFIED);
  EXPECT_TRUE(bare.activation_offloading());
  TrainingSetup full = Parse({"--checkpointing", "full"}, &error);
  EXPECT_TRUE(full.activation_checkpointing());
  TrainingSetup none = Parse({"--checkpointing", "none"}, &error);
  EXPECT_FALSE(none.activation_checkpointing());
  TrainingSetup selective = Parse(
      {"--checkpointing", "selective", "--checkpoint_every", "2"}, &error);
  EXPECT_EQ(selective.checkpointing(), TrainingSetup::SELECTIVE);
  EXPECT_EQ(selective.checkpoint_every(), 2u);
  EXPECT_FALSE(selective.activation_checkpointing());
  Parse({"--checkpointing", "some"}, &error);
  EXPECT_EQ(error,
            "--checkpointing 'some' is unknown; allowed none, full, selective");
}

TEST(SetupFlagsTest, LossOptimizersOffloadAndLoraTargets) {
  std::string error;
  TrainingSetup setup =
      Parse({"--loss", "chunked-ce", "--loss_chunks", "16", "--optimizer",
             "adam4bit", "--offload", "optimizer,gradients", "--lora_rank", "8",
             "--lora_targets", "q,v,lm_head,embed"},
            &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(setup.loss(), TrainingSetup::CHUNKED_CE);
  EXPECT_EQ(setup.loss_chunks(), 16u);
  EXPECT_EQ(setup.optimizer(), TrainingSetup::ADAM4BIT);
  EXPECT_EQ(setup.offload(), TrainingSetup::OPTIMIZER_GRADIENTS);
  ASSERT_EQ(setup.lora().targets_size(), 4);
  EXPECT_EQ(setup.lora().targets(2), "lm_head");
  EXPECT_EQ(setup.lora().targets(3), "embed");
  EXPECT_EQ(Parse({"--optimizer", "paged-adamw"}, &error).optimizer(),
            TrainingSetup::PAGED_ADAMW);
  EXPECT_EQ(Parse({"--optimizer", "adamfp8"}, &error).optimizer(),
            TrainingSetup::ADAMFP8);
  Parse({"--loss", "chunked"}, &error);
  EXPECT_EQ(error, "--loss 'chunked' is unknown; allowed chunked-ce, full-ce");
}

// Every key of the setup vocabulary is a flag, and every word of it sets
// what the vocabulary says: a word the CLI lacks fails here. The
// extender's annotations and the Python client are checked the same way
// (extender_test, tests/python).
TEST(SetupFlagsTest, EveryVocabularyWordIsAFlag) {
  int checked = 0;
  for (const SetupKey& key : SetupVocabulary()) {
    CLI::App app;
    Options options;
    AddSetupFlags(&app, options);
    ASSERT_NE(app.get_option_no_throw(key.Flag()), nullptr) << key.Flag();
    std::vector<std::string> values;
    for (const SetupWord& w : key.words) values.push_back(w.word);
    if (key.type == SetupKeyType::kUint) {
      values.push_back(absl::StrCat(static_cast<uint64_t>(key.min)));
    } else if (key.type == SetupKeyType::kNumber) {
      values.push_back("0.25");
    } else if (key.type == SetupKeyType::kString) {
      values.push_back("1.2.3");
    }
    for (const std::string& value : values) {
      std::string error;
      const v1::TrainingSetup setup = Parse({key.Flag(), value}, &error);
      EXPECT_EQ(error, "") << key.Flag() << " " << value;
      v1::TrainingSetup expected;
      SetupExtras extras;
      ASSERT_TRUE(
          ApplySetupValue(key, value, key.Flag(), &expected, &extras).ok());
      EXPECT_EQ(setup.SerializeAsString(), expected.SerializeAsString())
          << key.Flag() << " " << value;
      ++checked;
    }
    if (key.type == SetupKeyType::kBool) {
      std::string error;
      const v1::TrainingSetup setup = Parse({key.Flag()}, &error);
      EXPECT_EQ(error, "");
      EXPECT_NE(setup.SerializeAsString(), "") << key.Flag();
      ++checked;
    }
  }
  EXPECT_GT(checked, 70);
}

// Flags not given are not sent: the planner assumes them and says so.
TEST(SetupFlagsTest, OnlyTheFlagsGivenAreSent) {
  std::string error;
  const TrainingSetup none = Parse({}, &error);
  EXPECT_EQ(error, "");
  EXPECT_EQ(none.precision(), TrainingSetup::PRECISION_UNSPECIFIED);
  EXPECT_EQ(none.optimizer(), TrainingSetup::OPTIMIZER_UNSPECIFIED);
  EXPECT_EQ(none.SerializeAsString(), "");
  // A negative count is refused as typed (CLI11 would wrap it).
  Parse({"--grad_accum", "-3"}, &error);
  EXPECT_EQ(error, "--grad_accum '-3' is invalid; allowed 0..1024");
}

}  // namespace
}  // namespace headroom::cli
