#include "core/setup/setup_words.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/value_bounds.h"
#include "core/memory/framework_profile.h"
#include "core/memory/parallel.h"
#include "core/memory/training_setup.h"
#include "google/protobuf/descriptor.h"
#include "nlohmann/json.hpp"

namespace headroom {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;
using v1::TrainingSetup;

constexpr size_t kMaxStringBytes = 64;
constexpr size_t kMaxListEntries = 256;

SetupKey Key(std::string name, std::string field, SetupKeyType type,
             std::string default_text, std::string help) {
  SetupKey key;
  key.name = std::move(name);
  key.field = std::move(field);
  key.type = type;
  key.default_text = std::move(default_text);
  key.help = std::move(help);
  return key;
}

SetupKey Range(SetupKey key, double min, double max) {
  key.min = min;
  key.max = max;
  return key;
}

SetupWord W(std::string word, int value) {
  return SetupWord{std::move(word), value, "", ""};
}

// The word keys: precision, optimizer, attention and the rest.
void AddWordKeys(std::vector<SetupKey>& keys) {
  SetupKey precision =
      Key("precision", "precision", SetupKeyType::kWord, "fp32",
          "the number format: bf16 and fp16 mixed precision; -true: 16-bit "
          "weights, gradients and state too");
  precision.words = {W("fp32", TrainingSetup::FP32),
                     W("bf16", TrainingSetup::BF16_MIXED),
                     W("fp16", TrainingSetup::FP16_MIXED),
                     W("bf16-true", TrainingSetup::BF16_TRUE),
                     W("fp16-true", TrainingSetup::FP16_TRUE)};
  keys.push_back(std::move(precision));

  SetupKey optimizer = Key("optimizer", "optimizer", SetupKeyType::kWord,
                           "adamw", "the optimizer and its states' format");
  optimizer.words = {W("adamw", TrainingSetup::ADAMW),
                     W("adamw-fused", TrainingSetup::ADAMW_FUSED),
                     W("adamw-loop", TrainingSetup::ADAMW_LOOP),
                     W("adam8bit", TrainingSetup::ADAM8BIT),
                     W("paged-adamw8bit", TrainingSetup::PAGED_ADAMW8BIT),
                     W("paged-adamw", TrainingSetup::PAGED_ADAMW),
                     W("adam4bit", TrainingSetup::ADAM4BIT),
                     W("adamfp8", TrainingSetup::ADAMFP8),
                     W("adafactor", TrainingSetup::ADAFACTOR),
                     W("lion", TrainingSetup::LION),
                     W("sgd", TrainingSetup::SGD),
                     W("sgd-momentum", TrainingSetup::SGD_MOMENTUM)};
  keys.push_back(std::move(optimizer));

  keys.push_back(Key("optimizer_in_backward", "optimizer_in_backward",
                     SetupKeyType::kBool, "false",
                     "step each parameter during backward (no full set of "
                     "gradients)"));

  // --checkpointing full keeps the older activation_checkpointing field, so
  // the setups stored with it keep their model keys (model_key.cc).
  SetupKey checkpointing =
      Key("checkpointing", "checkpointing", SetupKeyType::kWord,
          "none (or the framework profile's)",
          "activation checkpointing (selective: every N-th block or the "
          "op-level policy)");
  checkpointing.words = {W("none", TrainingSetup::NO_CHECKPOINTING),
                         {"full", 1, "activation_checkpointing", ""},
                         W("selective", TrainingSetup::SELECTIVE)};
  checkpointing.bare = "full";
  keys.push_back(std::move(checkpointing));
  keys.push_back(Range(
      Key("checkpoint_every", "checkpoint_every", SetupKeyType::kUint, "0",
          "with checkpointing selective: recompute every N-th block (0: "
          "op-level, matmul and attention outputs kept)"),
      0, 100000));

  SetupKey loss = Key("loss", "loss", SetupKeyType::kWord, "the framework's",
                      "the loss (chunked-ce: the logits a chunk at a time)");
  loss.words = {W("chunked-ce", TrainingSetup::CHUNKED_CE),
                W("full-ce", TrainingSetup::FULL_CE)};
  keys.push_back(std::move(loss));
  keys.push_back(
      Range(Key("loss_chunks", "loss_chunks", SetupKeyType::kUint,
                absl::StrCat(kDefaultLossChunks),
                "with loss chunked-ce: pieces of the sequence (0: the "
                "default)"),
            0, kMaxLossChunks));
  keys.push_back(Key("activation_offloading", "activation_offloading",
                     SetupKeyType::kBool, "false",
                     "saved activations to host memory during forward "
                     "(torchtune's OffloadActivations)"));

  SetupKey attention = Key("attention", "attention", SetupKeyType::kWord,
                           "the model's own", "the attention kernel");
  attention.words = {W("eager", TrainingSetup::EAGER),
                     W("sdpa", TrainingSetup::SDPA),
                     W("flash", TrainingSetup::FLASH)};
  keys.push_back(std::move(attention));
}

// LoRA, quantisation, freezing and the step's own numbers.
void AddAdapterKeys(std::vector<SetupKey>& keys) {
  keys.push_back(Range(Key("lora_rank", "lora.rank", SetupKeyType::kUint, "0",
                           "LoRA adapters of this rank (0: none)"),
                       0, kMaxLoraRank));
  SetupKey targets = Key("lora_targets", "lora.targets", SetupKeyType::kStrings,
                         "q,v", "the layers LoRA adapts, comma-separated");
  for (const std::string& target : LoraTargetWords()) {
    targets.words.push_back(W(target, 0));
  }
  keys.push_back(std::move(targets));
  keys.push_back(
      Range(Key("lora_dropout", "lora.dropout", SetupKeyType::kNumber, "0",
                "dropout on the adapters' input, 0 <= p < 1"),
            0, 1));
  SetupKey quant = Key("quant_base", "quant_base", SetupKeyType::kWord, "none",
                       "nf4 or int8: the frozen base stored quantized (QLoRA)");
  quant.words = {W("nf4", TrainingSetup::NF4), W("int8", TrainingSetup::INT8)};
  keys.push_back(std::move(quant));
  SetupKey freeze =
      Key("freeze", "freeze.layers", SetupKeyType::kStrings, "none",
          "top-level layer names to freeze, comma-separated (name* is a "
          "prefix)");
  keys.push_back(std::move(freeze));
  keys.push_back(Range(Key("train_last_blocks", "freeze.train_last_blocks",
                           SetupKeyType::kUint, "0 (all)",
                           "freeze all but the last N copies of the last "
                           "repeated block"),
                       0, 1u << 20));
  keys.push_back(Range(Key("grad_accum", "grad_accum", SetupKeyType::kUint, "1",
                           "microbatches per step (the batch is divided)"),
                       0, kMaxGradAccum));
  keys.push_back(
      Key("compile", "compile", SetupKeyType::kBool, "false", "torch.compile"));
  keys.push_back(Range(
      Key("positions", "positions", SetupKeyType::kUint, "the model's standard",
          "sequence length / tokens per sample, the longest when batches are "
          "padded (0: the model's standard)"),
      0, static_cast<double>(uint64_t{1} << 32)));
}

// The parallel setup, the phases and the framework.
void AddJobKeys(std::vector<SetupKey>& keys) {
  SetupKey gpus =
      Range(Key("gpus", "gpus", SetupKeyType::kUint, "1",
                "GPUs in all, or auto: the smallest count per GPU kind, per "
                "strategy"),
            1, kMaxGpus);
  gpus.words = {{"auto", 1, "", "min_gpus"}};
  keys.push_back(std::move(gpus));
  SetupKey parallel =
      Key("parallel", "parallel", SetupKeyType::kWord,
          "ddp (with gpus auto: each)", "the multi-GPU strategy");
  for (TrainingSetup::Parallel s : AllStrategies()) {
    parallel.words.push_back(W(StrategyName(s), s));
  }
  keys.push_back(std::move(parallel));
  SetupKey offload =
      Key("offload", "offload", SetupKeyType::kWord, "none",
          "to host memory: optimizer, params or both (sharded strategies); "
          "optimizer,gradients: torchao's one-GPU CPUOffloadOptimizer with "
          "offload_gradients");
  offload.words = {
      W("optimizer", TrainingSetup::OPTIMIZER),
      W("params", TrainingSetup::PARAMS), W("both", TrainingSetup::BOTH),
      W("optimizer,gradients", TrainingSetup::OPTIMIZER_GRADIENTS)};
  keys.push_back(std::move(offload));
  keys.push_back(
      Range(Key("tensor_parallel", "tensor_parallel", SetupKeyType::kUint, "1",
                "tensor-parallel degree T (divides gpus)"),
            0, kMaxGpus));
  keys.push_back(Range(Key("nodes", "nodes", SetupKeyType::kUint, "1",
                           "nodes (hybrid sharding)"),
                       0, kMaxGpus));
  keys.push_back(Range(Key("gpus_per_node", "gpus_per_node",
                           SetupKeyType::kUint, "8", "GPUs per node"),
                       0, kMaxGpus));
  keys.push_back(Key("expandable_segments", "expandable_segments",
                     SetupKeyType::kBool, "false",
                     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                     "(reserved memory stays closer to allocated)"));
  SetupKey phases =
      Key("phases", "phases", SetupKeyType::kWords, "load,step",
          "the job's phases, comma-separated; the answer is the largest");
  phases.words = {W("load", v1::LOAD),         W("first-step", v1::FIRST_STEP),
                  W("step", v1::STEP),         W("eval", v1::EVAL),
                  W("generate", v1::GENERATE), W("save", v1::SAVE)};
  keys.push_back(std::move(phases));
  keys.push_back(Range(Key("eval_batch", "eval_batch", SetupKeyType::kUint,
                           "the training batch", "the eval phase's batch"),
                       0, static_cast<double>(kMaxBatch)));
  keys.push_back(
      Range(Key("generate_tokens", "generate_tokens", SetupKeyType::kUint,
                "128", "new tokens per sample in the generate phase"),
            0, 1u << 20));
  SetupKey framework =
      Key("framework", "framework", SetupKeyType::kWord, "generic",
          "what runs the job: hf-trainer (transformers Trainer, TRL, axolotl), "
          "litgpt, torchtune, deepspeed or torch; its profile fills what the "
          "setup leaves unset");
  for (TrainingSetup::Framework f : AllFrameworks()) {
    framework.words.push_back(W(FrameworkName(f), f));
  }
  keys.push_back(std::move(framework));
  keys.push_back(Key("framework_version", "framework_version",
                     SetupKeyType::kString, "the profile's newest",
                     "the framework's version where its behaviour changed, "
                     "e.g. 0.5.10"));
}

std::vector<SetupKey> MakeVocabulary() {
  std::vector<SetupKey> keys;
  AddWordKeys(keys);
  AddAdapterKeys(keys);
  AddJobKeys(keys);
  return keys;
}

// "fp32, bf16, fp16": the key's words as errors and help list them.
std::string WordList(const SetupKey& key) {
  std::vector<std::string> words;
  for (const SetupWord& w : key.words) words.push_back(w.word);
  return absl::StrJoin(words, ", ");
}

// "<source> 'x' is unknown; allowed a, b, c" for a word the key lacks,
// "... is invalid; allowed 0..1024" for a value out of its range.
absl::Status Bad(const SetupKey& key, absl::string_view text,
                 absl::string_view source) {
  const bool words_only = !key.words.empty() && key.type != SetupKeyType::kUint;
  return absl::InvalidArgumentError(
      absl::StrCat(source, " '", text.substr(0, kMaxStringBytes), "' is ",
                   words_only ? "unknown" : "invalid", "; allowed ",
                   words_only ? WordList(key) : key.Allowed()));
}

// Walks `path` ("lora.rank") from `setup` to the last field's message.
Message* Owner(const std::string& path, Message* setup,
               const FieldDescriptor** field) {
  Message* message = setup;
  const std::vector<std::string> parts = absl::StrSplit(path, '.');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    const FieldDescriptor* sub =
        message->GetDescriptor()->FindFieldByName(parts[i]);
    if (sub == nullptr || sub->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) {
      return nullptr;
    }
    message = message->GetReflection()->MutableMessage(message, sub);
  }
  *field = message->GetDescriptor()->FindFieldByName(parts.back());
  return *field == nullptr ? nullptr : message;
}

