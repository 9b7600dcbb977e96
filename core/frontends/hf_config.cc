#include "core/frontends/hf_config.h"

#include <cmath>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/frontends/hf_builders.h"
#include "core/memory/model_spec.h"
#include "nlohmann/json.hpp"

namespace headroom {
namespace hf {

// ---- Reading config keys ----------------------------------------------

// A JSON value for an error message, cut short.
std::string Abbreviated(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

absl::Status OutOfRange(const std::string& path, uint64_t value,
                        uint64_t min_value, uint64_t max_value) {
  return absl::InvalidArgumentError(
      absl::StrCat("config.json: ", path, " = ", value,
                   " is out of range; allowed ", min_value, "..", max_value));
}

absl::StatusOr<uint64_t> ConfigKeys::Size(const char* key,
                                          uint64_t default_value,
                                          uint64_t min_value,
                                          uint64_t max_value) {
  ASSIGN_OR_RETURN(std::optional<uint64_t> value,
                   OptionalSize(key, default_value, min_value, max_value));
  if (!value.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", Path(key),
                                                   " is null; allowed ",
                                                   min_value, "..", max_value));
  }
  return *value;
}

absl::StatusOr<std::optional<uint64_t>> ConfigKeys::OptionalSize(
    const char* key, std::optional<uint64_t> default_value, uint64_t min_value,
    uint64_t max_value) {
  if (!Has(key)) {
    if (default_value.has_value()) Assume(key, absl::StrCat(*default_value));
    return default_value;
  }
  const Json& v = object_.at(key);
  if (v.is_null()) return std::optional<uint64_t>();
  uint64_t n = 0;
  if (v.is_number_unsigned()) {
    n = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    const int64_t i = v.get<int64_t>();
    if (i < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", Path(key), " = ", i, " is out of range; allowed ",
          min_value, "..", max_value));
    }
    n = static_cast<uint64_t>(i);
  } else if (v.is_number_float() && v.get<double>() >= 0 &&
             v.get<double>() < 1.8e19 &&
             v.get<double>() == std::floor(v.get<double>())) {
    n = static_cast<uint64_t>(v.get<double>());
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", Path(key), " = ", Abbreviated(v),
                     " is not a non-negative integer; allowed ", min_value,
                     "..", max_value));
  }
  if (n < min_value || n > max_value) {
    return OutOfRange(Path(key), n, min_value, max_value);
  }
  return std::optional<uint64_t>(n);
}

absl::StatusOr<bool> ConfigKeys::Flag(const char* key, bool default_value) {
  if (!Has(key)) {
    Assume(key, default_value ? "true" : "false");
    return default_value;
  }
  const Json& v = object_.at(key);
  if (!v.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", Path(key), " = ", Abbreviated(v),
                     " is not a boolean; allowed true, false"));
  }
  return v.get<bool>();
}

absl::StatusOr<std::string> ConfigKeys::Text(const char* key,
                                             const std::string& default_value) {
  if (!Has(key)) {
    Assume(key, absl::StrCat("\"", default_value, "\""));
    return default_value;
  }
  const Json& v = object_.at(key);
  if (!v.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", Path(key), " = ", Abbreviated(v), " is not a string"));
  }
  return v.get<std::string>();
}

absl::StatusOr<std::vector<uint64_t>> ConfigKeys::SizeList(
    const char* key, const std::vector<uint64_t>& defaults,
    uint64_t max_value) {
  if (!Has(key)) {
    Assume(key, absl::StrCat("[", absl::StrJoin(defaults, ", "), "]"));
    return defaults;
  }
  const Json& v = object_.at(key);
  if (!v.is_array() || v.empty() || v.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", Path(key), " = ", Abbreviated(v),
                     " is not a list of 1 to 64 sizes"));
  }
  std::vector<uint64_t> out;
  for (const Json& item : v) {
    if (!item.is_number_integer() || item.get<int64_t>() < 1 ||
        static_cast<uint64_t>(item.get<int64_t>()) > max_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", Path(key), " entry ", Abbreviated(item),
                       " is out of range; allowed 1..", max_value));
    }
    out.push_back(static_cast<uint64_t>(item.get<int64_t>()));
  }
  return out;
}

