#include "server/core/frontends/hf_config.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/util/message_differencer.h"
#include "nlohmann/json.hpp"
#include "server/core/common/status_macros.h"
#include "server/core/memory/model_spec.h"

namespace headroom {
namespace {

using Json = nlohmann::json;
using v1::Layer;

// Sanity limits on config keys: far above any published model, low enough
// that a parameter count cannot overflow 64 bits.
constexpr int kMaxJsonDepth = 32;
constexpr uint64_t kMaxHidden = 1000000;
constexpr uint64_t kMaxLayers = 10000;
constexpr uint64_t kMaxVocab = 100000000;
constexpr uint64_t kMaxHeads = 100000;
constexpr uint64_t kMaxFfn = 10000000;
constexpr uint64_t kMaxExperts = 100000;
constexpr uint64_t kMaxImageSide = 65536;
constexpr uint64_t kMaxPatch = 10000;
constexpr uint64_t kMaxChannels = 10000;

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

// Reads the keys of one config object. A missing key takes the transformers
// config class's default and is recorded in `assumed`; a key set to null
// means Python's None, which only some keys accept.
class ConfigKeys {
 public:
  ConfigKeys(const Json& object, std::string prefix, std::string config_class,
             std::vector<std::string>* assumed)
      : object_(object),
        prefix_(std::move(prefix)),
        config_class_(std::move(config_class)),
        assumed_(assumed) {}

  ConfigKeys(const ConfigKeys&) = delete;
  ConfigKeys& operator=(const ConfigKeys&) = delete;

  // True when the key is present, null included.
  bool Has(const char* key) const { return object_.contains(key); }

  std::string Path(absl::string_view key) const {
    return absl::StrCat(prefix_, key);
  }

  // The raw value; the key must be present.
  const Json& Raw(const char* key) const { return object_.at(key); }

  // An integer in min_value..max_value; missing takes default_value.
  absl::StatusOr<uint64_t> Size(const char* key, uint64_t default_value,
                                uint64_t min_value, uint64_t max_value) {
    ASSIGN_OR_RETURN(std::optional<uint64_t> value,
                     OptionalSize(key, default_value, min_value, max_value));
    if (!value.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", Path(key), " is null; allowed ",
                       min_value, "..", max_value));
    }
    return *value;
  }

  // Like Size, but null, or a missing key whose default is None
  // (default_value nullopt), gives nullopt: the caller applies the class's
  // meaning of None and records it with AssumeDerived when missing.
  absl::StatusOr<std::optional<uint64_t>> OptionalSize(
      const char* key, std::optional<uint64_t> default_value,
      uint64_t min_value, uint64_t max_value) {
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

  absl::StatusOr<bool> Flag(const char* key, bool default_value) {
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

  absl::StatusOr<std::string> Text(const char* key,
                                   const std::string& default_value) {
    if (!Has(key)) {
      Assume(key, absl::StrCat("\"", default_value, "\""));
      return default_value;
    }
    const Json& v = object_.at(key);
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat("config.json: ", Path(key),
                                                     " = ", Abbreviated(v),
                                                     " is not a string"));
    }
    return v.get<std::string>();
  }

  // Records a value the class derives when `key` is missing (its default is
  // None), e.g. num_key_value_heads from num_attention_heads.
  void AssumeDerived(const char* key, uint64_t value, absl::string_view how) {
    if (Has(key)) return;
    assumed_->push_back(absl::StrCat(Path(key), "=", value, " (transformers ",
                                     config_class_, " default None: ", how,
                                     ")"));
  }

 private:
  void Assume(const char* key, absl::string_view value) {
    assumed_->push_back(absl::StrCat(Path(key), "=", value, " (transformers ",
                                     config_class_, " default)"));
  }

  const Json& object_;
  const std::string prefix_;
  const std::string config_class_;
  std::vector<std::string>* const assumed_;
};

// The conversion under way: options in, spec and remarks out.
struct Conversion {
  const HfOptions& options;
  HfConversion* out;
  std::string config_class;

  v1::ModelSpec& spec() { return out->spec; }
  void Note(std::string note) { out->notes.push_back(std::move(note)); }
};

// ---- Layers ----------------------------------------------------------------

Layer Named(absl::string_view name) {
  Layer layer;
  layer.set_name(std::string(name));
  return layer;
}

Layer EmbeddingLayer(absl::string_view name, uint64_t rows, uint64_t dim) {
  Layer layer = Named(name);
  layer.mutable_embedding()->set_num_embeddings(rows);
  layer.mutable_embedding()->set_dim(dim);
  return layer;
}

Layer ParametersLayer(absl::string_view name, uint64_t count) {
  Layer layer = Named(name);
  layer.mutable_parameters()->set_count(count);
  return layer;
}

Layer NormLayer(absl::string_view name, v1::Norm::Kind kind, uint64_t dim) {
  Layer layer = Named(name);
  layer.mutable_norm()->set_kind(kind);
  layer.mutable_norm()->set_dim(dim);
  return layer;
}

Layer LinearLayer(absl::string_view name, uint64_t in, uint64_t out,
                  bool bias) {
  Layer layer = Named(name);
  layer.mutable_linear()->set_in_features(in);
  layer.mutable_linear()->set_out_features(out);
  layer.mutable_linear()->set_bias(bias);
  return layer;
}

// The LM head: logits over the vocabulary, its weight shared with the token
// embedding when tied.
Layer LmHeadLayer(absl::string_view name, uint64_t hidden, uint64_t vocab,
                  bool tied) {
  Layer layer = LinearLayer(name, hidden, vocab, /*bias=*/false);
  layer.mutable_linear()->set_logits(true);
  layer.mutable_linear()->set_tied(tied);
  return layer;
}

Layer MlpLayer(absl::string_view name, uint64_t hidden, uint64_t ffn,
               bool gated, bool bias) {
  Layer layer = Named(name);
  layer.mutable_mlp()->set_hidden(hidden);
  layer.mutable_mlp()->set_ffn(ffn);
  layer.mutable_mlp()->set_gated(gated);
  layer.mutable_mlp()->set_bias(bias);
  return layer;
}

// Self-attention over `hidden` with `heads` query heads of head_dim each;
// kv_heads and head_dim are written only where they differ from the spec's
// defaults (heads, hidden / heads).
Layer AttentionLayer(absl::string_view name, uint64_t hidden, uint64_t heads,
                     uint64_t kv_heads, uint64_t head_dim, bool qkv_bias,
                     bool out_bias, bool fused) {
  Layer layer = Named(name);
  v1::Attention* a = layer.mutable_attention();
  a->set_hidden(hidden);
  a->set_heads(heads);
  if (kv_heads != heads) a->set_kv_heads(kv_heads);
  if (hidden % heads != 0 || hidden / heads != head_dim) {
    a->set_head_dim(head_dim);
  }
  a->set_qkv_bias(qkv_bias);
  a->set_out_bias(out_bias);
  a->set_fused(fused);
  return layer;
}

Layer BlockLayer(absl::string_view name, uint32_t repeat,
                 std::vector<Layer> layers) {
  Layer layer = Named(name);
  layer.set_repeat(repeat);
  for (Layer& child : layers) {
    *layer.mutable_block()->add_layers() = std::move(child);
  }
  return layer;
}

// Appends one block per run of identical consecutive model layers, so a
// uniform stack is one repeated block and, say, a model whose last layers
// use a sliding window is two. Runs are named "<name>.<first>-<last>".
void AppendStack(absl::string_view name, std::vector<Layer> per_layer,
                 v1::ModelSpec* spec) {
  size_t start = 0;
  std::vector<std::pair<size_t, size_t>> runs;
  for (size_t i = 1; i <= per_layer.size(); ++i) {
    if (i == per_layer.size() ||
        !google::protobuf::util::MessageDifferencer::Equals(per_layer[i],
                                                            per_layer[start])) {
      runs.emplace_back(start, i);
      start = i;
    }
  }
  for (const auto& [first, end] : runs) {
    Layer block = std::move(per_layer[first]);
    block.set_name(runs.size() == 1
                       ? std::string(name)
                       : absl::StrCat(name, ".", first, "-", end - 1));
    block.set_repeat(static_cast<uint32_t>(end - first));
    *spec->add_layers() = std::move(block);
  }
}

// ---- Positions -------------------------------------------------------------

// Positions of a text model with rotary or relative positions: seq_len, or
// the config's maximum capped at kDefaultHfSeqLenCap.
absl::StatusOr<uint64_t> FreePositions(Conversion& c, uint64_t max_positions,
                                       absl::string_view key) {
  if (c.options.seq_len != 0) {
    if (c.options.seq_len > kMaxSpecDimension) {
      return absl::InvalidArgumentError(
          absl::StrCat("seq_len = ", c.options.seq_len,
                       " is out of range; allowed 1..", kMaxSpecDimension));
    }
    c.spec().set_input_source(
        absl::StrCat(c.options.seq_len, " positions per sample (seq_len)."));
    return c.options.seq_len;
  }
  const uint64_t positions = std::min(max_positions, kDefaultHfSeqLenCap);
  c.spec().set_input_source(absl::StrCat(
      positions, " positions per sample: ", key, " ", max_positions,
      max_positions > kDefaultHfSeqLenCap
          ? absl::StrCat(" capped at ", kDefaultHfSeqLenCap,
                         " (a training length; pass seq_len to change)")
          : "",
      "."));
  return positions;
}

// Positions of a model with a learned position table of `usable` rows: it
// cannot run longer sequences, so a larger seq_len is refused.
absl::StatusOr<uint64_t> TablePositions(Conversion& c, uint64_t usable,
                                        absl::string_view key) {
  if (c.options.seq_len > usable) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len = ", c.options.seq_len,
                     " exceeds the learned position table (", key, " allows ",
                     usable, " positions); allowed 1..", usable));
  }
  return FreePositions(c, usable, key);
}

// ---- Decoder-only language models (Llama and its relatives) ---------------

// The decoder families' shared shape, filled from the config.
struct DecoderShape {
  uint64_t vocab = 0;
  uint64_t hidden = 0;
  uint64_t ffn = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t kv_heads = 0;
  uint64_t head_dim = 0;
  uint64_t max_positions = 0;
  bool tied = false;
  bool qkv_bias = false;
  bool out_bias = false;
  bool qk_norm = false;
  bool mlp_bias = false;
  // Where each layer's norms sit. Every layer has post_attention_layernorm
  // (before the MLP in Llama, after attention in Gemma 2 and OLMo 2);
  // input_layernorm comes before attention unless OLMo 2 drops it; Gemma 2
  // adds pre_feedforward_layernorm and post_feedforward_layernorm, OLMo 2
  // the latter.
  bool input_norm = true;
  bool pre_feedforward_norm = false;
  bool post_feedforward_norm = false;
  // The norms' kind: RMS, or LayerNorm without affine parameters (OLMo).
  v1::Norm::Kind norm_kind = v1::Norm::RMS;
  bool norm_no_affine = false;
  // OLMo 2: RMS q_norm and k_norm over the whole query and key projections
  // (heads * head_dim and kv_heads * head_dim weights).
  bool projection_qk_norm = false;
  // Sliding window per layer; 0 for full attention. Empty: all full.
  std::vector<uint64_t> window;
  // Mixture of experts: per layer whether the MLP is sparse. Empty: dense.
  std::vector<bool> sparse;
  uint64_t experts = 0;
  uint64_t top_k = 0;
  uint64_t expert_ffn = 0;
  // Always-on shared expert of this width, with a 1-output sigmoid gate
  // (Qwen2-MoE); 0 for none.
  uint64_t shared_ffn = 0;
};

// The class defaults of the keys every decoder family reads.
struct DecoderDefaults {
  uint64_t vocab_size;
  uint64_t hidden_size;
  uint64_t intermediate_size;
  uint64_t num_hidden_layers;
  uint64_t num_attention_heads;
  std::optional<uint64_t> num_key_value_heads;  // nullopt: None
  std::optional<uint64_t> head_dim;             // nullopt: None
  uint64_t max_position_embeddings;
  bool tie_word_embeddings;
};

absl::StatusOr<DecoderShape> ReadDecoderCore(ConfigKeys& keys,
                                             const DecoderDefaults& d) {
  DecoderShape s;
  ASSIGN_OR_RETURN(s.vocab,
                   keys.Size("vocab_size", d.vocab_size, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.hidden,
                   keys.Size("hidden_size", d.hidden_size, 1, kMaxHidden));
  ASSIGN_OR_RETURN(
      s.ffn, keys.Size("intermediate_size", d.intermediate_size, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.layers, keys.Size("num_hidden_layers", d.num_hidden_layers,
                                       1, kMaxLayers));
  ASSIGN_OR_RETURN(s.heads, keys.Size("num_attention_heads",
                                      d.num_attention_heads, 1, kMaxHeads));
  ASSIGN_OR_RETURN(std::optional<uint64_t> kv,
                   keys.OptionalSize("num_key_value_heads",
                                     d.num_key_value_heads, 1, kMaxHeads));
  s.kv_heads = kv.value_or(s.heads);
  if (!kv.has_value()) {
    keys.AssumeDerived("num_key_value_heads", s.kv_heads,
                       "num_attention_heads");
  }
  if (s.kv_heads > s.heads || s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: ", keys.Path("num_key_value_heads"), " = ", s.kv_heads,
        " must divide ", keys.Path("num_attention_heads"), " = ", s.heads));
  }
  ASSIGN_OR_RETURN(std::optional<uint64_t> head_dim,
                   keys.OptionalSize("head_dim", d.head_dim, 1, kMaxHeads));
  if (!head_dim.has_value()) {
    if (s.hidden % s.heads != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", keys.Path("num_attention_heads"), " = ",
                       s.heads, " does not divide ", keys.Path("hidden_size"),
                       " = ", s.hidden, "; set head_dim"));
    }
    s.head_dim = s.hidden / s.heads;
    keys.AssumeDerived("head_dim", s.head_dim,
                       "hidden_size / num_attention_heads");
  } else {
    s.head_dim = *head_dim;
  }
  ASSIGN_OR_RETURN(s.max_positions,
                   keys.Size("max_position_embeddings",
                             d.max_position_embeddings, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(s.tied,
                   keys.Flag("tie_word_embeddings", d.tie_word_embeddings));
  return s;
}

// Every layer uses `window` (0 for none).
void UniformWindow(DecoderShape& s, uint64_t window) {
  s.window.assign(s.layers, window);
}

// Qwen's sliding window: layers listed "sliding_attention" in layer_types,
// or without it those from max_window_layers on when use_sliding_window.
absl::Status ReadQwenWindows(ConfigKeys& keys, DecoderShape& s) {
  ASSIGN_OR_RETURN(const bool use_sliding,
                   keys.Flag("use_sliding_window", false));
  // sliding_window=4096, max_window_layers=28 (Qwen2Config, Qwen3Config,
  // Qwen2MoeConfig); the window is None unless use_sliding_window.
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> window,
      keys.OptionalSize("sliding_window", 4096, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t max_window_layers,
                   keys.Size("max_window_layers", 28, 0, kMaxLayers));
  const uint64_t w = use_sliding && window.has_value() ? *window : 0;
  s.window.assign(s.layers, 0);
  if (keys.Has("layer_types") && !keys.Raw("layer_types").is_null()) {
    const Json& types = keys.Raw("layer_types");
    if (!types.is_array() || types.size() != s.layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", keys.Path("layer_types"),
          " must be a list of num_hidden_layers = ", s.layers,
          " entries, each \"full_attention\" or \"sliding_attention\""));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const bool sliding = types[i] == "sliding_attention";
      if (!sliding && types[i] != "full_attention") {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: ", keys.Path("layer_types"), "[", i,
            "] = ", Abbreviated(types[i]),
            "; allowed \"full_attention\", \"sliding_attention\""));
      }
      // A listed sliding layer with no window set runs full attention.
      s.window[i] = sliding && window.has_value() ? *window : 0;
    }
    return absl::OkStatus();
  }
  for (uint64_t i = max_window_layers; i < s.layers; ++i) s.window[i] = w;
  return absl::OkStatus();
}