// Sets (or, on a repeated field, adds) an integer or boolean field.
absl::Status SetNumber(const std::string& path, double value,
                       TrainingSetup* setup) {
  const FieldDescriptor* field = nullptr;
  Message* owner = Owner(path, setup, &field);
  if (owner == nullptr) {
    return absl::InternalError(
        absl::StrCat("setup vocabulary: no field ", path, " in TrainingSetup"));
  }
  const Reflection* r = owner->GetReflection();
  const bool repeated = field->is_repeated();
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_ENUM:
      repeated ? r->AddEnumValue(owner, field, static_cast<int>(value))
               : r->SetEnumValue(owner, field, static_cast<int>(value));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      r->SetBool(owner, field, value != 0);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      r->SetUInt32(owner, field, static_cast<uint32_t>(value));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      r->SetUInt64(owner, field, static_cast<uint64_t>(value));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      r->SetDouble(owner, field, value);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      r->SetFloat(owner, field, static_cast<float>(value));
      break;
    default:
      return absl::InternalError(
          absl::StrCat("setup vocabulary: field ", path, " is not a number"));
  }
  return absl::OkStatus();
}

absl::Status SetString(const std::string& path, const std::string& value,
                       TrainingSetup* setup) {
  const FieldDescriptor* field = nullptr;
  Message* owner = Owner(path, setup, &field);
  if (owner == nullptr ||
      field->cpp_type() != FieldDescriptor::CPPTYPE_STRING) {
    return absl::InternalError(absl::StrCat(
        "setup vocabulary: no string field ", path, " in TrainingSetup"));
  }
  const Reflection* r = owner->GetReflection();
  field->is_repeated() ? r->AddString(owner, field, value)
                       : r->SetString(owner, field, value);
  return absl::OkStatus();
}

