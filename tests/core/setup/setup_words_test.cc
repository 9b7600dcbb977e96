// The setup vocabulary (core/setup/setup_words.h): every word reaches the
// TrainingSetup field it names, ranges and lists are checked, and the
// generated tables checked in beside the Python client and in docs/ are
// what the vocabulary generates now.

#include "core/setup/setup_words.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "io/files.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

TEST(SetupWordsTest, TheCheckedInTablesAreWhatTheVocabularyGenerates) {
  absl::StatusOr<std::string> json =
      ReadFile(kRoot + "/client/python/headroom_client/setup_words.json");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, SetupVocabularyJson() + "\n")
      << "regenerate: build/client/headroom setup-words --json > "
         "client/python/headroom_client/setup_words.json";
  absl::StatusOr<std::string> docs = ReadFile(kRoot + "/docs/setup-words.md");
  ASSERT_TRUE(docs.ok()) << docs.status();
  EXPECT_NE(docs->find(SetupVocabularyMarkdown()), std::string::npos)
      << "regenerate the table in docs/setup-words.md: build/client/headroom "
         "setup-words";
}

TEST(SetupWordsTest, NamesAreUniqueOnEverySurface) {
  std::set<std::string> names, flags, annotations;
  for (const SetupKey& key : SetupVocabulary()) {
    EXPECT_TRUE(names.insert(key.name).second) << key.name;
    EXPECT_TRUE(flags.insert(key.Flag()).second) << key.Flag();
    EXPECT_TRUE(annotations.insert(key.Annotation()).second)
        << key.Annotation();
    EXPECT_EQ(FindSetupKey(key.name), &key);
    EXPECT_EQ(FindSetupKey(key.Annotation().substr(13)), &key);
  }
  EXPECT_EQ(FindSetupKey("colour"), nullptr);
}

// Each word sets its field (by reflection, so a field path the proto lacks
// fails here), each to a value different from an unset setup.
TEST(SetupWordsTest, EveryWordSetsItsField) {
  const std::string unset = v1::TrainingSetup().SerializeAsString();
  for (const SetupKey& key : SetupVocabulary()) {
    for (const SetupWord& word : key.words) {
      v1::TrainingSetup setup;
      SetupExtras extras;
      absl::Status status =
          ApplySetupValue(key, word.word, key.Flag(), &setup, &extras);
      ASSERT_TRUE(status.ok())
          << key.name << " " << word.word << ": " << status;
      if (word.request == "min_gpus") {
        EXPECT_TRUE(extras.min_gpus);
      } else {
        EXPECT_NE(setup.SerializeAsString(), unset)
            << key.name << " " << word.word;
      }
    }
  }
}

TEST(SetupWordsTest, NumbersAreCheckedAgainstTheirRange) {
  const SetupKey& rank = *FindSetupKey("lora_rank");
  v1::TrainingSetup setup;
  SetupExtras extras;
  ASSERT_TRUE(
      ApplySetupValue(rank, "4096", "--lora_rank", &setup, &extras).ok());
  EXPECT_EQ(setup.lora().rank(), 4096u);
  // A negative number is refused as typed, never wrapped to 2^64 - 5.
  absl::Status negative =
      ApplySetupValue(rank, "-5", "--lora_rank", &setup, &extras);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.message(), "--lora_rank '-5' is invalid; allowed 0..4096");
  EXPECT_FALSE(
      ApplySetupValue(rank, "4097", "--lora_rank", &setup, &extras).ok());
  const SetupKey& dropout = *FindSetupKey("lora_dropout");
  EXPECT_TRUE(
      ApplySetupValue(dropout, "0.1", "lora_dropout", &setup, &extras).ok());
  EXPECT_EQ(
      ApplySetupValue(dropout, "1", "lora_dropout", &setup, &extras).message(),
      "lora_dropout '1' is invalid; allowed 0 <= p < 1");
  const SetupKey& gpus = *FindSetupKey("gpus");
  EXPECT_EQ(ApplySetupValue(gpus, "0", "--gpus", &setup, &extras).message(),
            "--gpus '0' is invalid; allowed 1..512 or auto");
  const SetupKey& compile = *FindSetupKey("compile");
  EXPECT_EQ(ApplySetupValue(compile, "maybe", "annotation headroom.dev/compile",
                            &setup, &extras)
                .message(),
            "annotation headroom.dev/compile 'maybe' is invalid; allowed "
            "true, false");
}

TEST(SetupWordsTest, ListsTakeEachWordOnce) {
  const SetupKey& targets = *FindSetupKey("lora_targets");
  v1::TrainingSetup setup;
  SetupExtras extras;
  ASSERT_TRUE(ApplySetupValue(targets, "q, v,lm_head", "--lora_targets", &setup,
                              &extras)
                  .ok());
  ASSERT_EQ(setup.lora().targets_size(), 3);
  EXPECT_EQ(setup.lora().targets(2), "lm_head");
  EXPECT_EQ(ApplySetupValue(targets, "q,wq", "--lora_targets", &setup, &extras)
                .message(),
            "--lora_targets 'wq' is unknown; allowed q, k, v, o, gate, up, "
            "down, all-linear, lm_head, embed");
  const SetupKey& phases = *FindSetupKey("phases");
  EXPECT_EQ(
      ApplySetupValue(phases, "step,eval,step", "--phases", &setup, &extras)
          .message(),
      "--phases names 'step' twice; give each at most once");
}

// A planner error names a field path; the vocabulary turns it back into
// the word the user typed.
TEST(SetupWordsTest, AFieldPathNamesItsKey) {
  ASSERT_NE(SetupKeyForField("lora.targets[0]"), nullptr);
  EXPECT_EQ(SetupKeyForField("lora.targets[0]")->Flag(), "--lora_targets");
  EXPECT_EQ(SetupKeyForField("lora.rank")->Flag(), "--lora_rank");
  EXPECT_EQ(SetupKeyForField("grad_accum")->Annotation(),
            "headroom.dev/grad-accum");
  EXPECT_EQ(SetupKeyForField("gpus_per_node")->name, "gpus_per_node");
  EXPECT_EQ(SetupKeyForField("weights"), nullptr);
}

}  // namespace
}  // namespace headroom
