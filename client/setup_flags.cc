#include "client/setup_flags.h"

#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "core/setup/setup_words.h"

namespace headroom::cli {
namespace {

// The help line: what the key means, its words or range, and what the
// planner assumes without it.
std::string HelpOf(const SetupKey& key) {
  std::string help = key.help;
  if (key.type != SetupKeyType::kBool) {
    absl::StrAppend(&help, "; allowed ", key.Allowed());
  }
  if (!key.bare.empty()) absl::StrAppend(&help, " (bare: ", key.bare, ")");
  absl::StrAppend(&help, "; default ", key.default_text);
  return help;
}

}  // namespace

void AddSetupFlags(CLI::App* app, Options& o, bool compile_flag) {
  for (const SetupKey& key : SetupVocabulary()) {
    if (key.name == "compile" && !compile_flag) continue;
    const std::string name = key.name;
    if (key.type == SetupKeyType::kBool) {
      app->add_flag_callback(
          key.Flag(), [&o, name] { o.setup[name] = "true"; }, HelpOf(key));
      continue;
    }
    CLI::Option* option = app->add_option_function<std::string>(
        key.Flag(), [&o, name](const std::string& v) { o.setup[name] = v; },
        HelpOf(key));
    option->type_name(key.type == SetupKeyType::kUint     ? "N"
                      : key.type == SetupKeyType::kNumber ? "P"
                                                          : "WORD");
    if (!key.bare.empty()) option->expected(0, 1);
  }
  app->add_flag("--fused_attention", o.fused_attention,
                "deprecated: --attention sdpa");
}

absl::Status FillSetup(const Options& o, v1::TrainingSetup* setup) {
  SetupExtras extras;
  for (const auto& [name, text] : o.setup) {
    const SetupKey* key = FindSetupKey(name);
    if (key == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " is not a setup flag"));
    }
    if (absl::Status s =
            ApplySetupValue(*key, text, key->Flag(), setup, &extras);
        !s.ok()) {
      return s;
    }
  }
  if (o.fused_attention && o.setup.count("attention") == 0) {
    setup->set_attention(v1::TrainingSetup::SDPA);
  }
  return absl::OkStatus();
}

bool MinGpusAsked(const Options& o) {
  auto it = o.setup.find("gpus");
  return it != o.setup.end() && it->second == "auto";
}

std::vector<std::string> GivenSetupFields(const Options& o) {
  std::vector<std::string> fields;
  for (const auto& [name, text] : o.setup) {
    const SetupKey* key = FindSetupKey(name);
    if (key == nullptr) continue;
    fields.push_back(key->field);
    const std::string word = text.empty() ? key->bare : text;
    for (const SetupWord& w : key->words) {
      if (w.word == word && !w.field.empty()) fields.push_back(w.field);
    }
  }
  return fields;
}

int ListSetupWords(const Options& o, std::ostream& out) {
  out << (o.json ? SetupVocabularyJson() : SetupVocabularyMarkdown());
  if (o.json) out << "\n";
  return 0;
}

}  // namespace headroom::cli