absl::Status ApplyWord(const SetupKey& key, const SetupWord& word,
                       TrainingSetup* setup, SetupExtras* extras) {
  if (word.request == "min_gpus") {
    extras->min_gpus = true;
    return absl::OkStatus();
  }
  return SetNumber(word.field.empty() ? key.field : word.field, word.value,
                   setup);
}

const SetupWord* FindWord(const SetupKey& key, absl::string_view text) {
  for (const SetupWord& word : key.words) {
    if (word.word == text) return &word;
  }
  return nullptr;
}

std::vector<std::string> ListOf(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

// A comma list of words (phases) or of names (lora targets, frozen layers);
// each at most once.
absl::Status ApplyList(const SetupKey& key, absl::string_view text,
                       absl::string_view source, TrainingSetup* setup) {
  const std::vector<std::string> items = ListOf(text);
  if (items.empty() || items.size() > kMaxListEntries)
    return Bad(key, text, source);
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string& item = items[i];
    if (std::find(items.begin(), items.begin() + i, item) !=
        items.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, " names '", item.substr(0, kMaxStringBytes),
                       "' twice; give each at most once"));
    }
    const SetupWord* word = FindWord(key, item);
    if (!key.words.empty() && word == nullptr) return Bad(key, item, source);
    if (item.size() > 256) return Bad(key, item, source);
    absl::Status status = key.type == SetupKeyType::kWords
                              ? SetNumber(key.field, word->value, setup)
                              : SetString(key.field, item, setup);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status ApplyScalar(const SetupKey& key, absl::string_view text,
                         absl::string_view source, TrainingSetup* setup) {
  switch (key.type) {
    case SetupKeyType::kUint: {
      uint64_t value = 0;
      if (!absl::SimpleAtoi(text, &value) ||
          static_cast<double>(value) < key.min ||
          static_cast<double>(value) > key.max) {
        return Bad(key, text, source);
      }
      return SetNumber(key.field, static_cast<double>(value), setup);
    }
    case SetupKeyType::kNumber: {
      double value = 0;
      if (!absl::SimpleAtod(text, &value) || !std::isfinite(value) ||
          value < key.min || value >= key.max) {
        return Bad(key, text, source);
      }
      return SetNumber(key.field, value, setup);
    }
    case SetupKeyType::kBool: {
      const std::string lower = absl::AsciiStrToLower(text);
      if (lower == "true" || lower == "1")
        return SetNumber(key.field, 1, setup);
      if (lower == "false" || lower == "0")
        return SetNumber(key.field, 0, setup);
      return Bad(key, text, source);
    }
    case SetupKeyType::kString:
      if (text.empty() || text.size() > kMaxStringBytes ||
          !std::all_of(text.begin(), text.end(), [](char c) {
            return absl::ascii_isalnum(c) || c == '.' || c == '-' || c == '+' ||
                   c == '_';
          })) {
        return Bad(key, text, source);
      }
      return SetString(key.field, std::string(text), setup);
    default:
      return Bad(key, text, source);
  }
}