// Gemma's interleaved sliding window: layers listed "sliding_attention" in
// layer_types, or without it every layer but each period-th (Gemma 2: the
// even layers, period 2; Gemma 3: five of every six, period 6).
absl::Status ReadPatternWindows(ConfigKeys& keys, DecoderShape& s,
                                uint64_t window, uint64_t period) {
  s.window.assign(s.layers, 0);
  if (keys.Has("layer_types") && !keys.Raw("layer_types").is_null()) {
    const Json& types = keys.Raw("layer_types");
    if (!types.is_array() || types.size() != s.layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", keys.Path("layer_types"),
          " must be a list of num_hidden_layers = ", s.layers,
          " entries, each \"full_attention\" or \"sliding_attention\""));
    }
    for (size_t i = 0; i < types.size(); ++i) {
      const bool sliding = types[i] == "sliding_attention";
      if (!sliding && types[i] != "full_attention") {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: ", keys.Path("layer_types"), "[", i,
            "] = ", Abbreviated(types[i]),
            "; allowed \"full_attention\", \"sliding_attention\""));
      }
      s.window[i] = sliding ? window : 0;
    }
    return absl::OkStatus();
  }
  for (uint64_t i = 0; i < s.layers; ++i) {
    if ((i + 1) % period != 0) s.window[i] = window;
  }
  return absl::OkStatus();
}

// Embedding, the decoder layers, a final RMS norm and the LM head, named as
// in the transformers *ForCausalLM modules.
absl::Status BuildDecoder(Conversion& c, const DecoderShape& s) {
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  auto norm = [&s](absl::string_view name, uint64_t dim) {
    Layer layer = NormLayer(name, s.norm_kind, dim);
    layer.mutable_norm()->set_no_affine(s.norm_no_affine);
    return layer;
  };
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", s.vocab, s.hidden);
  std::vector<Layer> per_layer;
  per_layer.reserve(s.layers);
  for (uint64_t i = 0; i < s.layers; ++i) {
    std::vector<Layer> parts;
    if (s.input_norm) parts.push_back(norm("input_layernorm", s.hidden));
    Layer attn = AttentionLayer("self_attn", s.hidden, s.heads, s.kv_heads,
                                s.head_dim, s.qkv_bias, s.out_bias,
                                /*fused=*/true);
    attn.mutable_attention()->set_qk_norm(s.qk_norm);
    if (!s.window.empty() && s.window[i] != 0) {
      attn.mutable_attention()->set_window(s.window[i]);
    }
    parts.push_back(std::move(attn));
    if (s.projection_qk_norm) {
      parts.push_back(norm("self_attn.q_norm", s.heads * s.head_dim));
      parts.push_back(norm("self_attn.k_norm", s.kv_heads * s.head_dim));
    }
    parts.push_back(norm("post_attention_layernorm", s.hidden));
    if (s.pre_feedforward_norm) {
      parts.push_back(norm("pre_feedforward_layernorm", s.hidden));
    }
    if (!s.sparse.empty() && s.sparse[i]) {
      Layer moe = Named("mlp");
      v1::Moe* m = moe.mutable_moe();
      m->set_hidden(s.hidden);
      m->set_ffn(s.expert_ffn);
      m->set_experts(s.experts);
      m->set_top_k(s.top_k);
      m->set_gated(true);
      // A shared expert that is a whole number of experts wide is the same
      // parameters and activations as that many shared experts.
      const bool whole = s.shared_ffn % s.expert_ffn == 0;
      if (s.shared_ffn != 0 && whole) {
        m->set_shared_experts(s.shared_ffn / s.expert_ffn);
      }
      parts.push_back(std::move(moe));
      if (s.shared_ffn != 0 && !whole) {
        parts.push_back(MlpLayer("mlp.shared_expert", s.hidden, s.shared_ffn,
                                 /*gated=*/true, /*bias=*/false));
      }
      if (s.shared_ffn != 0) {
        parts.push_back(
            LinearLayer("mlp.shared_expert_gate", s.hidden, 1, false));
      }
    } else {
      parts.push_back(
          MlpLayer("mlp", s.hidden, s.ffn, /*gated=*/true, s.mlp_bias));
    }
    if (s.post_feedforward_norm) {
      parts.push_back(norm("post_feedforward_layernorm", s.hidden));
    }
    per_layer.push_back(BlockLayer("", 1, std::move(parts)));
  }
  AppendStack("model.layers", std::move(per_layer), &spec);
  *spec.add_layers() = norm("model.norm", s.hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", s.hidden, s.vocab, s.tied);
  c.Note(absl::StrCat(
      "The *ForCausalLM model: ", s.layers, " decoder layers, ",
      s.norm_kind == v1::Norm::RMS ? "RMSNorm"
      : s.norm_no_affine           ? "LayerNorm without parameters"
                                   : "LayerNorm",
      ", gated (SwiGLU/GeGLU) MLPs, ",
      s.tied ? "LM head tied to the token embedding (no parameters of its own)"
             : "untied LM head",
      ". Rotary position embeddings and embedding scaling have no "
      "parameters. Attention is marked fused: transformers runs it through "
      "torch scaled_dot_product_attention by default, which keeps no score "
      "matrix."));
  return absl::OkStatus();
}

absl::Status ConvertLlama(const Json& config, Conversion& c) {
  c.config_class = "LlamaConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // LlamaConfig: vocab_size=32000, hidden_size=4096, intermediate_size=11008,
  // num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
  // head_dim=None, max_position_embeddings=2048, tie_word_embeddings=False.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {32000, 4096, 11008, 32, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  // attention_bias=False (q, k, v and o projections), mlp_bias=False.
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  ASSIGN_OR_RETURN(s.mlp_bias, keys.Flag("mlp_bias", false));
  return BuildDecoder(c, s);
}

absl::Status ConvertMistral(const Json& config, Conversion& c) {
  c.config_class = "MistralConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // MistralConfig: vocab_size=32000, hidden_size=4096,
  // intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=8, head_dim=None, max_position_embeddings=4096*32,
  // tie_word_embeddings=False, sliding_window=4096. No biases.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {32000, 4096, 14336, 32, 32, 8,
                                          std::nullopt, 4096 * 32, false}));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> window,
      keys.OptionalSize("sliding_window", 4096, 1, kMaxSpecDimension));
  UniformWindow(s, window.value_or(0));
  return BuildDecoder(c, s);
}

absl::Status ConvertMixtral(const Json& config, Conversion& c) {
  c.config_class = "MixtralConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // MixtralConfig: vocab_size=32000, hidden_size=4096,
  // intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=8, head_dim=None, max_position_embeddings=4096*32,
  // tie_word_embeddings=False, sliding_window=None, num_local_experts=8,
  // num_experts_per_tok=2. The router is a bias-free linear.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {32000, 4096, 14336, 32, 32, 8,
                                          std::nullopt, 4096 * 32, false}));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> window,
      keys.OptionalSize("sliding_window", std::nullopt, 1, kMaxSpecDimension));
  UniformWindow(s, window.value_or(0));
  ASSIGN_OR_RETURN(s.experts,
                   keys.Size("num_local_experts", 8, 1, kMaxExperts));
  ASSIGN_OR_RETURN(s.top_k, keys.Size("num_experts_per_tok", 2, 1, s.experts));
  s.expert_ffn = s.ffn;
  s.sparse.assign(s.layers, true);
  return BuildDecoder(c, s);
}

absl::Status ConvertQwen2(const Json& config, Conversion& c) {
  c.config_class = "Qwen2Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Qwen2Config: vocab_size=151936, hidden_size=4096,
  // intermediate_size=22016, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=32, max_position_embeddings=32768,
  // tie_word_embeddings=False. Qwen2 has no head_dim key; its q, k and v
  // projections always have a bias, o_proj never.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {151936, 4096, 22016, 32, 32, 32,
                                          std::nullopt, 32768, false}));
  s.qkv_bias = true;
  RETURN_IF_ERROR(ReadQwenWindows(keys, s));
  return BuildDecoder(c, s);
}

absl::Status ConvertQwen2Moe(const Json& config, Conversion& c) {
  c.config_class = "Qwen2MoeConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Qwen2MoeConfig: vocab_size=151936, hidden_size=2048,
  // intermediate_size=5632 (dense layers), num_hidden_layers=24,
  // num_attention_heads=16, num_key_value_heads=16,
  // max_position_embeddings=32768, tie_word_embeddings=False.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {151936, 2048, 5632, 24, 16, 16,
                                          std::nullopt, 32768, false}));
  // qkv_bias=True (o_proj has none).
  ASSIGN_OR_RETURN(s.qkv_bias, keys.Flag("qkv_bias", true));
  RETURN_IF_ERROR(ReadQwenWindows(keys, s));
  // num_experts=60, num_experts_per_tok=4, moe_intermediate_size=1408,
  // shared_expert_intermediate_size=5632, decoder_sparse_step=1,
  // mlp_only_layers=None (no dense layers).
  ASSIGN_OR_RETURN(s.experts, keys.Size("num_experts", 60, 0, kMaxExperts));
  ASSIGN_OR_RETURN(s.top_k, keys.Size("num_experts_per_tok", 4, 1,
                                      std::max<uint64_t>(s.experts, 1)));
  ASSIGN_OR_RETURN(s.expert_ffn,
                   keys.Size("moe_intermediate_size", 1408, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.shared_ffn, keys.Size("shared_expert_intermediate_size",
                                           5632, 0, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t step,
                   keys.Size("decoder_sparse_step", 1, 1, kMaxLayers));
  std::vector<bool> dense_only(s.layers, false);
  if (keys.Has("mlp_only_layers") && !keys.Raw("mlp_only_layers").is_null()) {
    const Json& listed = keys.Raw("mlp_only_layers");
    if (!listed.is_array()) {
      return absl::InvalidArgumentError(
          "config.json: mlp_only_layers must be a list of layer indices");
    }
    for (const Json& index : listed) {
      if (!index.is_number_integer() || index.get<int64_t>() < 0 ||
          static_cast<uint64_t>(index.get<int64_t>()) >= s.layers) {
        return absl::InvalidArgumentError(absl::StrCat(
            "config.json: mlp_only_layers entry ", Abbreviated(index),
            " is out of range; allowed 0..", s.layers - 1));
      }
      dense_only[index.get<int64_t>()] = true;
    }
  }
  s.sparse.assign(s.layers, false);
  for (uint64_t i = 0; i < s.layers; ++i) {
    s.sparse[i] = !dense_only[i] && s.experts > 0 && (i + 1) % step == 0;
  }
  return BuildDecoder(c, s);
}

absl::Status ConvertQwen3(const Json& config, Conversion& c) {
  c.config_class = "Qwen3Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Qwen3Config: vocab_size=151936, hidden_size=4096,
  // intermediate_size=22016, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=32, head_dim=128, max_position_embeddings=32768,
  // tie_word_embeddings=False, attention_bias=False. Every layer has RMS
  // q_norm and k_norm of head_dim weights.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {151936, 4096, 22016, 32, 32, 32, 128,
                                          32768, false}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  s.qk_norm = true;
  RETURN_IF_ERROR(ReadQwenWindows(keys, s));
  return BuildDecoder(c, s);
}

absl::Status ConvertGemma(const Json& config, Conversion& c) {
  c.config_class = "GemmaConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // GemmaConfig: vocab_size=256000, hidden_size=3072,
  // intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16,
  // num_key_value_heads=16, head_dim=256, max_position_embeddings=8192,
  // tie_word_embeddings=True, attention_bias=False.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {256000, 3072, 24576, 28, 16, 16, 256,
                                          8192, true}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  return BuildDecoder(c, s);
}

absl::Status ConvertGemma2(const Json& config, Conversion& c) {
  c.config_class = "Gemma2Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Gemma2Config: vocab_size=256000, hidden_size=2304,
  // intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
  // num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
  // tie_word_embeddings=True, attention_bias=False, sliding_window=4096
  // on the even layers (layer_types=None). Four RMS norms per layer.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {256000, 2304, 9216, 26, 8, 4, 256, 8192, true}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  s.pre_feedforward_norm = s.post_feedforward_norm = true;
  ASSIGN_OR_RETURN(const uint64_t window,
                   keys.Size("sliding_window", 4096, 1, kMaxSpecDimension));
  RETURN_IF_ERROR(ReadPatternWindows(keys, s, window, 2));
  c.Note(
      "Gemma 2: logit soft-capping and query_pre_attn_scalar change no "
      "parameter count.");
  return BuildDecoder(c, s);
}

