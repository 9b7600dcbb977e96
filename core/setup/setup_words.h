#ifndef HEADROOM_CORE_SETUP_SETUP_WORDS_H_
#define HEADROOM_CORE_SETUP_SETUP_WORDS_H_

// The setup vocabulary: every training-setup key a user can give, with its
// words, the TrainingSetup field each word sets, its range, the default the
// planner assumes when it is not given, and its help. Defined once here;
// the CLI's flags (--lora_rank), the scheduler extender's annotations
// (headroom.dev/lora-rank) and the Python client's keywords (lora_rank) all
// read it, and `headroom setup-words --json` writes it for the Python
// client (client/python/headroom_client/setup_words.json, checked by
// setup_words_test to equal what this table generates).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

enum class SetupKeyType {
  kWord,     // one of `words`
  kWords,    // a comma list of `words` (a repeated enum)
  kUint,     // an integer in [min, max]
  kNumber,   // a decimal in [min, max)
  kBool,     // true or false (a bare flag: true)
  kStrings,  // a comma list of names (a repeated string), from `words`
             // when it has any
  kString,   // free text, at most 64 bytes
};

// One word a key takes. It sets the key's field to `value` (an enum number,
// or 1 for a boolean field), or `field` instead when set, or the request's
// `request` field (outside TrainingSetup: min_gpus).
struct SetupWord {
  std::string word;
  int value = 0;
  std::string field;
  std::string request;
};

struct SetupKey {
  // snake_case: the Python keyword, and the CLI flag without "--".
  std::string name;
  // TrainingSetup field path, dots into sub-messages ("lora.rank").
  std::string field;
  SetupKeyType type = SetupKeyType::kWord;
  double min = 0;
  double max = 0;
  // What the planner assumes when the key is not given, as text.
  std::string default_text;
  std::string help;
  std::vector<SetupWord> words;
  // The word a bare flag means (--checkpointing alone: full); empty when
  // the flag needs a value.
  std::string bare;

  std::string Flag() const;        // "--lora_rank"
  std::string Annotation() const;  // "headroom.dev/lora-rank"
  std::string TypeName() const;    // "word", "uint", ...
  // "fp32, bf16, fp16" or "1..512 or auto": what an error lists.
  std::string Allowed() const;
};

// Every key, in the order help lists them.
const std::vector<SetupKey>& SetupVocabulary();

// The key by name (snake_case), or by annotation suffix (kebab-case);
// nullptr when none.
const SetupKey* FindSetupKey(absl::string_view name);

// The key whose field is `field_path` or whose field path starts
// `field_path` followed by "[" or "." ("lora.targets[0]"); nullptr when
// none. Turns a planner error's field back into the user's word.
const SetupKey* SetupKeyForField(absl::string_view field_path);

// What a setup value sets outside TrainingSetup.
struct SetupExtras {
  bool min_gpus = false;  // gpus auto
};

// Sets `key` from `text` on `setup` (and `extras`). `source` names where the
// text came from in errors: "--lora_rank", "annotation
// headroom.dev/lora-rank", "lora_rank". INVALID_ARGUMENT "<source> '<text>'
// is invalid; allowed <Allowed()>" for a word the key lacks, a number out of
// range or not a number (negative included). The planner checks the
// combinations.
absl::Status ApplySetupValue(const SetupKey& key, absl::string_view text,
                             absl::string_view source, v1::TrainingSetup* setup,
                             SetupExtras* extras);

// The vocabulary as JSON (the Python client's setup_words.json) and as a
// Markdown table (docs/setup-words.md).
std::string SetupVocabularyJson();
std::string SetupVocabularyMarkdown();

}  // namespace headroom

#endif  // HEADROOM_CORE_SETUP_SETUP_WORDS_H_