// Insertion-ordered, so the table reads in the order keys are defined.
using Json = nlohmann::ordered_json;

Json KeyJson(const SetupKey& key) {
  Json out = {{"name", key.name},
              {"flag", key.Flag()},
              {"annotation", key.Annotation()},
              {"field", key.field},
              {"type", key.TypeName()}};
  if (key.type == SetupKeyType::kUint) {
    out["min"] = static_cast<uint64_t>(key.min);
    out["max"] = static_cast<uint64_t>(key.max);
  } else if (key.type == SetupKeyType::kNumber) {
    out["min"] = key.min;
    out["max"] = key.max;
  }
  out["default"] = key.default_text;
  out["help"] = key.help;
  if (!key.bare.empty()) out["bare"] = key.bare;
  Json words = Json::array();
  for (const SetupWord& word : key.words) {
    Json w = {{"word", word.word}};
    if (key.type == SetupKeyType::kStrings) {
      // A name, set as typed.
    } else if (!word.request.empty()) {
      w["request"] = word.request;
      w["value"] = word.value != 0;
    } else if (!word.field.empty()) {
      w["field"] = word.field;
      w["value"] = word.value != 0;
    } else {
      w["value"] = word.value;
    }
    words.push_back(std::move(w));
  }
  out["words"] = std::move(words);
  return out;
}

}  // namespace