absl::Status ConvertGemma3Text(const Json& config, Conversion& c) {
  c.config_class = "Gemma3TextConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Gemma3TextConfig: vocab_size=262208, hidden_size=2304,
  // intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
  // num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
  // tie_word_embeddings=True, attention_bias=False, sliding_window=4096,
  // sliding_window_pattern=6 (five sliding layers, then a full one) unless
  // layer_types lists them. Gemma 2's four norms plus RMS q_norm and k_norm
  // of head_dim weights.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {262208, 2304, 9216, 26, 8, 4, 256, 131072, true}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  s.qk_norm = true;
  s.pre_feedforward_norm = s.post_feedforward_norm = true;
  ASSIGN_OR_RETURN(const uint64_t window,
                   keys.Size("sliding_window", 4096, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t period,
                   keys.Size("sliding_window_pattern", 6, 1, kMaxLayers));
  RETURN_IF_ERROR(ReadPatternWindows(keys, s, window, period));
  c.Note(
      "Gemma 3 text model: the local and global rotary bases and "
      "query_pre_attn_scalar change no parameter count.");
  return BuildDecoder(c, s);
}

absl::Status ConvertGranite(const Json& config, Conversion& c) {
  c.config_class = "GraniteConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // GraniteConfig: LlamaConfig's defaults (vocab_size=32000,
  // hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
  // num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=2048, tie_word_embeddings=False,
  // attention_bias=False, mlp_bias=False) and no head_dim key. Its
  // embedding, residual, attention and logits multipliers are scalars.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {32000, 4096, 11008, 32, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  ASSIGN_OR_RETURN(s.mlp_bias, keys.Flag("mlp_bias", false));
  return BuildDecoder(c, s);
}

absl::Status ConvertOlmo(const Json& config, Conversion& c) {
  c.config_class = "OlmoConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // OlmoConfig: vocab_size=50304, hidden_size=4096, intermediate_size=11008,
  // num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=2048, tie_word_embeddings=False,
  // attention_bias=False. OlmoLayerNorm has no weight or bias.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {50304, 4096, 11008, 32, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  s.norm_kind = v1::Norm::LAYER;
  s.norm_no_affine = true;
  return BuildDecoder(c, s);
}

absl::Status ConvertOlmo2(const Json& config, Conversion& c) {
  c.config_class = "Olmo2Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Olmo2Config: OlmoConfig's sizes (vocab_size=50304, hidden_size=4096,
  // intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=None, max_position_embeddings=2048,
  // tie_word_embeddings=False, attention_bias=False). RMS norms after
  // attention and after the MLP (none before), and RMS q_norm and k_norm
  // over the whole projections.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {50304, 4096, 11008, 32, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  s.input_norm = false;
  s.post_feedforward_norm = true;
  s.projection_qk_norm = true;
  return BuildDecoder(c, s);
}

absl::Status ConvertPhi3(const Json& config, Conversion& c) {
  c.config_class = "Phi3Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Phi3Config: vocab_size=32064, hidden_size=3072, intermediate_size=8192,
  // num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=4096, tie_word_embeddings=False,
  // sliding_window=None. No biases.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {32064, 3072, 8192, 32, 32, std::nullopt,
                             std::nullopt, 4096, false}));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> window,
      keys.OptionalSize("sliding_window", std::nullopt, 1, kMaxSpecDimension));
  UniformWindow(s, window.value_or(0));
  c.Note(
      "Phi-3's fused qkv_proj and gate_up_proj hold the same parameters as "
      "separate projections.");
  return BuildDecoder(c, s);
}

// ---- GPT-2 and GPT-NeoX ----------------------------------------------------

// A pre-LayerNorm decoder layer with biased attention and a 2-matrix MLP.
Layer BiasedDecoderLayer(absl::string_view name, uint64_t layers,
                         uint64_t hidden, uint64_t heads, uint64_t ffn,
                         bool attention_bias, const char* norm1,
                         const char* attn, const char* norm2) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer(norm1, v1::Norm::LAYER, hidden));
  parts.push_back(AttentionLayer(attn, hidden, heads, heads, hidden / heads,
                                 attention_bias, attention_bias,
                                 /*fused=*/true));
  parts.push_back(NormLayer(norm2, v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("mlp", hidden, ffn, /*gated=*/false, /*bias=*/true));
  return BlockLayer(name, static_cast<uint32_t>(layers), std::move(parts));
}

absl::Status CheckHeadsDivide(uint64_t hidden, uint64_t heads,
                              absl::string_view hidden_key,
                              absl::string_view heads_key) {
  if (hidden % heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", heads_key, " = ", heads,
                     " does not divide ", hidden_key, " = ", hidden));
  }
  return absl::OkStatus();
}