void ConfigKeys::AssumeDerived(const char* key, uint64_t value,
                               absl::string_view how) {
  if (Has(key)) return;
  assumed_->push_back(absl::StrCat(Path(key), "=", value, " (transformers ",
                                   config_class_, " default None: ", how, ")"));
}

void ConfigKeys::Assume(const char* key, absl::string_view value) {
  assumed_->push_back(absl::StrCat(Path(key), "=", value, " (transformers ",
                                   config_class_, " default)"));
}

namespace {

// ---- Dispatch --------------------------------------------------------------

struct Family {
  const char* model_type;
  Converter convert;
};

// Sorted by model_type.
constexpr Family kFamilies[] = {
    {"bart", ConvertBart},
    {"bert", ConvertBert},
    {"bloom", ConvertBloom},
    {"clip", ConvertClip},
    {"convnext", ConvertConvNext},
    {"deberta-v2", ConvertDebertaV2},
    {"deepseek_v3", ConvertDeepseekV3},
    {"dinov2", ConvertDinov2},
    {"dinov2_with_registers", ConvertDinov2WithRegisters},
    {"distilbert", ConvertDistilBert},
    {"electra", ConvertElectra},
    {"falcon", ConvertFalcon},
    {"gemma", ConvertGemma},
    {"gemma2", ConvertGemma2},
    {"gemma3_text", ConvertGemma3Text},
    {"gpt2", ConvertGpt2},
    {"gpt_bigcode", ConvertGptBigCode},
    {"gpt_neox", ConvertGptNeox},
    {"granite", ConvertGranite},
    {"llama", ConvertLlama},
    {"mistral", ConvertMistral},
    {"mixtral", ConvertMixtral},
    {"mpt", ConvertMpt},
    {"olmo", ConvertOlmo},
    {"olmo2", ConvertOlmo2},
    {"opt", ConvertOpt},
    {"phi", ConvertPhi},
    {"phi3", ConvertPhi3},
    {"qwen2", ConvertQwen2},
    {"qwen2_moe", ConvertQwen2Moe},
    {"qwen3", ConvertQwen3},
    {"roberta", ConvertRoberta},
    {"stablelm", ConvertStableLm},
    {"starcoder2", ConvertStarcoder2},
    {"swin", ConvertSwin},
    {"t5", ConvertT5},
    {"vit", ConvertVit},
    {"whisper", ConvertWhisper},
    {"xlm-roberta", ConvertXlmRoberta},
};

// Lowercase letters, digits and single dashes, as catalog names are.
std::string SpecName(absl::string_view raw) {
  std::string name;
  for (char ch : raw) {
    const char lower = absl::ascii_tolower(static_cast<unsigned char>(ch));
    if (absl::ascii_isalnum(static_cast<unsigned char>(lower))) {
      name.push_back(lower);
    } else if (!name.empty() && name.back() != '-') {
      name.push_back('-');
    }
    if (name.size() >= 100) break;
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name;
}

// Parameters with each repeat multiplied out in floating point, so an
// absurd config is caught before a 64-bit count could overflow.
double ApproxParams(const Layer& layer) {
  const double repeat = layer.repeat() == 0 ? 1.0 : layer.repeat();
  if (layer.kind_case() == Layer::kBlock) {
    double n = 0;
    for (const Layer& child : layer.block().layers()) n += ApproxParams(child);
    return repeat * n;
  }
  Layer single = layer;
  single.set_repeat(1);
  return repeat * static_cast<double>(CountLayerParams(single));
}

absl::StatusOr<Json> ParseConfig(absl::string_view text) {
  if (text.size() > kMaxHfConfigBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json is ", text.size(), " bytes; allowed up to ",
                     kMaxHfConfigBytes));
  }
  bool too_deep = false;
  Json::parser_callback_t depth_guard =
      [&too_deep](int depth, Json::parse_event_t, Json&) {
        if (depth > kMaxJsonDepth) too_deep = true;
        return !too_deep;
      };
  Json config;
  try {
    config = Json::parse(text.begin(), text.end(), depth_guard);
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json is not valid JSON: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json nests deeper than ", kMaxJsonDepth, " levels"));
  }
  if (!config.is_object()) {
    return absl::InvalidArgumentError(
        "config.json is not a JSON object; expected a Hugging Face config "
        "with a model_type");
  }
  return config;
}