std::string SetupKey::Flag() const { return absl::StrCat("--", name); }

std::string SetupKey::Annotation() const {
  return absl::StrCat("headroom.dev/", absl::StrReplaceAll(name, {{"_", "-"}}));
}

std::string SetupKey::TypeName() const {
  switch (type) {
    case SetupKeyType::kWord:
      return "word";
    case SetupKeyType::kWords:
      return "words";
    case SetupKeyType::kUint:
      return "uint";
    case SetupKeyType::kNumber:
      return "number";
    case SetupKeyType::kBool:
      return "bool";
    case SetupKeyType::kStrings:
      return "strings";
    case SetupKeyType::kString:
      return "string";
  }
  return "word";
}

std::string SetupKey::Allowed() const {
  const std::string list = WordList(*this);
  switch (type) {
    case SetupKeyType::kUint:
      return absl::StrCat(static_cast<uint64_t>(min), "..",
                          static_cast<uint64_t>(max),
                          list.empty() ? "" : " or ", list);
    case SetupKeyType::kNumber:
      return absl::StrCat(min, " <= p < ", max);
    case SetupKeyType::kBool:
      return "true, false";
    case SetupKeyType::kWords:
      return absl::StrCat("a comma list of ", list);
    case SetupKeyType::kStrings:
      return list.empty() ? "a comma list of names"
                          : absl::StrCat("a comma list of ", list);
    case SetupKeyType::kString:
      return "a version: letters, digits and . - + _, at most 64";
    default:
      return list;
  }
}

const std::vector<SetupKey>& SetupVocabulary() {
  static const std::vector<SetupKey>* const keys =
      new std::vector<SetupKey>(MakeVocabulary());
  return *keys;
}

const SetupKey* FindSetupKey(absl::string_view name) {
  const std::string snake = absl::StrReplaceAll(name, {{"-", "_"}});
  for (const SetupKey& key : SetupVocabulary()) {
    if (key.name == snake) return &key;
  }
  return nullptr;
}

const SetupKey* SetupKeyForField(absl::string_view field_path) {
  for (const SetupKey& key : SetupVocabulary()) {
    if (field_path == key.field) return &key;
    if (absl::StartsWith(field_path, key.field)) {
      const char next = field_path[key.field.size()];
      if (next == '[' || next == '.' || next == ' ') return &key;
    }
  }
  return nullptr;
}

absl::Status ApplySetupValue(const SetupKey& key, absl::string_view text,
                             absl::string_view source, v1::TrainingSetup* setup,
                             SetupExtras* extras) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty() && !key.bare.empty()) text = key.bare;
  if (key.type == SetupKeyType::kWords || key.type == SetupKeyType::kStrings) {
    return ApplyList(key, text, source, setup);
  }
  if (const SetupWord* word = FindWord(key, text); word != nullptr) {
    return ApplyWord(key, *word, setup, extras);
  }
  if (key.type == SetupKeyType::kWord) return Bad(key, text, source);
  return ApplyScalar(key, text, source, setup);
}

std::string SetupVocabularyJson() {
  Json keys = Json::array();
  for (const SetupKey& key : SetupVocabulary()) keys.push_back(KeyJson(key));
  const Json root = {
      {"generated_by",
       "headroom setup-words --json (core/setup/setup_words.cc); do not edit"},
      {"keys", std::move(keys)}};
  return root.dump(1);
}

std::string SetupVocabularyMarkdown() {
  std::string out =
      "| CLI flag | annotation | Python | takes | default | what |\n"
      "|---|---|---|---|---|---|\n";
  for (const SetupKey& key : SetupVocabulary()) {
    absl::StrAppend(&out, "| `", key.Flag(), "` | `", key.Annotation(), "` | `",
                    key.name, "` | ",
                    absl::StrReplaceAll(key.Allowed(), {{"|", "\\|"}}), " | ",
                    key.default_text, " | ", key.help, " |\n");
  }
  return out;
}

}  // namespace headroom