absl::Status ConvertGpt2(const Json& config, Conversion& c) {
  c.config_class = "GPT2Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // GPT2Config: vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12,
  // n_head=12, n_inner=None (4 * n_embd); tie_word_embeddings keeps
  // PretrainedConfig's True.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 50257, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t n_positions,
                   keys.Size("n_positions", 1024, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("n_embd", 768, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("n_layer", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads, keys.Size("n_head", 12, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(hidden, heads, "n_embd", "n_head"));
  ASSIGN_OR_RETURN(std::optional<uint64_t> inner,
                   keys.OptionalSize("n_inner", std::nullopt, 1, kMaxFfn));
  const uint64_t ffn = inner.value_or(4 * hidden);
  if (!inner.has_value()) keys.AssumeDerived("n_inner", ffn, "4 * n_embd");
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, n_positions, "n_positions"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("transformer.wte", vocab, hidden);
  *spec.add_layers() = ParametersLayer("transformer.wpe", n_positions * hidden);
  *spec.add_layers() =
      BiasedDecoderLayer("transformer.h", layers, hidden, heads, ffn, true,
                         "ln_1", "attn", "ln_2");
  *spec.add_layers() = NormLayer("transformer.ln_f", v1::Norm::LAYER, hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", hidden, vocab, tied);
  c.Note(absl::StrCat(
      "GPT2LMHeadModel: learned position table (n_positions x n_embd) as "
      "parameters, Conv1D projections with biases, ",
      tied ? "LM head tied to wte" : "untied LM head",
      ". Attention is marked fused (transformers' default "
      "scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertGptNeox(const Json& config, Conversion& c) {
  c.config_class = "GPTNeoXConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // GPTNeoXConfig: vocab_size=50432, hidden_size=6144, num_hidden_layers=44,
  // num_attention_heads=64, intermediate_size=24576,
  // max_position_embeddings=2048, tie_word_embeddings=False,
  // attention_bias=True. The MLP always has biases.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 50432, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("hidden_size", 6144, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("num_hidden_layers", 44, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("num_attention_heads", 64, 1, kMaxHeads));
  RETURN_IF_ERROR(
      CheckHeadsDivide(hidden, heads, "hidden_size", "num_attention_heads"));
  ASSIGN_OR_RETURN(const uint64_t ffn,
                   keys.Size("intermediate_size", 24576, 1, kMaxFfn));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 2048, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   FreePositions(c, max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("gpt_neox.embed_in", vocab, hidden);
  *spec.add_layers() = BiasedDecoderLayer(
      "gpt_neox.layers", layers, hidden, heads, ffn, attention_bias,
      "input_layernorm", "attention", "post_attention_layernorm");
  *spec.add_layers() =
      NormLayer("gpt_neox.final_layer_norm", v1::Norm::LAYER, hidden);
  *spec.add_layers() = LmHeadLayer("embed_out", hidden, vocab, tied);
  c.Note(
      "GPTNeoXForCausalLM: the parallel residual (use_parallel_residual) and "
      "partial rotary embeddings change no parameter count. Attention is "
      "marked fused (transformers' default scaled_dot_product_attention).");
  return absl::OkStatus();
}

// ---- OPT -------------------------------------------------------------------

absl::Status ConvertOpt(const Json& config, Conversion& c) {
  c.config_class = "OPTConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // OPTConfig: vocab_size=50272, hidden_size=768, num_hidden_layers=12,
  // ffn_dim=3072, max_position_embeddings=2048, do_layer_norm_before=True,
  // _remove_final_layer_norm=False, word_embed_proj_dim=None (hidden_size),
  // num_attention_heads=12, enable_bias=True,
  // layer_norm_elementwise_affine=True; tie_word_embeddings keeps
  // PretrainedConfig's True.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 50272, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("hidden_size", 768, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("num_hidden_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t ffn, keys.Size("ffn_dim", 3072, 1, kMaxFfn));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 2048, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const bool norm_before,
                   keys.Flag("do_layer_norm_before", true));
  ASSIGN_OR_RETURN(const bool remove_final,
                   keys.Flag("_remove_final_layer_norm", false));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> proj_key,
      keys.OptionalSize("word_embed_proj_dim", std::nullopt, 1, kMaxHidden));
  const uint64_t proj = proj_key.value_or(hidden);
  if (!proj_key.has_value()) {
    keys.AssumeDerived("word_embed_proj_dim", proj, "hidden_size");
  }
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("num_attention_heads", 12, 1, kMaxHeads));
  RETURN_IF_ERROR(
      CheckHeadsDivide(hidden, heads, "hidden_size", "num_attention_heads"));
  ASSIGN_OR_RETURN(const bool bias, keys.Flag("enable_bias", true));
  ASSIGN_OR_RETURN(const bool affine,
                   keys.Flag("layer_norm_elementwise_affine", true));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, max_positions, "max_position_embeddings"));
  auto norm = [&](absl::string_view name) {
    Layer layer = NormLayer(name, v1::Norm::LAYER, hidden);
    layer.mutable_norm()->set_no_affine(!affine);
    return layer;
  };
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() =
      EmbeddingLayer("model.decoder.embed_tokens", vocab, proj);
  // OPTLearnedPositionalEmbedding keeps 2 rows before the first position.
  *spec.add_layers() = ParametersLayer("model.decoder.embed_positions",
                                       (max_positions + 2) * hidden);
  if (proj != hidden) {
    *spec.add_layers() =
        LinearLayer("model.decoder.project_in", proj, hidden, false);
  }
  std::vector<Layer> parts;
  parts.push_back(AttentionLayer("self_attn", hidden, heads, heads,
                                 hidden / heads, bias, bias, /*fused=*/true));
  parts.push_back(norm("self_attn_layer_norm"));
  parts.push_back(MlpLayer("fc1+fc2", hidden, ffn, false, bias));
  parts.push_back(norm("final_layer_norm"));
  *spec.add_layers() = BlockLayer(
      "model.decoder.layers", static_cast<uint32_t>(layers), std::move(parts));
  if (norm_before && !remove_final) {
    *spec.add_layers() = norm("model.decoder.final_layer_norm");
  }
  if (proj != hidden) {
    *spec.add_layers() =
        LinearLayer("model.decoder.project_out", hidden, proj, false);
  }
  *spec.add_layers() = LmHeadLayer("lm_head", proj, vocab, tied);
  c.Note(absl::StrCat(
      "OPTForCausalLM: learned position table of max_position_embeddings + 2 "
      "rows, biased projections, ",
      norm_before ? "pre-LayerNorm layers" : "post-LayerNorm layers",
      proj != hidden ? ", project_in/project_out around the stack" : "",
      tied ? ", LM head tied to embed_tokens" : ", untied LM head",
      ". Attention is marked fused (transformers' default "
      "scaled_dot_product_attention)."));
  return absl::OkStatus();
}

// ---- Phi (1, 1.5, 2) -------------------------------------------------------

absl::Status ConvertPhi(const Json& config, Conversion& c) {
  c.config_class = "PhiConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // PhiConfig: vocab_size=51200, hidden_size=2048, intermediate_size=8192,
  // num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=2048, tie_word_embeddings=False,
  // qk_layernorm=False. PhiConfig has no head_dim key.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {51200, 2048, 8192, 24, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  ASSIGN_OR_RETURN(const bool qk_layernorm, keys.Flag("qk_layernorm", false));
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", s.vocab, s.hidden);
  std::vector<Layer> parts;
  parts.push_back(NormLayer("input_layernorm", v1::Norm::LAYER, s.hidden));
  parts.push_back(AttentionLayer("self_attn", s.hidden, s.heads, s.kv_heads,
                                 s.head_dim, true, true, /*fused=*/true));
  if (qk_layernorm) {
    // q_layernorm and k_layernorm: LayerNorms over head_dim, shared by the
    // heads.
    parts.push_back(
        NormLayer("self_attn.q_layernorm", v1::Norm::LAYER, s.head_dim));
    parts.push_back(
        NormLayer("self_attn.k_layernorm", v1::Norm::LAYER, s.head_dim));
  }
  parts.push_back(MlpLayer("mlp", s.hidden, s.ffn, false, true));
  *spec.add_layers() = BlockLayer(
      "model.layers", static_cast<uint32_t>(s.layers), std::move(parts));
  *spec.add_layers() =
      NormLayer("model.final_layernorm", v1::Norm::LAYER, s.hidden);
  Layer head = LmHeadLayer("lm_head", s.hidden, s.vocab, s.tied);
  head.mutable_linear()->set_bias(true);
  *spec.add_layers() = std::move(head);
  c.Note(absl::StrCat(
      "PhiForCausalLM: one LayerNorm per layer feeding attention and MLP in "
      "parallel, biased projections (q, k, v, dense, fc1, fc2), ",
      s.tied ? "LM head tied to the token embedding with its own bias"
             : "untied LM head with a bias",
      ". Partial rotary embeddings have no parameters. Attention is marked "
      "fused (transformers' default scaled_dot_product_attention)."));
  return absl::OkStatus();
}

// ---- BLOOM, Falcon, StableLM, StarCoder2, GPT-BigCode ---------------------

// The layer and head counts under their transformers names or the older
// n_layer / n_head ones the attribute maps accept.
absl::StatusOr<uint64_t> SizeEither(ConfigKeys& keys, const char* key,
                                    const char* alias, uint64_t default_value,
                                    uint64_t max_value) {
  return keys.Has(alias) && !keys.Has(key)
             ? keys.Size(alias, default_value, 1, max_value)
             : keys.Size(key, default_value, 1, max_value);
}

absl::Status ConvertBloom(const Json& config, Conversion& c) {
  c.config_class = "BloomConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // BloomConfig: vocab_size=250880, hidden_size=64 (n_embed in older
  // configs), n_layer=2, n_head=8; tie_word_embeddings keeps
  // PretrainedConfig's True. The MLP is always 4 * hidden_size wide and
  // every linear has a bias; ALiBi has no parameters.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 250880, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   SizeEither(keys, "hidden_size", "n_embed", 64, kMaxHidden));
  ASSIGN_OR_RETURN(
      const uint64_t layers,
      SizeEither(keys, "n_layer", "num_hidden_layers", 2, kMaxLayers));
  ASSIGN_OR_RETURN(
      const uint64_t heads,
      SizeEither(keys, "n_head", "num_attention_heads", 8, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(hidden, heads, "hidden_size", "n_head"));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  // ALiBi sets no maximum; BLOOM was trained on 2048-token sequences
  // (seq_length in the configs that carry it).
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> seq_length,
      keys.OptionalSize("seq_length", std::nullopt, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(
          c, seq_length.value_or(2048),
          seq_length.has_value() ? "seq_length" : "BLOOM's training length"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() =
      EmbeddingLayer("transformer.word_embeddings", vocab, hidden);
  *spec.add_layers() = NormLayer("transformer.word_embeddings_layernorm",
                                 v1::Norm::LAYER, hidden);
  std::vector<Layer> parts;
  parts.push_back(NormLayer("input_layernorm", v1::Norm::LAYER, hidden));
  // ALiBi is added to an explicit score matrix (baddbmm), not fused.
  parts.push_back(AttentionLayer("self_attention", hidden, heads, heads,
                                 hidden / heads, true, true,
                                 /*fused=*/false));
  parts.push_back(
      NormLayer("post_attention_layernorm", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("mlp", hidden, 4 * hidden, false, true));
  *spec.add_layers() = BlockLayer(
      "transformer.h", static_cast<uint32_t>(layers), std::move(parts));
  *spec.add_layers() = NormLayer("transformer.ln_f", v1::Norm::LAYER, hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", hidden, vocab, tied);
  c.Note(absl::StrCat(
      "BloomForCausalLM: LayerNorm after the embedding, biased fused "
      "query_key_value and MLP, ",
      tied ? "LM head tied to word_embeddings" : "untied LM head",
      ". ALiBi has no parameters; its bias goes into an explicit score "
      "matrix, so attention is not marked fused."));
  return absl::OkStatus();
}

absl::Status ConvertFalcon(const Json& config, Conversion& c) {
  c.config_class = "FalconConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // FalconConfig: vocab_size=65024, hidden_size=4544,
  // num_hidden_layers=32 (n_layer), num_attention_heads=71 (n_head),
  // new_decoder_architecture=False, multi_query=True, parallel_attn=True,
  // num_kv_heads=None (num_attention_heads), num_ln_in_parallel_attn=None
  // (2 in the new architecture), bias=False, alibi=False,
  // ffn_hidden_size=None (4 * hidden_size), max_position_embeddings=2048,
  // tie_word_embeddings=True.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 65024, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("hidden_size", 4544, 1, kMaxHidden));
  ASSIGN_OR_RETURN(
      const uint64_t layers,
      SizeEither(keys, "num_hidden_layers", "n_layer", 32, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads, SizeEither(keys, "num_attention_heads",
                                                    "n_head", 71, kMaxHeads));
  RETURN_IF_ERROR(
      CheckHeadsDivide(hidden, heads, "hidden_size", "num_attention_heads"));
  ASSIGN_OR_RETURN(const bool new_arch,
                   keys.Flag("new_decoder_architecture", false));
  ASSIGN_OR_RETURN(const bool multi_query, keys.Flag("multi_query", true));
  ASSIGN_OR_RETURN(const bool parallel, keys.Flag("parallel_attn", true));
  ASSIGN_OR_RETURN(const bool bias, keys.Flag("bias", false));
  ASSIGN_OR_RETURN(const bool alibi, keys.Flag("alibi", false));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> kv_key,
      keys.OptionalSize("num_kv_heads", std::nullopt, 1, kMaxHeads));
  // The new architecture groups keys and values in num_kv_heads; the old
  // one shares one of each (multi_query) or keeps one per head.
  const uint64_t kv_heads = new_arch      ? kv_key.value_or(heads)
                            : multi_query ? 1
                                          : heads;
  if (kv_heads > heads || heads % kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: num_kv_heads = ", kv_heads,
                     " must divide num_attention_heads = ", heads));
  }
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> ln_key,
      keys.OptionalSize("num_ln_in_parallel_attn", std::nullopt, 1, 2));
  const uint64_t parallel_norms = ln_key.value_or(2);
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> ffn_key,
      keys.OptionalSize("ffn_hidden_size", std::nullopt, 1, kMaxFfn));
  const uint64_t ffn = ffn_key.value_or(4 * hidden);
  if (!ffn_key.has_value()) {
    keys.AssumeDerived("ffn_hidden_size", ffn, "4 * hidden_size");
  }
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 2048, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   FreePositions(c, max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() =
      EmbeddingLayer("transformer.word_embeddings", vocab, hidden);
  std::vector<Layer> parts;
  if (new_arch && parallel_norms == 2) {
    parts.push_back(NormLayer("ln_attn", v1::Norm::LAYER, hidden));
    parts.push_back(NormLayer("ln_mlp", v1::Norm::LAYER, hidden));
  } else {
    parts.push_back(NormLayer("input_layernorm", v1::Norm::LAYER, hidden));
  }
  parts.push_back(AttentionLayer("self_attention", hidden, heads, kv_heads,
                                 hidden / heads, bias, bias,
                                 /*fused=*/!alibi));
  if (!new_arch && !parallel) {
    parts.push_back(
        NormLayer("post_attention_layernorm", v1::Norm::LAYER, hidden));
  }
  parts.push_back(MlpLayer("mlp", hidden, ffn, false, bias));
  *spec.add_layers() = BlockLayer(
      "transformer.h", static_cast<uint32_t>(layers), std::move(parts));
  *spec.add_layers() = NormLayer("transformer.ln_f", v1::Norm::LAYER, hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", hidden, vocab, tied);
  c.Note(absl::StrCat(
      "FalconForCausalLM: ", kv_heads, " key/value head(s) for ", heads,
      " query heads, ",
      parallel || new_arch ? "attention and MLP in parallel"
                           : "attention then MLP",
      ", ", bias ? "biased" : "bias-free", " projections, ",
      tied ? "LM head tied to word_embeddings" : "untied LM head", ". ",
      alibi ? "ALiBi attention is not marked fused."
            : "Attention is marked fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertStableLm(const Json& config, Conversion& c) {
  c.config_class = "StableLmConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // StableLmConfig: vocab_size=50304, hidden_size=2560,
  // intermediate_size=6912, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=32, max_position_embeddings=4096,
  // tie_word_embeddings=False, use_qkv_bias=False, qk_layernorm=False,
  // use_parallel_residual=False. LayerNorms with bias, o_proj and the gated
  // MLP without.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {50304, 2560, 6912, 32, 32, 32,
                                          std::nullopt, 4096, false}));
  ASSIGN_OR_RETURN(const bool qkv_bias, keys.Flag("use_qkv_bias", false));
  ASSIGN_OR_RETURN(const bool qk_layernorm, keys.Flag("qk_layernorm", false));
  ASSIGN_OR_RETURN(const bool parallel,
                   keys.Flag("use_parallel_residual", false));
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", s.vocab, s.hidden);
  std::vector<Layer> parts;
  parts.push_back(NormLayer("input_layernorm", v1::Norm::LAYER, s.hidden));
  parts.push_back(AttentionLayer("self_attn", s.hidden, s.heads, s.kv_heads,
                                 s.head_dim, qkv_bias, false,
                                 /*fused=*/true));
  if (qk_layernorm) {
    // One bias-free LayerNorm over head_dim per query head and per key head.
    Layer q = NormLayer("self_attn.q_layernorm", v1::Norm::LAYER,
                        s.heads * s.head_dim);
    q.mutable_norm()->set_no_bias(true);
    parts.push_back(std::move(q));
    Layer k = NormLayer("self_attn.k_layernorm", v1::Norm::LAYER,
                        s.kv_heads * s.head_dim);
    k.mutable_norm()->set_no_bias(true);
    parts.push_back(std::move(k));
  }
  if (!parallel) {
    parts.push_back(
        NormLayer("post_attention_layernorm", v1::Norm::LAYER, s.hidden));
  }
  parts.push_back(MlpLayer("mlp", s.hidden, s.ffn, true, false));
  *spec.add_layers() = BlockLayer(
      "model.layers", static_cast<uint32_t>(s.layers), std::move(parts));
  *spec.add_layers() = NormLayer("model.norm", v1::Norm::LAYER, s.hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", s.hidden, s.vocab, s.tied);
  c.Note(absl::StrCat(
      "StableLmForCausalLM: LayerNorms with bias, gated MLP, ",
      qkv_bias ? "biased q, k and v, " : "",
      parallel ? "attention and MLP in parallel, " : "",
      s.tied ? "LM head tied to embed_tokens" : "untied LM head",
      ". Partial rotary embeddings have no parameters. Attention is marked "
      "fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertStarcoder2(const Json& config, Conversion& c) {
  c.config_class = "Starcoder2Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // Starcoder2Config: vocab_size=49152, hidden_size=3072,
  // intermediate_size=12288, num_hidden_layers=30, num_attention_heads=24,
  // num_key_value_heads=2, max_position_embeddings=4096,
  // tie_word_embeddings=True, sliding_window=None, use_bias=True.
  // LayerNorms with bias, a 2-matrix MLP (c_fc, c_proj).
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {49152, 3072, 12288, 30, 24, 2,
                                          std::nullopt, 4096, true}));
  ASSIGN_OR_RETURN(const bool bias, keys.Flag("use_bias", true));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> window,
      keys.OptionalSize("sliding_window", std::nullopt, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", s.vocab, s.hidden);
  std::vector<Layer> parts;
  parts.push_back(NormLayer("input_layernorm", v1::Norm::LAYER, s.hidden));
  Layer attn = AttentionLayer("self_attn", s.hidden, s.heads, s.kv_heads,
                              s.head_dim, bias, bias, /*fused=*/true);
  if (window.has_value()) attn.mutable_attention()->set_window(*window);
  parts.push_back(std::move(attn));
  parts.push_back(
      NormLayer("post_attention_layernorm", v1::Norm::LAYER, s.hidden));
  parts.push_back(MlpLayer("mlp", s.hidden, s.ffn, false, bias));
  *spec.add_layers() = BlockLayer(
      "model.layers", static_cast<uint32_t>(s.layers), std::move(parts));
  *spec.add_layers() = NormLayer("model.norm", v1::Norm::LAYER, s.hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", s.hidden, s.vocab, s.tied);
  c.Note(absl::StrCat(
      "Starcoder2ForCausalLM: grouped-query attention, LayerNorms, a ",
      bias ? "biased " : "", "2-matrix MLP, ",
      s.tied ? "LM head tied to embed_tokens" : "untied LM head",
      ". Attention is marked fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertGptBigCode(const Json& config, Conversion& c) {
  c.config_class = "GPTBigCodeConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // GPTBigCodeConfig: vocab_size=50257, n_positions=1024, n_embd=768,
  // n_layer=12, n_head=12, n_inner=None (4 * n_embd), multi_query=True;
  // tie_word_embeddings keeps PretrainedConfig's True. GPT-2's layout
  // with one shared key/value head under multi_query.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 50257, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t n_positions,
                   keys.Size("n_positions", 1024, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("n_embd", 768, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("n_layer", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads, keys.Size("n_head", 12, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(hidden, heads, "n_embd", "n_head"));
  ASSIGN_OR_RETURN(std::optional<uint64_t> inner,
                   keys.OptionalSize("n_inner", std::nullopt, 1, kMaxFfn));
  const uint64_t ffn = inner.value_or(4 * hidden);
  if (!inner.has_value()) keys.AssumeDerived("n_inner", ffn, "4 * n_embd");
  ASSIGN_OR_RETURN(const bool multi_query, keys.Flag("multi_query", true));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, n_positions, "n_positions"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("transformer.wte", vocab, hidden);
  *spec.add_layers() = ParametersLayer("transformer.wpe", n_positions * hidden);
  std::vector<Layer> parts;
  parts.push_back(NormLayer("ln_1", v1::Norm::LAYER, hidden));
  parts.push_back(AttentionLayer("attn", hidden, heads, multi_query ? 1 : heads,
                                 hidden / heads, true, true, /*fused=*/true));
  parts.push_back(NormLayer("ln_2", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("mlp", hidden, ffn, false, true));
  *spec.add_layers() = BlockLayer(
      "transformer.h", static_cast<uint32_t>(layers), std::move(parts));
  *spec.add_layers() = NormLayer("transformer.ln_f", v1::Norm::LAYER, hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", hidden, vocab, tied);
  c.Note(absl::StrCat(
      "GPTBigCodeForCausalLM: GPT-2's layout (learned position table, "
      "biased projections) with ",
      multi_query ? "one shared key/value head (multi-query attention)"
                  : "a key/value head per query head",
      ", ", tied ? "LM head tied to wte" : "untied LM head",
      ". Attention is marked fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

// ---- MPT -------------------------------------------------------------------

absl::Status ConvertMpt(const Json& config, Conversion& c) {
  c.config_class = "MptConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // MptConfig: d_model=2048, n_heads=16, n_layers=24, expansion_ratio=4,
  // max_seq_len=2048, vocab_size=50368; tie_word_embeddings keeps
  // PretrainedConfig's True. transformers' MPT has no biases at all: its
  // LayerNorms drop theirs and every linear is bias-free; ALiBi has no
  // parameters.
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("d_model", 2048, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("n_heads", 16, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(hidden, heads, "d_model", "n_heads"));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("n_layers", 24, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t ratio,
                   keys.Size("expansion_ratio", 4, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t max_seq_len,
                   keys.Size("max_seq_len", 2048, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 50368, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   FreePositions(c, max_seq_len, "max_seq_len"));
  auto norm = [hidden](absl::string_view name) {
    Layer layer = NormLayer(name, v1::Norm::LAYER, hidden);
    layer.mutable_norm()->set_no_bias(true);
    return layer;
  };
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("transformer.wte", vocab, hidden);
  std::vector<Layer> parts;
  parts.push_back(norm("norm_1"));
  // ALiBi goes into an explicit score matrix: not fused.
  parts.push_back(AttentionLayer("attn", hidden, heads, heads, hidden / heads,
                                 false, false, /*fused=*/false));
  parts.push_back(norm("norm_2"));
  parts.push_back(MlpLayer("ffn", hidden, ratio * hidden, false, false));
  *spec.add_layers() = BlockLayer(
      "transformer.blocks", static_cast<uint32_t>(layers), std::move(parts));
  *spec.add_layers() = norm("transformer.norm_f");
  *spec.add_layers() = LmHeadLayer("lm_head", hidden, vocab, tied);
  c.Note(absl::StrCat(
      "MptForCausalLM: bias-free LayerNorms and linears, fused Wqkv, ",
      tied ? "LM head tied to wte" : "untied LM head",
      ". ALiBi has no parameters; its bias goes into an explicit score "
      "matrix, so attention is not marked fused."));
  return absl::OkStatus();
}

// ---- DeBERTa-v2 / v3 -------------------------------------------------------

absl::Status ConvertDebertaV2(const Json& config, Conversion& c) {
  c.config_class = "DebertaV2Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // DebertaV2Config: vocab_size=128100, hidden_size=1536,
  // num_hidden_layers=24, num_attention_heads=24, intermediate_size=6144,
  // max_position_embeddings=512, type_vocab_size=0,
  // position_biased_input=True, relative_attention=False,
  // max_relative_positions=-1, pos_att_type=None; read through getattr:
  // embedding_size (hidden_size), position_buckets=-1, share_att_key=False,
  // norm_rel_ebd="none", conv_kernel_size=0.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 128100, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("hidden_size", 1536, 1, kMaxHidden));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> embedding_key,
      keys.OptionalSize("embedding_size", std::nullopt, 1, kMaxHidden));
  const uint64_t embedding = embedding_key.value_or(hidden);
  if (!embedding_key.has_value()) {
    keys.AssumeDerived("embedding_size", embedding, "hidden_size");
  }
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("num_hidden_layers", 24, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("num_attention_heads", 24, 1, kMaxHeads));
  RETURN_IF_ERROR(
      CheckHeadsDivide(hidden, heads, "hidden_size", "num_attention_heads"));
  ASSIGN_OR_RETURN(const uint64_t ffn,
                   keys.Size("intermediate_size", 6144, 1, kMaxFfn));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 512, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t type_vocab,
                   keys.Size("type_vocab_size", 0, 0, kMaxVocab));
  ASSIGN_OR_RETURN(const bool biased_input,
                   keys.Flag("position_biased_input", true));
  ASSIGN_OR_RETURN(const bool relative, keys.Flag("relative_attention", false));
  // max_relative_positions and position_buckets take -1 for "unset".
  auto signed_key = [&keys](const char* key,
                            int64_t default_value) -> absl::StatusOr<int64_t> {
    if (!keys.Has(key)) return default_value;
    const Json& v = keys.Raw(key);
    if (!v.is_number_integer() || v.get<int64_t>() < -1 ||
        v.get<int64_t>() > static_cast<int64_t>(kMaxSpecDimension)) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", key, " = ", Abbreviated(v),
                       " is out of range; allowed -1..", kMaxSpecDimension));
    }
    return v.get<int64_t>();
  };
  ASSIGN_OR_RETURN(const int64_t max_relative,
                   signed_key("max_relative_positions", -1));
  ASSIGN_OR_RETURN(const int64_t buckets, signed_key("position_buckets", -1));
  ASSIGN_OR_RETURN(const bool share_att_key, keys.Flag("share_att_key", false));
  ASSIGN_OR_RETURN(const std::string norm_rel_ebd,
                   keys.Text("norm_rel_ebd", "none"));
  ASSIGN_OR_RETURN(const uint64_t conv_kernel,
                   keys.Size("conv_kernel_size", 0, 0, kMaxPatch));
  if (conv_kernel != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: conv_kernel_size = ", conv_kernel,
        " is not supported (DeBERTa-v2's convolution layer); allowed 0"));
  }
  // pos_att_type: a list, or a "|"-separated string in older configs.
  bool c2p = false;
  bool p2c = false;
  if (keys.Has("pos_att_type") && !keys.Raw("pos_att_type").is_null()) {
    const Json& types = keys.Raw("pos_att_type");
    std::vector<std::string> names;
    if (types.is_string()) {
      names = absl::StrSplit(types.get<std::string>(), '|');
    } else if (types.is_array()) {
      for (const Json& t : types) {
        if (t.is_string()) names.push_back(t.get<std::string>());
      }
    }
    for (const std::string& name : names) {
      const std::string lower = absl::AsciiStrToLower(name);
      c2p = c2p || lower == "c2p";
      p2c = p2c || lower == "p2c";
    }
  }
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() =
      EmbeddingLayer("deberta.embeddings.word_embeddings", vocab, embedding);
  if (biased_input) {
    *spec.add_layers() = ParametersLayer(
        "deberta.embeddings.position_embeddings", max_positions * embedding);
  }
  if (type_vocab > 0) {
    *spec.add_layers() = ParametersLayer(
        "deberta.embeddings.token_type_embeddings", type_vocab * embedding);
  }
  if (embedding != hidden) {
    *spec.add_layers() =
        LinearLayer("deberta.embeddings.embed_proj", embedding, hidden, false);
  }
  *spec.add_layers() =
      NormLayer("deberta.embeddings.LayerNorm", v1::Norm::LAYER, hidden);
  if (relative) {
    const uint64_t max_rel =
        max_relative < 1 ? max_positions : static_cast<uint64_t>(max_relative);
    const uint64_t rel_rows =
        buckets > 0 ? 2 * static_cast<uint64_t>(buckets) : 2 * max_rel;
    *spec.add_layers() =
        ParametersLayer("deberta.encoder.rel_embeddings", rel_rows * hidden);
    if (absl::StrContains(absl::AsciiStrToLower(norm_rel_ebd), "layer_norm")) {
      *spec.add_layers() =
          NormLayer("deberta.encoder.LayerNorm", v1::Norm::LAYER, hidden);
    }
  }
  std::vector<Layer> parts;
  // Disentangled attention adds position terms to an explicit score matrix.
  parts.push_back(AttentionLayer("attention", hidden, heads, heads,
                                 hidden / heads, true, true,
                                 /*fused=*/false));
  if (relative && !share_att_key) {
    if (c2p) {
      parts.push_back(
          LinearLayer("attention.self.pos_key_proj", hidden, hidden, true));
    }
    if (p2c) {
      parts.push_back(
          LinearLayer("attention.self.pos_query_proj", hidden, hidden, true));
    }
  }
  parts.push_back(
      NormLayer("attention.output.LayerNorm", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("intermediate+output", hidden, ffn, false, true));
  parts.push_back(NormLayer("output.LayerNorm", v1::Norm::LAYER, hidden));
  *spec.add_layers() = BlockLayer(
      "deberta.encoder.layer", static_cast<uint32_t>(layers), std::move(parts));
  c.Note(
      "DebertaV2Model (no pooler; a classifier or masked-LM head named in "
      "architectures is not modelled): relative position embeddings shared "
      "by the layers, disentangled attention over an explicit score "
      "matrix (not marked fused).");
  return absl::OkStatus();
}

// ---- BART and Whisper (encoder-decoder) ------------------------------------

absl::Status ConvertBart(const Json& config, Conversion& c) {
  c.config_class = "BartConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // BartConfig: vocab_size=50265, max_position_embeddings=1024,
  // encoder_layers=12, encoder_ffn_dim=4096, encoder_attention_heads=16,
  // decoder_layers=12, decoder_ffn_dim=4096, decoder_attention_heads=16,
  // d_model=1024; tie_word_embeddings keeps PretrainedConfig's True.
  // Every linear has a bias; learned positions keep 2 rows before the
  // first.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 50265, 1, kMaxVocab));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 1024, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t d, keys.Size("d_model", 1024, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t enc_layers,
                   keys.Size("encoder_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t enc_ffn,
                   keys.Size("encoder_ffn_dim", 4096, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t enc_heads,
                   keys.Size("encoder_attention_heads", 16, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t dec_layers,
                   keys.Size("decoder_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t dec_ffn,
                   keys.Size("decoder_ffn_dim", 4096, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t dec_heads,
                   keys.Size("decoder_attention_heads", 16, 1, kMaxHeads));
  RETURN_IF_ERROR(
      CheckHeadsDivide(d, enc_heads, "d_model", "encoder_attention_heads"));
  RETURN_IF_ERROR(
      CheckHeadsDivide(d, dec_heads, "d_model", "decoder_attention_heads"));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, max_positions, "max_position_embeddings"));
  auto attention = [d](absl::string_view name, uint64_t heads) {
    return AttentionLayer(name, d, heads, heads, d / heads, true, true,
                          /*fused=*/true);
  };
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("model.shared", vocab, d);
  for (const char* side : {"encoder", "decoder"}) {
    const bool decoder = absl::string_view(side) == "decoder";
    const std::string prefix = absl::StrCat("model.", side, ".");
    if (decoder) {
      // The decoder looks up the same shared table.
      Layer lookup = Named("model.decoder.embed_tokens (shared) + dropout");
      lookup.mutable_elementwise()->set_op(v1::Elementwise::DROPOUT);
      lookup.mutable_elementwise()->set_dim(d);
      *spec.add_layers() = std::move(lookup);
    }
    *spec.add_layers() =
        ParametersLayer(prefix + "embed_positions", (max_positions + 2) * d);
    *spec.add_layers() =
        NormLayer(prefix + "layernorm_embedding", v1::Norm::LAYER, d);
    std::vector<Layer> parts;
    parts.push_back(attention("self_attn", decoder ? dec_heads : enc_heads));
    parts.push_back(NormLayer("self_attn_layer_norm", v1::Norm::LAYER, d));
    if (decoder) {
      parts.push_back(attention("encoder_attn", dec_heads));
      parts.push_back(NormLayer("encoder_attn_layer_norm", v1::Norm::LAYER, d));
    }
    parts.push_back(
        MlpLayer("fc1+fc2", d, decoder ? dec_ffn : enc_ffn, false, true));
    parts.push_back(NormLayer("final_layer_norm", v1::Norm::LAYER, d));
    *spec.add_layers() =
        BlockLayer(prefix + "layers",
                   static_cast<uint32_t>(decoder ? dec_layers : enc_layers),
                   std::move(parts));
  }
  *spec.add_layers() = LmHeadLayer("lm_head", d, vocab, tied);
  c.Note(absl::StrCat(
      "BartForConditionalGeneration: post-LayerNorm encoder and decoder "
      "sharing the token embedding, learned position tables of "
      "max_position_embeddings + 2 rows, biased projections, ",
      tied ? "LM head tied to the shared embedding (final_logits_bias is a "
             "buffer)"
           : "untied LM head",
      ". The decoder runs as many positions as the encoder. Attention is "
      "marked fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertWhisper(const Json& config, Conversion& c) {
  c.config_class = "WhisperConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // WhisperConfig: vocab_size=51865, num_mel_bins=80, encoder_layers=4,
  // encoder_attention_heads=6, decoder_layers=4, decoder_attention_heads=6,
  // decoder_ffn_dim=1536, encoder_ffn_dim=1536, d_model=384,
  // max_source_positions=1500, max_target_positions=448;
  // tie_word_embeddings keeps PretrainedConfig's True.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 51865, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t mels,
                   keys.Size("num_mel_bins", 80, 1, kMaxChannels));
  ASSIGN_OR_RETURN(const uint64_t d, keys.Size("d_model", 384, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t enc_layers,
                   keys.Size("encoder_layers", 4, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t enc_heads,
                   keys.Size("encoder_attention_heads", 6, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t enc_ffn,
                   keys.Size("encoder_ffn_dim", 1536, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t dec_layers,
                   keys.Size("decoder_layers", 4, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t dec_heads,
                   keys.Size("decoder_attention_heads", 6, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t dec_ffn,
                   keys.Size("decoder_ffn_dim", 1536, 1, kMaxFfn));
  RETURN_IF_ERROR(
      CheckHeadsDivide(d, enc_heads, "d_model", "encoder_attention_heads"));
  RETURN_IF_ERROR(
      CheckHeadsDivide(d, dec_heads, "d_model", "decoder_attention_heads"));
  ASSIGN_OR_RETURN(
      const uint64_t source,
      keys.Size("max_source_positions", 1500, 1, kMaxSpecDimension / 2));
  ASSIGN_OR_RETURN(const uint64_t target, keys.Size("max_target_positions", 448,
                                                    1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  // seq_len sets the decoder's tokens; the encoder always sees 30 s of
  // audio, 2 * max_source_positions mel frames.
  ASSIGN_OR_RETURN(const uint64_t text,
                   TablePositions(c, target, "max_target_positions"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(source);
  spec.set_input_source(absl::StrCat(
      2 * source, " mel frames (", mels, " bins) per sample, ", source,
      " encoder positions after the stride-2 convolution, and ",
      spec.input_source()));
  // Whisper's q, v and out projections have biases, k_proj has none.
  auto attention = [d](absl::string_view name, uint64_t heads,
                       std::vector<Layer>* parts) {
    parts->push_back(AttentionLayer(name, d, heads, heads, d / heads, false,
                                    true, /*fused=*/true));
    parts->push_back(
        ParametersLayer(absl::StrCat(name, ".q_proj+v_proj.bias"), 2 * d));
  };
  Layer conv1 = Named("model.encoder.conv1");
  conv1.set_positions(2 * source);
  conv1.mutable_conv()->set_in_channels(mels);
  conv1.mutable_conv()->set_out_channels(d);
  conv1.mutable_conv()->add_kernel(3);
  conv1.mutable_conv()->set_dims(1);
  conv1.mutable_conv()->set_bias(true);
  *spec.add_layers() = std::move(conv1);
  Layer conv2 = Named("model.encoder.conv2");
  conv2.mutable_conv()->set_in_channels(d);
  conv2.mutable_conv()->set_out_channels(d);
  conv2.mutable_conv()->add_kernel(3);
  conv2.mutable_conv()->set_dims(1);
  conv2.mutable_conv()->set_bias(true);
  conv2.mutable_conv()->set_in_positions(2 * source);
  *spec.add_layers() = std::move(conv2);
  *spec.add_layers() =
      ParametersLayer("model.encoder.embed_positions", source * d);
  {
    std::vector<Layer> parts;
    parts.push_back(NormLayer("self_attn_layer_norm", v1::Norm::LAYER, d));
    attention("self_attn", enc_heads, &parts);
    parts.push_back(NormLayer("final_layer_norm", v1::Norm::LAYER, d));
    parts.push_back(MlpLayer("fc1+fc2", d, enc_ffn, false, true));
    *spec.add_layers() =
        BlockLayer("model.encoder.layers", static_cast<uint32_t>(enc_layers),
                   std::move(parts));
  }
  *spec.add_layers() =
      NormLayer("model.encoder.layer_norm", v1::Norm::LAYER, d);
  Layer tokens = EmbeddingLayer("model.decoder.embed_tokens", vocab, d);
  tokens.set_positions(text);
  *spec.add_layers() = std::move(tokens);
  *spec.add_layers() =
      ParametersLayer("model.decoder.embed_positions", target * d);
  {
    std::vector<Layer> parts;
    parts.push_back(NormLayer("self_attn_layer_norm", v1::Norm::LAYER, d));
    attention("self_attn", dec_heads, &parts);
    parts.push_back(NormLayer("encoder_attn_layer_norm", v1::Norm::LAYER, d));
    attention("encoder_attn", dec_heads, &parts);
    // The cross attention reads the encoder's positions.
    parts[parts.size() - 2].mutable_attention()->set_kv_positions(source);
    parts.push_back(NormLayer("final_layer_norm", v1::Norm::LAYER, d));
    parts.push_back(MlpLayer("fc1+fc2", d, dec_ffn, false, true));
    Layer stack =
        BlockLayer("model.decoder.layers", static_cast<uint32_t>(dec_layers),
                   std::move(parts));
    stack.set_positions(text);
    *spec.add_layers() = std::move(stack);
  }
  Layer final_norm = NormLayer("model.decoder.layer_norm", v1::Norm::LAYER, d);
  final_norm.set_positions(text);
  *spec.add_layers() = std::move(final_norm);
  Layer head = LmHeadLayer("proj_out", d, vocab, tied);
  head.set_positions(text);
  *spec.add_layers() = std::move(head);
  c.Note(absl::StrCat(
      "WhisperForConditionalGeneration: two 1-d convolutions over the mel "
      "frames, pre-LayerNorm encoder and decoder, position tables as "
      "parameters (the encoder's sinusoidal one frozen but counted), k_proj "
      "without bias (the q and v biases are listed beside each attention), ",
      tied ? "proj_out tied to embed_tokens" : "untied proj_out",
      ". Attention is marked fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

// ---- DeepSeek-V3 (multi-head latent attention, routed experts) -------------

absl::Status ConvertDeepseekV3(const Json& config, Conversion& c) {
  c.config_class = "DeepseekV3Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // DeepseekV3Config: vocab_size=129280, hidden_size=7168,
  // intermediate_size=18432 (dense layers), moe_intermediate_size=2048,
  // num_hidden_layers=61, num_attention_heads=128, n_shared_experts=1,
  // n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3,
  // kv_lora_rank=512, q_lora_rank=1536 (None: a plain q_proj),
  // qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
  // max_position_embeddings=4096, tie_word_embeddings=False,
  // attention_bias=False. The multi-token-prediction layer of the
  // checkpoint (num_nextn_predict_layers) is not part of the model.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 129280, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t h,
                   keys.Size("hidden_size", 7168, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t ffn,
                   keys.Size("intermediate_size", 18432, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t expert_ffn,
                   keys.Size("moe_intermediate_size", 2048, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("num_hidden_layers", 61, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("num_attention_heads", 128, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t shared,
                   keys.Size("n_shared_experts", 1, 0, kMaxExperts));
  ASSIGN_OR_RETURN(const uint64_t experts,
                   keys.Size("n_routed_experts", 256, 1, kMaxExperts));
  ASSIGN_OR_RETURN(const uint64_t top_k,
                   keys.Size("num_experts_per_tok", 8, 1, experts));
  ASSIGN_OR_RETURN(const uint64_t first_dense,
                   keys.Size("first_k_dense_replace", 3, 0, layers));
  ASSIGN_OR_RETURN(const uint64_t kv_lora,
                   keys.Size("kv_lora_rank", 512, 1, kMaxHidden));
  ASSIGN_OR_RETURN(std::optional<uint64_t> q_lora,
                   keys.OptionalSize("q_lora_rank", 1536, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t rope,
                   keys.Size("qk_rope_head_dim", 64, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t nope,
                   keys.Size("qk_nope_head_dim", 128, 0, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t v_dim,
                   keys.Size("v_head_dim", 128, 1, kMaxHeads));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 4096, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(const bool bias, keys.Flag("attention_bias", false));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   FreePositions(c, max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", vocab, h);
  // MLA as its projections and norms: queries through a low-rank
  // q_a/q_b pair, keys and values from a shared kv_lora_rank latent plus
  // one rotary key head; the fused attention core keeps its context (one
  // v_head_dim vector per head) for o_proj.
  auto mla = [&](std::vector<Layer>* parts) {
    const uint64_t qk = nope + rope;
    if (q_lora.has_value()) {
      parts->push_back(LinearLayer("self_attn.q_a_proj", h, *q_lora, bias));
      parts->push_back(
          NormLayer("self_attn.q_a_layernorm", v1::Norm::RMS, *q_lora));
      parts->push_back(
          LinearLayer("self_attn.q_b_proj", *q_lora, heads * qk, false));
    } else {
      parts->push_back(LinearLayer("self_attn.q_proj", h, heads * qk, false));
    }
    parts->push_back(
        LinearLayer("self_attn.kv_a_proj_with_mqa", h, kv_lora + rope, bias));
    parts->push_back(
        NormLayer("self_attn.kv_a_layernorm", v1::Norm::RMS, kv_lora));
    parts->push_back(LinearLayer("self_attn.kv_b_proj", kv_lora,
                                 heads * (nope + v_dim), false));
    Layer context = Named("self_attn (fused attention context)");
    context.mutable_elementwise()->set_op(v1::Elementwise::ACTIVATION);
    context.mutable_elementwise()->set_dim(heads * v_dim);
    parts->push_back(std::move(context));
    parts->push_back(LinearLayer("self_attn.o_proj", heads * v_dim, h, bias));
  };
  std::vector<Layer> per_layer;
  per_layer.reserve(layers);
  for (uint64_t i = 0; i < layers; ++i) {
    std::vector<Layer> parts;
    parts.push_back(NormLayer("input_layernorm", v1::Norm::RMS, h));
    mla(&parts);
    parts.push_back(NormLayer("post_attention_layernorm", v1::Norm::RMS, h));
    if (i < first_dense) {
      parts.push_back(MlpLayer("mlp", h, ffn, /*gated=*/true, false));
    } else {
      // The router's weight and its e_score_correction_bias (one per
      // expert); the shared experts are as wide as the routed ones.
      Layer moe = Named("mlp");
      v1::Moe* m = moe.mutable_moe();
      m->set_hidden(h);
      m->set_ffn(expert_ffn);
      m->set_experts(experts);
      m->set_top_k(top_k);
      m->set_shared_experts(shared);
      m->set_gated(true);
      m->set_router_bias(true);
      parts.push_back(std::move(moe));
    }
    per_layer.push_back(BlockLayer("", 1, std::move(parts)));
  }
  AppendStack("model.layers", std::move(per_layer), &spec);
  *spec.add_layers() = NormLayer("model.norm", v1::Norm::RMS, h);
  *spec.add_layers() = LmHeadLayer("lm_head", h, vocab, tied);
  c.Note(absl::StrCat(
      "DeepseekV3ForCausalLM: multi-head latent attention written as its "
      "projections and RMS norms (exact parameters; the fused attention "
      "core keeps no score matrix, only its context), ",
      first_dense, " dense layer(s), then ", experts, " routed experts (top ",
      top_k, ") plus ", shared,
      " shared per layer, a router with a correction bias, ",
      tied ? "LM head tied to embed_tokens" : "untied LM head",
      ". The checkpoint's multi-token-prediction layer is not part of "
      "DeepseekV3ForCausalLM and is not counted."));
  return absl::OkStatus();
}

// ---- BERT and RoBERTa ------------------------------------------------------

// The BERT-shaped encoders: their config class and its defaults, and what
// the base model holds besides the encoder.
struct BertFlavor {
  const char* config_class;
  const char* model_class;
  const char* prefix;
  // Positions numbered from pad_token_id + 1 (RoBERTa, XLM-RoBERTa).
  bool roberta_positions;
  // ELECTRA: embeddings of embedding_size, projected to hidden_size when
  // they differ; no pooler.
  bool electra;
  uint64_t vocab_size;
  uint64_t hidden_size;
  uint64_t num_attention_heads;
  uint64_t intermediate_size;
};

absl::Status ConvertBertLike(const Json& config, Conversion& c,
                             const BertFlavor& f) {
  const bool roberta = f.roberta_positions;
  c.config_class = f.config_class;
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // BertConfig: vocab_size=30522, hidden_size=768, num_hidden_layers=12,
  // num_attention_heads=12, intermediate_size=3072,
  // max_position_embeddings=512, type_vocab_size=2,
  // position_embedding_type="absolute". RobertaConfig: the same but
  // vocab_size=50265 and pad_token_id=1 (positions start after it).
  // XLMRobertaConfig: BertConfig's sizes (vocab_size=30522) with
  // RoBERTa's positions. ElectraConfig: vocab_size=30522,
  // embedding_size=128, hidden_size=256, num_attention_heads=4,
  // intermediate_size=1024, the rest as BertConfig.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", f.vocab_size, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("hidden_size", f.hidden_size, 1, kMaxHidden));
  uint64_t embedding = hidden;
  if (f.electra) {
    ASSIGN_OR_RETURN(embedding,
                     keys.Size("embedding_size", 128, 1, kMaxHidden));
  }
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("num_hidden_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(
      const uint64_t heads,
      keys.Size("num_attention_heads", f.num_attention_heads, 1, kMaxHeads));
  RETURN_IF_ERROR(
      CheckHeadsDivide(hidden, heads, "hidden_size", "num_attention_heads"));
  ASSIGN_OR_RETURN(
      const uint64_t ffn,
      keys.Size("intermediate_size", f.intermediate_size, 1, kMaxFfn));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 512, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t type_vocab,
                   keys.Size("type_vocab_size", 2, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const std::string position_type,
                   keys.Text("position_embedding_type", "absolute"));
  if (position_type != "absolute" && position_type != "relative_key" &&
      position_type != "relative_key_query") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: position_embedding_type = \"", position_type,
        "\" is not supported; allowed \"absolute\", \"relative_key\", "
        "\"relative_key_query\""));
  }
  uint64_t usable = max_positions;
  if (roberta) {
    ASSIGN_OR_RETURN(const uint64_t pad,
                     keys.Size("pad_token_id", 1, 0, kMaxVocab));
    if (pad + 1 >= max_positions) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: max_position_embeddings = ", max_positions,
                       " leaves no positions after pad_token_id = ", pad,
                       "; RoBERTa numbers positions from pad_token_id + 1"));
    }
    usable = max_positions - pad - 1;
  }
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      TablePositions(c, usable,
                     roberta ? "max_position_embeddings - pad_token_id - 1"
                             : "max_position_embeddings"));
  const std::string prefix = f.prefix;
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() =
      EmbeddingLayer(prefix + "embeddings.word_embeddings", vocab, embedding);
  *spec.add_layers() = ParametersLayer(
      prefix + "embeddings.position_embeddings", max_positions * embedding);
  *spec.add_layers() = ParametersLayer(
      prefix + "embeddings.token_type_embeddings", type_vocab * embedding);
  *spec.add_layers() =
      NormLayer(prefix + "embeddings.LayerNorm", v1::Norm::LAYER, embedding);
  if (embedding != hidden) {
    *spec.add_layers() =
        LinearLayer(prefix + "embeddings_project", embedding, hidden, true);
  }
  std::vector<Layer> parts;
  if (position_type != "absolute") {
    // distance_embedding: (2 * max_position_embeddings - 1) x head size.
    parts.push_back(
        ParametersLayer("attention.self.distance_embedding",
                        (2 * max_positions - 1) * (hidden / heads)));
  }
  parts.push_back(AttentionLayer("attention", hidden, heads, heads,
                                 hidden / heads, true, true,
                                 /*fused=*/position_type == "absolute"));
  parts.push_back(
      NormLayer("attention.output.LayerNorm", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("intermediate+output", hidden, ffn, false, true));
  parts.push_back(NormLayer("output.LayerNorm", v1::Norm::LAYER, hidden));
  *spec.add_layers() =
      BlockLayer(prefix + "encoder.layer", static_cast<uint32_t>(layers),
                 std::move(parts));
  if (!f.electra) {
    Layer pooler = LinearLayer(prefix + "pooler.dense", hidden, hidden, true);
    pooler.set_positions(1);
    *spec.add_layers() = std::move(pooler);
  }
  c.Note(absl::StrCat(
      f.model_class,
      f.electra ? " (the discriminator's encoder, which has no pooler"
                : " (the encoder with its pooler",
      ", as published parameter counts are; a masked-LM or classifier head "
      "named in architectures is not modelled). Learned position and "
      "token-type tables are parameters. Absolute-position attention is "
      "marked fused (transformers' default scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertBert(const Json& config, Conversion& c) {
  return ConvertBertLike(
      config, c,
      {"BertConfig", "BertModel", "bert.", false, false, 30522, 768, 12, 3072});
}

absl::Status ConvertRoberta(const Json& config, Conversion& c) {
  return ConvertBertLike(config, c,
                         {"RobertaConfig", "RobertaModel", "roberta.", true,
                          false, 50265, 768, 12, 3072});
}

absl::Status ConvertXlmRoberta(const Json& config, Conversion& c) {
  return ConvertBertLike(config, c,
                         {"XLMRobertaConfig", "XLMRobertaModel", "roberta.",
                          true, false, 30522, 768, 12, 3072});
}

absl::Status ConvertElectra(const Json& config, Conversion& c) {
  return ConvertBertLike(config, c,
                         {"ElectraConfig", "ElectraModel", "electra.", false,
                          true, 30522, 256, 4, 1024});
}

// ---- DistilBERT ------------------------------------------------------------

absl::Status ConvertDistilBert(const Json& config, Conversion& c) {
  c.config_class = "DistilBertConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // DistilBertConfig: vocab_size=30522, max_position_embeddings=512,
  // n_layers=6, n_heads=12, dim=768, hidden_dim=3072. The position table is
  // a parameter even when sinusoidal_pos_embds fills it; there are no
  // token-type embeddings and no pooler.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 30522, 1, kMaxVocab));
  ASSIGN_OR_RETURN(
      const uint64_t max_positions,
      keys.Size("max_position_embeddings", 512, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t layers,
                   keys.Size("n_layers", 6, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("n_heads", 12, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t dim, keys.Size("dim", 768, 1, kMaxHidden));
  RETURN_IF_ERROR(CheckHeadsDivide(dim, heads, "dim", "n_heads"));
  ASSIGN_OR_RETURN(const uint64_t ffn,
                   keys.Size("hidden_dim", 4 * 768, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  *spec.add_layers() =
      EmbeddingLayer("distilbert.embeddings.word_embeddings", vocab, dim);
  *spec.add_layers() = ParametersLayer(
      "distilbert.embeddings.position_embeddings", max_positions * dim);
  *spec.add_layers() =
      NormLayer("distilbert.embeddings.LayerNorm", v1::Norm::LAYER, dim);
  std::vector<Layer> parts;
  parts.push_back(AttentionLayer("attention", dim, heads, heads, dim / heads,
                                 true, true, /*fused=*/true));
  parts.push_back(NormLayer("sa_layer_norm", v1::Norm::LAYER, dim));
  parts.push_back(MlpLayer("ffn", dim, ffn, false, true));
  parts.push_back(NormLayer("output_layer_norm", v1::Norm::LAYER, dim));
  *spec.add_layers() =
      BlockLayer("distilbert.transformer.layer", static_cast<uint32_t>(layers),
                 std::move(parts));
  c.Note(
      "DistilBertModel (a masked-LM or classifier head named in "
      "architectures is not modelled): post-LayerNorm encoder layers with "
      "biased attention and MLP, a learned position table as parameters. "
      "Attention is marked fused (transformers' default "
      "scaled_dot_product_attention).");
  return absl::OkStatus();
}

// ---- T5 --------------------------------------------------------------------

absl::Status ConvertT5(const Json& config, Conversion& c) {
  c.config_class = "T5Config";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // T5Config: vocab_size=32128, d_model=512, d_kv=64, d_ff=2048,
  // num_layers=6, num_decoder_layers=None (num_layers), num_heads=8,
  // relative_attention_num_buckets=32, feed_forward_proj="relu";
  // tie_word_embeddings keeps PretrainedConfig's True.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   keys.Size("vocab_size", 32128, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t d_model,
                   keys.Size("d_model", 512, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t d_kv, keys.Size("d_kv", 64, 1, kMaxHeads));
  ASSIGN_OR_RETURN(const uint64_t d_ff, keys.Size("d_ff", 2048, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t encoder_layers,
                   keys.Size("num_layers", 6, 1, kMaxLayers));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> decoder,
      keys.OptionalSize("num_decoder_layers", std::nullopt, 1, kMaxLayers));
  const uint64_t decoder_layers = decoder.value_or(encoder_layers);
  if (!decoder.has_value()) {
    keys.AssumeDerived("num_decoder_layers", decoder_layers, "num_layers");
  }
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size("num_heads", 8, 1, kMaxHeads));
  ASSIGN_OR_RETURN(
      const uint64_t buckets,
      keys.Size("relative_attention_num_buckets", 32, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const std::string proj,
                   keys.Text("feed_forward_proj", "relu"));
  // T5Config accepts "ACT" or "gated-ACT"; gated uses wi_0 and wi_1.
  const bool gated = absl::StartsWith(proj, "gated-");
  const absl::string_view act =
      gated ? absl::string_view(proj).substr(6) : absl::string_view(proj);
  if (act.empty() || act.find('-') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: feed_forward_proj = \"", proj,
        "\" is not a valid activation; allowed \"ACT\" or \"gated-ACT\" "
        "(e.g. \"relu\", \"gated-gelu\")"));
  }
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  // T5 has relative positions and no maximum; n_positions (512 in the
  // original checkpoints) is the pretraining input length when present.
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> n_positions,
      keys.OptionalSize("n_positions", std::nullopt, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(const uint64_t positions,
                   FreePositions(c, n_positions.value_or(512), "n_positions"));
  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(positions);
  auto attention = [&](absl::string_view name) {
    return AttentionLayer(name, d_model, heads, heads, d_kv, false, false,
                          /*fused=*/false);
  };
  *spec.add_layers() = EmbeddingLayer("shared", vocab, d_model);
  *spec.add_layers() = ParametersLayer(
      "encoder.block.0.layer.0.SelfAttention.relative_attention_bias",
      buckets * heads);
  {
    std::vector<Layer> parts;
    parts.push_back(NormLayer("layer.0.layer_norm", v1::Norm::RMS, d_model));
    parts.push_back(attention("layer.0.SelfAttention"));
    parts.push_back(NormLayer("layer.1.layer_norm", v1::Norm::RMS, d_model));
    parts.push_back(
        MlpLayer("layer.1.DenseReluDense", d_model, d_ff, gated, false));
    *spec.add_layers() =
        BlockLayer("encoder.block", static_cast<uint32_t>(encoder_layers),
                   std::move(parts));
  }
  *spec.add_layers() =
      NormLayer("encoder.final_layer_norm", v1::Norm::RMS, d_model);
  // The decoder looks up the same shared table; its dropout output is what
  // the first decoder layer saves.
  Layer decoder_input = Named("decoder.embed_tokens (shared) + dropout");
  decoder_input.mutable_elementwise()->set_op(v1::Elementwise::DROPOUT);
  decoder_input.mutable_elementwise()->set_dim(d_model);
  *spec.add_layers() = std::move(decoder_input);
  *spec.add_layers() = ParametersLayer(
      "decoder.block.0.layer.0.SelfAttention.relative_attention_bias",
      buckets * heads);
  {
    std::vector<Layer> parts;
    parts.push_back(NormLayer("layer.0.layer_norm", v1::Norm::RMS, d_model));
    parts.push_back(attention("layer.0.SelfAttention"));
    parts.push_back(NormLayer("layer.1.layer_norm", v1::Norm::RMS, d_model));
    parts.push_back(attention("layer.1.EncDecAttention"));
    parts.push_back(NormLayer("layer.2.layer_norm", v1::Norm::RMS, d_model));
    parts.push_back(
        MlpLayer("layer.2.DenseReluDense", d_model, d_ff, gated, false));
    *spec.add_layers() =
        BlockLayer("decoder.block", static_cast<uint32_t>(decoder_layers),
                   std::move(parts));
  }
  *spec.add_layers() =
      NormLayer("decoder.final_layer_norm", v1::Norm::RMS, d_model);
  *spec.add_layers() = LmHeadLayer("lm_head", d_model, vocab, tied);
  c.Note(absl::StrCat(
      "T5ForConditionalGeneration: no biases, RMS layer norms, relative "
      "attention bias tables in the first layer of each stack, ",
      gated ? "gated feed-forward (wi_0, wi_1, wo), " : "",
      tied ? "LM head tied to the shared embedding" : "untied LM head",
      ". The decoder runs as many positions as the encoder. Attention is "
      "not fused: T5 adds its position bias to an explicit score matrix."));
  return absl::OkStatus();
}

// ---- ViT and CLIP ----------------------------------------------------------

struct VisionShape {
  uint64_t hidden = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t ffn = 0;
  uint64_t image_size = 0;
  uint64_t patch_size = 0;
  uint64_t channels = 0;
  uint64_t patches = 0;  // (image_size / patch_size)^2
};

struct VisionDefaults {
  uint64_t hidden_size;
  uint64_t num_hidden_layers;
  uint64_t num_attention_heads;
  uint64_t intermediate_size;
  uint64_t image_size;
  uint64_t patch_size;
};

absl::StatusOr<VisionShape> ReadVision(ConfigKeys& keys,
                                       const VisionDefaults& d) {
  VisionShape v;
  ASSIGN_OR_RETURN(v.hidden,
                   keys.Size("hidden_size", d.hidden_size, 1, kMaxHidden));
  ASSIGN_OR_RETURN(v.layers, keys.Size("num_hidden_layers", d.num_hidden_layers,
                                       1, kMaxLayers));
  ASSIGN_OR_RETURN(v.heads, keys.Size("num_attention_heads",
                                      d.num_attention_heads, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(v.hidden, v.heads, keys.Path("hidden_size"),
                                   keys.Path("num_attention_heads")));
  ASSIGN_OR_RETURN(
      v.ffn, keys.Size("intermediate_size", d.intermediate_size, 1, kMaxFfn));
  ASSIGN_OR_RETURN(v.image_size,
                   keys.Size("image_size", d.image_size, 1, kMaxImageSide));
  ASSIGN_OR_RETURN(v.patch_size, keys.Size("patch_size", d.patch_size, 1,
                                           std::min(v.image_size, kMaxPatch)));
  ASSIGN_OR_RETURN(v.channels, keys.Size("num_channels", 3, 1, kMaxChannels));
  const uint64_t side = v.image_size / v.patch_size;
  v.patches = side * side;
  return v;
}

// Patch convolution (stride = kernel = patch_size), class token and learned
// position table; the layers run over patches + 1 tokens.
void AppendVisionEmbeddings(const std::string& prefix, const VisionShape& v,
                            bool conv_bias, bool class_token_first,
                            v1::ModelSpec* spec) {
  Layer patch = Named(prefix + "patch_embedding");
  patch.set_positions(v.patches);
  v1::Conv* conv = patch.mutable_conv();
  conv->set_in_channels(v.channels);
  conv->set_out_channels(v.hidden);
  conv->add_kernel(v.patch_size);
  conv->set_bias(conv_bias);
  conv->set_in_positions(v.image_size * v.image_size);
  Layer cls = ParametersLayer(prefix + "class_token", v.hidden);
  if (class_token_first) {
    *spec->add_layers() = std::move(cls);
    *spec->add_layers() = std::move(patch);
  } else {
    *spec->add_layers() = std::move(patch);
    *spec->add_layers() = std::move(cls);
  }
  *spec->add_layers() = ParametersLayer(prefix + "position_embedding",
                                        (v.patches + 1) * v.hidden);
}

// A pre-LayerNorm encoder layer with biased attention and MLP, repeated.
Layer EncoderStack(const std::string& name, uint64_t layers, uint64_t hidden,
                   uint64_t heads, uint64_t ffn, bool qkv_bias) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer("layer_norm1", v1::Norm::LAYER, hidden));
  parts.push_back(AttentionLayer("self_attn", hidden, heads, heads,
                                 hidden / heads, qkv_bias, true,
                                 /*fused=*/true));
  parts.push_back(NormLayer("layer_norm2", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("mlp", hidden, ffn, false, true));
  return BlockLayer(name, static_cast<uint32_t>(layers), std::move(parts));
}

absl::Status ConvertVit(const Json& config, Conversion& c) {
  c.config_class = "ViTConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // ViTConfig: hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
  // intermediate_size=3072, image_size=224, patch_size=16, num_channels=3,
  // qkv_bias=True, pooler_output_size=None (hidden_size).
  ASSIGN_OR_RETURN(const VisionShape v,
                   ReadVision(keys, {768, 12, 12, 3072, 224, 16}));
  ASSIGN_OR_RETURN(const bool qkv_bias, keys.Flag("qkv_bias", true));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> pooler_out,
      keys.OptionalSize("pooler_output_size", std::nullopt, 1, kMaxHidden));
  const uint64_t pooled = pooler_out.value_or(v.hidden);
  if (!pooler_out.has_value()) {
    keys.AssumeDerived("pooler_output_size", pooled, "hidden_size");
  }
  v1::ModelSpec& spec = c.spec();
  spec.set_family("vision-transformer");
  spec.set_positions(v.patches + 1);
  spec.set_input_source(absl::StrCat(
      v.patches + 1, " tokens per sample: (image_size ", v.image_size,
      " / patch_size ", v.patch_size, ")^2 patches + the class token."));
  AppendVisionEmbeddings("vit.embeddings.", v, /*conv_bias=*/true,
                         /*class_token_first=*/false, &spec);
  *spec.add_layers() = EncoderStack("vit.encoder.layer", v.layers, v.hidden,
                                    v.heads, v.ffn, qkv_bias);
  *spec.add_layers() = NormLayer("vit.layernorm", v1::Norm::LAYER, v.hidden);
  Layer pooler = LinearLayer("vit.pooler.dense", v.hidden, pooled, true);
  pooler.set_positions(1);
  *spec.add_layers() = std::move(pooler);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: ViT's tokens come from image_size and "
                        "patch_size."));
  }
  c.Note(
      "ViTModel with its pooler (add_pooling_layer=True, the model's "
      "default; a classifier head named in architectures is not modelled). "
      "Attention is marked fused (transformers' default "
      "scaled_dot_product_attention).");
  return absl::OkStatus();
}

// A nested config object ("text_config"), or an empty one when missing or
// null; its keys then all take the class defaults.
absl::StatusOr<const Json*> SubConfig(const Json& config, const char* key,
                                      const Json& empty) {
  if (!config.contains(key) || config.at(key).is_null()) return &empty;
  if (!config.at(key).is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, " = ",
                                                   Abbreviated(config.at(key)),
                                                   " is not an object"));
  }
  return &config.at(key);
}

absl::Status ConvertClip(const Json& config, Conversion& c) {
  c.config_class = "CLIPConfig";
  const Json empty = Json::object();
  ASSIGN_OR_RETURN(const Json* text_json,
                   SubConfig(config, "text_config", empty));
  ASSIGN_OR_RETURN(const Json* vision_json,
                   SubConfig(config, "vision_config", empty));
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  ConfigKeys text_keys(*text_json, "text_config.", "CLIPTextConfig",
                       &c.out->assumed_defaults);
  ConfigKeys vision_keys(*vision_json, "vision_config.", "CLIPVisionConfig",
                         &c.out->assumed_defaults);
  // CLIPConfig: projection_dim=512 (both projections, bias-free), plus one
  // logit_scale parameter.
  ASSIGN_OR_RETURN(const uint64_t projection,
                   keys.Size("projection_dim", 512, 1, kMaxHidden));
  // CLIPTextConfig: vocab_size=49408, hidden_size=512,
  // intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
  // max_position_embeddings=77.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   text_keys.Size("vocab_size", 49408, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t text_hidden,
                   text_keys.Size("hidden_size", 512, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t text_ffn,
                   text_keys.Size("intermediate_size", 2048, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t text_layers,
                   text_keys.Size("num_hidden_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t text_heads,
                   text_keys.Size("num_attention_heads", 8, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(text_hidden, text_heads,
                                   "text_config.hidden_size",
                                   "text_config.num_attention_heads"));
  ASSIGN_OR_RETURN(
      const uint64_t text_max,
      text_keys.Size("max_position_embeddings", 77, 1, kMaxSpecDimension));
  // CLIPVisionConfig: hidden_size=768, num_hidden_layers=12,
  // num_attention_heads=12, intermediate_size=3072, image_size=224,
  // patch_size=32, num_channels=3.
  ASSIGN_OR_RETURN(const VisionShape v,
                   ReadVision(vision_keys, {768, 12, 12, 3072, 224, 32}));
  ASSIGN_OR_RETURN(
      const uint64_t text_positions,
      TablePositions(c, text_max, "text_config.max_position_embeddings"));

  v1::ModelSpec& spec = c.spec();
  spec.set_family("transformer");
  spec.set_positions(v.patches + 1);
  spec.set_input_source(absl::StrCat(
      v.patches + 1, " vision tokens ((image_size ", v.image_size,
      " / patch_size ", v.patch_size, ")^2 patches + the class token) and ",
      text_positions, " text positions per sample."));
  AppendVisionEmbeddings("vision_model.embeddings.", v, /*conv_bias=*/false,
                         /*class_token_first=*/true, &spec);
  *spec.add_layers() =
      NormLayer("vision_model.pre_layrnorm", v1::Norm::LAYER, v.hidden);
  *spec.add_layers() = EncoderStack("vision_model.encoder.layers", v.layers,
                                    v.hidden, v.heads, v.ffn, true);
  Layer post =
      NormLayer("vision_model.post_layernorm", v1::Norm::LAYER, v.hidden);
  post.set_positions(1);  // applied to the pooled class token only
  *spec.add_layers() = std::move(post);
  Layer visual = LinearLayer("visual_projection", v.hidden, projection, false);
  visual.set_positions(1);
  *spec.add_layers() = std::move(visual);

  Layer tokens = EmbeddingLayer("text_model.embeddings.token_embedding", vocab,
                                text_hidden);
  tokens.set_positions(text_positions);
  *spec.add_layers() = std::move(tokens);
  *spec.add_layers() = ParametersLayer(
      "text_model.embeddings.position_embedding", text_max * text_hidden);
  Layer text_stack = EncoderStack("text_model.encoder.layers", text_layers,
                                  text_hidden, text_heads, text_ffn, true);
  text_stack.set_positions(text_positions);
  *spec.add_layers() = std::move(text_stack);
  Layer text_norm =
      NormLayer("text_model.final_layer_norm", v1::Norm::LAYER, text_hidden);
  text_norm.set_positions(text_positions);
  *spec.add_layers() = std::move(text_norm);
  Layer text_proj =
      LinearLayer("text_projection", text_hidden, projection, false);
  text_proj.set_positions(1);
  *spec.add_layers() = std::move(text_proj);
  *spec.add_layers() = ParametersLayer("logit_scale", 1);
  c.Note(
      "CLIPModel: both towers, the bias-free projections and logit_scale; "
      "learned position tables and the class embedding are parameters. "
      "seq_len sets the text length. Attention is marked fused "
      "(transformers' default scaled_dot_product_attention).");
  return absl::OkStatus();
}

// ---- Swin and ConvNeXt (hierarchical vision models) -------------------------

// A list of sizes (depths, hidden_sizes, num_heads): each in 1..max_value;
// missing takes the class default.
absl::StatusOr<std::vector<uint64_t>> SizeList(
    ConfigKeys& keys, const char* key, const std::vector<uint64_t>& defaults,
    uint64_t max_value, std::vector<std::string>* assumed,
    const std::string& config_class) {
  if (!keys.Has(key)) {
    assumed->push_back(
        absl::StrCat(keys.Path(key), "=[", absl::StrJoin(defaults, ", "),
                     "] (transformers ", config_class, " default)"));
    return defaults;
  }
  const Json& v = keys.Raw(key);
  if (!v.is_array() || v.empty() || v.size() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", keys.Path(key), " = ", Abbreviated(v),
                     " is not a list of 1 to 64 sizes"));
  }
  std::vector<uint64_t> out;
  for (const Json& item : v) {
    if (!item.is_number_integer() || item.get<int64_t>() < 1 ||
        static_cast<uint64_t>(item.get<int64_t>()) > max_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: ", keys.Path(key), " entry ", Abbreviated(item),
          " is out of range; allowed 1..", max_value));
    }
    out.push_back(static_cast<uint64_t>(item.get<int64_t>()));
  }
  return out;
}

// The classifier of a *ForImageClassification model: as many outputs as
// id2label has entries (or num_labels), PretrainedConfig's 2 without
// either. Zero when architectures names no classification model.
absl::StatusOr<uint64_t> ImageClassifierLabels(ConfigKeys& keys,
                                               const Json& config) {
  bool classifier = false;
  if (config.contains("architectures") &&
      config.at("architectures").is_array()) {
    for (const Json& name : config.at("architectures")) {
      if (name.is_string() &&
          absl::EndsWith(name.get<std::string>(), "ForImageClassification")) {
        classifier = true;
      }
    }
  }
  if (!classifier) return 0;
  if (config.contains("id2label") && config.at("id2label").is_object()) {
    const uint64_t n = config.at("id2label").size();
    if (n < 1 || n > kMaxVocab) {
      return OutOfRange(keys.Path("id2label"), n, 1, kMaxVocab);
    }
    return n;
  }
  return keys.Size("num_labels", 2, 1, kMaxVocab);
}

// Stride-`patch` convolution from the image to a side x side grid, with a
// LayerNorm over its channels.
void AppendPatchStem(const std::string& prefix, const std::string& norm_name,
                     uint64_t channels, uint64_t dim, uint64_t patch,
                     uint64_t image, v1::ModelSpec* spec) {
  const uint64_t side = image / patch;
  Layer stem = Named(prefix);
  stem.set_positions(side * side);
  v1::Conv* conv = stem.mutable_conv();
  conv->set_in_channels(channels);
  conv->set_out_channels(dim);
  conv->add_kernel(patch);
  conv->set_bias(true);
  conv->set_in_positions(image * image);
  *spec->add_layers() = std::move(stem);
  Layer norm = NormLayer(norm_name, v1::Norm::LAYER, dim);
  norm.set_positions(side * side);
  *spec->add_layers() = std::move(norm);
}

void AppendImageHead(const std::string& norm_name, uint64_t dim,
                     uint64_t labels, v1::ModelSpec* spec) {
  Layer norm = NormLayer(norm_name, v1::Norm::LAYER, dim);
  norm.set_positions(1);  // over the pooled features
  *spec->add_layers() = std::move(norm);
  if (labels == 0) return;
  Layer classifier = LinearLayer("classifier", dim, labels, true);
  classifier.set_positions(1);
  *spec->add_layers() = std::move(classifier);
}

absl::Status ConvertConvNext(const Json& config, Conversion& c) {
  c.config_class = "ConvNextConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // ConvNextConfig: num_channels=3, patch_size=4,
  // hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3],
  // layer_scale_init_value=1e-6 (a per-channel scale when positive),
  // image_size=224.
  ASSIGN_OR_RETURN(const uint64_t channels,
                   keys.Size("num_channels", 3, 1, kMaxChannels));
  ASSIGN_OR_RETURN(const uint64_t image,
                   keys.Size("image_size", 224, 1, kMaxImageSide));
  ASSIGN_OR_RETURN(const uint64_t patch,
                   keys.Size("patch_size", 4, 1, std::min(image, kMaxPatch)));
  ASSIGN_OR_RETURN(
      std::vector<uint64_t> dims,
      SizeList(keys, "hidden_sizes", {96, 192, 384, 768}, kMaxHidden,
               &c.out->assumed_defaults, c.config_class));
  ASSIGN_OR_RETURN(std::vector<uint64_t> depths,
                   SizeList(keys, "depths", {3, 3, 9, 3}, kMaxLayers,
                            &c.out->assumed_defaults, c.config_class));
  if (dims.size() != depths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: hidden_sizes has ", dims.size(),
                     " stages, depths ", depths.size(), "; they must match"));
  }
  bool layer_scale = true;
  if (keys.Has("layer_scale_init_value")) {
    const Json& v = keys.Raw("layer_scale_init_value");
    if (!v.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: layer_scale_init_value = ", Abbreviated(v),
                       " is not a number"));
    }
    layer_scale = v.get<double>() > 0;
  }
  ASSIGN_OR_RETURN(const uint64_t labels, ImageClassifierLabels(keys, config));
  v1::ModelSpec& spec = c.spec();
  uint64_t side = image / patch;
  if (side == 0 || side >> (dims.size() - 1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: image_size = ", image, " is too small for ",
                     dims.size(), " stages after patch_size = ", patch));
  }
  spec.set_family("conv");
  spec.set_positions(side * side);
  spec.set_input_source(absl::StrCat(
      image, "x", image, " images: a ", side, "x", side,
      " grid after the patch stem, halved before each later stage."));
  AppendPatchStem("convnext.embeddings.patch_embeddings",
                  "convnext.embeddings.layernorm", channels, dims[0], patch,
                  image, &spec);
  for (size_t i = 0; i < dims.size(); ++i) {
    const std::string prefix = absl::StrCat("convnext.encoder.stages.", i, ".");
    const uint64_t dim = dims[i];
    if (i > 0) {
      const uint64_t in_positions = side * side;
      side /= 2;
      Layer norm = NormLayer(prefix + "downsampling_layer.0", v1::Norm::LAYER,
                             dims[i - 1]);
      norm.set_positions(in_positions);
      *spec.add_layers() = std::move(norm);
      Layer down = Named(prefix + "downsampling_layer.1");
      down.set_positions(side * side);
      down.mutable_conv()->set_in_channels(dims[i - 1]);
      down.mutable_conv()->set_out_channels(dim);
      down.mutable_conv()->add_kernel(2);
      down.mutable_conv()->set_bias(true);
      down.mutable_conv()->set_in_positions(in_positions);
      *spec.add_layers() = std::move(down);
    }
    std::vector<Layer> parts;
    Layer dw = Named("dwconv");
    dw.mutable_conv()->set_in_channels(dim);
    dw.mutable_conv()->set_out_channels(dim);
    dw.mutable_conv()->add_kernel(7);
    dw.mutable_conv()->set_groups(dim);
    dw.mutable_conv()->set_bias(true);
    parts.push_back(std::move(dw));
    parts.push_back(NormLayer("layernorm", v1::Norm::LAYER, dim));
    parts.push_back(MlpLayer("pwconv1+pwconv2", dim, 4 * dim, false, true));
    if (layer_scale) {
      parts.push_back(ParametersLayer("layer_scale_parameter", dim));
    }
    Layer stage = BlockLayer(
        prefix + "layers", static_cast<uint32_t>(depths[i]), std::move(parts));
    stage.set_positions(side * side);
    *spec.add_layers() = std::move(stage);
  }
  AppendImageHead("convnext.layernorm", dims.back(), labels, &spec);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: ConvNeXt's grid comes from image_size."));
  }
  c.Note(absl::StrCat(
      "ConvNext", labels != 0 ? "ForImageClassification" : "Model",
      ": patch stem, stages of 7x7 depthwise convolution, LayerNorm and a "
      "4x MLP",
      layer_scale ? " with a per-channel layer scale" : "",
      ", LayerNorm + stride-2 convolution between stages, a final LayerNorm "
      "over the pooled features",
      labels != 0 ? absl::StrCat(" and a ", labels, "-way classifier") : "",
      "."));
  return absl::OkStatus();
}

absl::Status ConvertSwin(const Json& config, Conversion& c) {
  c.config_class = "SwinConfig";
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  // SwinConfig: image_size=224, patch_size=4, num_channels=3, embed_dim=96,
  // depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7,
  // mlp_ratio=4.0, qkv_bias=True, use_absolute_embeddings=False.
  ASSIGN_OR_RETURN(const uint64_t channels,
                   keys.Size("num_channels", 3, 1, kMaxChannels));
  ASSIGN_OR_RETURN(const uint64_t image,
                   keys.Size("image_size", 224, 1, kMaxImageSide));
  ASSIGN_OR_RETURN(const uint64_t patch,
                   keys.Size("patch_size", 4, 1, std::min(image, kMaxPatch)));
  ASSIGN_OR_RETURN(const uint64_t embed_dim,
                   keys.Size("embed_dim", 96, 1, kMaxHidden));
  ASSIGN_OR_RETURN(std::vector<uint64_t> depths,
                   SizeList(keys, "depths", {2, 2, 6, 2}, kMaxLayers,
                            &c.out->assumed_defaults, c.config_class));
  ASSIGN_OR_RETURN(std::vector<uint64_t> heads,
                   SizeList(keys, "num_heads", {3, 6, 12, 24}, kMaxHeads,
                            &c.out->assumed_defaults, c.config_class));
  if (heads.size() != depths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: num_heads has ", heads.size(),
                     " stages, depths ", depths.size(), "; they must match"));
  }
  ASSIGN_OR_RETURN(const uint64_t window,
                   keys.Size("window_size", 7, 1, kMaxPatch));
  double mlp_ratio = 4.0;
  if (keys.Has("mlp_ratio")) {
    const Json& v = keys.Raw("mlp_ratio");
    if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: mlp_ratio = ", Abbreviated(v),
                       " is out of range; allowed a number in (0, 64]"));
    }
    mlp_ratio = v.get<double>();
  }
  ASSIGN_OR_RETURN(const bool qkv_bias, keys.Flag("qkv_bias", true));
  ASSIGN_OR_RETURN(const bool absolute,
                   keys.Flag("use_absolute_embeddings", false));
  ASSIGN_OR_RETURN(const uint64_t labels, ImageClassifierLabels(keys, config));
  uint64_t side = image / patch;
  if (side == 0 || side >> (depths.size() - 1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: image_size = ", image, " is too small for ",
                     depths.size(), " stages after patch_size = ", patch));
  }
  v1::ModelSpec& spec = c.spec();
  spec.set_family("vision-transformer");
  spec.set_positions(side * side);
  spec.set_input_source(absl::StrCat(
      image, "x", image, " images: ", side, "x", side,
      " patch tokens, merged 2x2 before each later stage; attention within ",
      window, "x", window, " windows."));
  AppendPatchStem("swin.embeddings.patch_embeddings.projection",
                  "swin.embeddings.norm", channels, embed_dim, patch, image,
                  &spec);
  if (absolute) {
    *spec.add_layers() = ParametersLayer("swin.embeddings.position_embeddings",
                                         (side * side + 1) * embed_dim);
  }
  uint64_t dim = embed_dim;
  for (size_t i = 0; i < depths.size(); ++i) {
    RETURN_IF_ERROR(CheckHeadsDivide(dim, heads[i],
                                     absl::StrCat("embed_dim * 2^", i),
                                     absl::StrCat("num_heads[", i, "]")));
    // A stage smaller than the window attends over the whole stage.
    const uint64_t w = std::min(window, side);
    const uint64_t ffn = static_cast<uint64_t>(mlp_ratio * dim);
    std::vector<Layer> parts;
    parts.push_back(NormLayer("layernorm_before", v1::Norm::LAYER, dim));
    parts.push_back(
        ParametersLayer("attention.self.relative_position_bias_table",
                        (2 * w - 1) * (2 * w - 1) * heads[i]));
    Layer attn = AttentionLayer("attention", dim, heads[i], heads[i],
                                dim / heads[i], qkv_bias, true,
                                /*fused=*/false);
    attn.mutable_attention()->set_window(w * w);
    parts.push_back(std::move(attn));
    parts.push_back(NormLayer("layernorm_after", v1::Norm::LAYER, dim));
    parts.push_back(MlpLayer("intermediate+output", dim, ffn, false, true));
    Layer stage =
        BlockLayer(absl::StrCat("swin.encoder.layers.", i, ".blocks"),
                   static_cast<uint32_t>(depths[i]), std::move(parts));
    stage.set_positions(side * side);
    *spec.add_layers() = std::move(stage);
    if (i + 1 < depths.size()) {
      // PatchMerging: 2x2 neighbours concatenated, LayerNorm, bias-free
      // reduction to twice the width.
      const std::string prefix =
          absl::StrCat("swin.encoder.layers.", i, ".downsample.");
      side /= 2;
      Layer norm = NormLayer(prefix + "norm", v1::Norm::LAYER, 4 * dim);
      norm.set_positions(side * side);
      *spec.add_layers() = std::move(norm);
      Layer reduction =
          LinearLayer(prefix + "reduction", 4 * dim, 2 * dim, false);
      reduction.set_positions(side * side);
      *spec.add_layers() = std::move(reduction);
      dim *= 2;
    }
  }
  AppendImageHead("swin.layernorm", dim, labels, &spec);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: Swin's tokens come from image_size."));
  }
  c.Note(absl::StrCat(
      "Swin", labels != 0 ? "ForImageClassification" : "Model",
      ": shifted-window attention with a relative position bias table per "
      "block (added to an explicit score matrix, so not marked fused), "
      "patch merging between stages, a final LayerNorm over the pooled "
      "features",
      labels != 0 ? absl::StrCat(" and a ", labels, "-way classifier") : "",
      "."));
  return absl::OkStatus();
}

// ---- Dispatch --------------------------------------------------------------

using Converter = absl::Status (*)(const Json&, Conversion&);

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

const std::vector<std::string>& SupportedHfModelTypes() {
  static const auto* types = [] {
    auto* list = new std::vector<std::string>();
    for (const Family& family : kFamilies) list->push_back(family.model_type);
    return list;
  }();
  return *types;
}

absl::StatusOr<HfConversion> SpecFromHfConfig(absl::string_view config_json,
                                              const HfOptions& options) {
  ASSIGN_OR_RETURN(const Json config, ParseConfig(config_json));
  if (!config.contains("model_type") || !config.at("model_type").is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: model_type is missing or not a string; supported: ",
        SupportedList()));
  }
  const std::string model_type = config.at("model_type").get<std::string>();
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (model_type == f.model_type) family = &f;
  }
  if (family == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: model_type = ", Abbreviated(config.at("model_type")),
        " is not supported; supported: ", SupportedList()));
  }
  HfConversion out;
  Conversion c{options, &out, ""};
  RETURN_IF_ERROR(family->convert(config, c));

  v1::ModelSpec& spec = out.spec;
  std::string name = SpecName(options.name);
  if (name.empty() && config.contains("_name_or_path") &&
      config.at("_name_or_path").is_string()) {
    name = SpecName(config.at("_name_or_path").get<std::string>());
  }
  if (name.empty()) name = SpecName(model_type);
  spec.set_name(name);
  spec.set_source(absl::StrCat("Hugging Face config.json, model_type ",
                               model_type,
                               "; keys it does not set take transformers ",
                               c.config_class, " defaults."));
  spec.set_notes(absl::StrJoin(out.notes, " "));

  double params = 0;
  for (const Layer& layer : spec.layers()) params += ApproxParams(layer);
  if (params > kMaxHfParams) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json describes about ", params, " parameters; allowed up to ",
        kMaxHfParams, " (check hidden_size, num_hidden_layers, vocab_size)"));
  }
  const absl::Status valid = ValidateSpec(spec);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json converts to an unusable spec: ", valid.message()));
  }
  return out;
}

}  // namespace headroom