std::string SupportedList() {
  return absl::StrJoin(SupportedHfModelTypes(), ", ");
}

}  // namespace
}  // namespace hf

const std::vector<std::string>& SupportedHfModelTypes() {
  static const auto* types = [] {
    auto* list = new std::vector<std::string>();
    for (const hf::Family& family : hf::kFamilies)
      list->push_back(family.model_type);
    return list;
  }();
  return *types;
}

namespace {

void SetDropout(double p, v1::Layer* layer) {
  if (layer->has_attention()) layer->mutable_attention()->set_dropout(p);
  if (layer->has_block()) {
    for (v1::Layer& child : *layer->mutable_block()->mutable_layers()) {
      SetDropout(p, &child);
    }
  }
}

// The dropout on attention probabilities in training, from the config's
// own key (what eager attention then saves a mask for); a config without
// one of these keys is taken as none.
void SetAttentionDropout(const hf::Json& config, HfConversion* out) {
  for (const char* key : {"attention_probs_dropout_prob", "attn_pdrop",
                          "attention_dropout", "dropout_rate"}) {
    if (!config.contains(key) || !config.at(key).is_number()) continue;
    const double p = config.at(key).get<double>();
    if (!(p > 0 && p < 1)) return;
    for (v1::Layer& layer : *out->spec.mutable_layers()) SetDropout(p, &layer);
    out->notes.push_back(absl::StrCat("Attention dropout ", p, " (", key,
                                      "): eager attention saves its mask."));
    return;
  }
}

}  // namespace

absl::StatusOr<HfConversion> SpecFromHfConfig(absl::string_view config_json,
                                              const HfOptions& options) {
  ASSIGN_OR_RETURN(const hf::Json config, hf::ParseConfig(config_json));
  if (!config.contains("model_type") || !config.at("model_type").is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: model_type is missing or not a string; supported: ",
        hf::SupportedList()));
  }
  const std::string model_type = config.at("model_type").get<std::string>();
  const hf::Family* family = nullptr;
  for (const hf::Family& f : hf::kFamilies) {
    if (model_type == f.model_type) family = &f;
  }
  if (family == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: model_type = ", hf::Abbreviated(config.at("model_type")),
        " is not supported; supported: ", hf::SupportedList()));
  }
  HfConversion out;
  hf::Conversion c{options, &out, ""};
  RETURN_IF_ERROR(family->convert(config, c));

  v1::ModelSpec& spec = out.spec;
  std::string name = hf::SpecName(options.name);
  if (name.empty() && config.contains("_name_or_path") &&
      config.at("_name_or_path").is_string()) {
    name = hf::SpecName(config.at("_name_or_path").get<std::string>());
  }
  if (name.empty()) name = hf::SpecName(model_type);
  spec.set_name(name);
  spec.set_source(absl::StrCat("Hugging Face config.json, model_type ",
                               model_type,
                               "; keys it does not set take transformers ",
                               c.config_class, " defaults."));
  SetAttentionDropout(config, &out);
  spec.set_notes(absl::StrJoin(out.notes, " "));

  double params = 0;
  for (const hf::Layer& layer : spec.layers())
    params += hf::ApproxParams(layer);
  if (params > static_cast<double>(kMaxParams)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json describes about ", params, " parameters; allowed up to ",
        kMaxParams, " (check hidden_size, num_hidden_layers, vocab_size)"));
  }
  const absl::Status valid = ValidateSpec(spec);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json converts to an unusable spec: ", valid.message()));
  }
  return out;
}

}  // namespace headroom
