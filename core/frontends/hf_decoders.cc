// Hugging Face decoder families built on DecoderShape (Llama and its
// relatives, Mixtral, Qwen, Gemma, OLMo, Phi-3) and DeepSeek-V3.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/hf_builders.h"
#include "core/memory/model_spec.h"

namespace headroom::hf {

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

// attention_bias (default False): biases on the q, k, v and o projections.
absl::Status ReadAttentionBias(ConfigKeys& keys, DecoderShape& s) {
  ASSIGN_OR_RETURN(const bool attention_bias,
                   keys.Flag("attention_bias", false));
  s.qkv_bias = s.out_bias = attention_bias;
  return absl::OkStatus();
}

// Every layer uses the config's sliding_window (None: full attention).
absl::Status ReadUniformWindow(ConfigKeys& keys,
                               std::optional<uint64_t> default_window,
                               DecoderShape& s) {
  ASSIGN_OR_RETURN(std::optional<uint64_t> window,
                   keys.OptionalSize("sliding_window", default_window, 1,
                                     kMaxSpecDimension));
  s.window.assign(s.layers, window.value_or(0));
  return absl::OkStatus();
}

// Sets s.window from layer_types where the config lists them: `window` for
// each "sliding_attention" layer, 0 for each "full_attention" one. False
// when layer_types is missing or null and s.window is left as it is.
absl::StatusOr<bool> ReadLayerTypes(ConfigKeys& keys, uint64_t window,
                                    DecoderShape& s) {
  if (!keys.Has("layer_types") || keys.Raw("layer_types").is_null()) {
    return false;
  }
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
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: ", keys.Path("layer_types"), "[", i,
                       "] = ", Abbreviated(types[i]),
                       "; allowed \"full_attention\", \"sliding_attention\""));
    }
    s.window[i] = sliding ? window : 0;
  }
  return true;
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
  s.window.assign(s.layers, 0);
  // A listed sliding layer with no window set runs full attention.
  ASSIGN_OR_RETURN(const bool listed,
                   ReadLayerTypes(keys, window.value_or(0), s));
  if (listed) return absl::OkStatus();
  const uint64_t w = use_sliding && window.has_value() ? *window : 0;
  for (uint64_t i = max_window_layers; i < s.layers; ++i) s.window[i] = w;
  return absl::OkStatus();
}

// Gemma's interleaved sliding window: layers listed "sliding_attention" in
// layer_types, or without it every layer but each period-th (Gemma 2: the
// even layers, period 2; Gemma 3: five of every six, period 6).
absl::Status ReadPatternWindows(ConfigKeys& keys, DecoderShape& s,
                                uint64_t window, uint64_t period) {
  s.window.assign(s.layers, 0);
  ASSIGN_OR_RETURN(const bool listed, ReadLayerTypes(keys, window, s));
  if (listed) return absl::OkStatus();
  for (uint64_t i = 0; i < s.layers; ++i) {
    if ((i + 1) % period != 0) s.window[i] = window;
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelSpec*> StartDecoder(Conversion& c,
                                            const DecoderShape& s) {
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", s.vocab, s.hidden);
  return &spec;
}

// Embedding, the decoder layers, a final RMS norm and the LM head, named as
// in the transformers *ForCausalLM modules.
absl::Status BuildDecoder(Conversion& c, const DecoderShape& s) {
  ASSIGN_OR_RETURN(v1::ModelSpec* const started, StartDecoder(c, s));
  v1::ModelSpec& spec = *started;
  auto norm = [&s](absl::string_view name, uint64_t dim) {
    Layer layer = NormLayer(name, s.norm_kind, dim);
    layer.mutable_norm()->set_no_affine(s.norm_no_affine);
    return layer;
  };
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

// LlamaConfig, and GraniteConfig with Llama's defaults: vocab_size=32000,
// hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
// num_attention_heads=32, num_key_value_heads=None, head_dim=None (Granite
// has no such key), max_position_embeddings=2048,
// tie_word_embeddings=False, attention_bias=False (q, k, v and o
// projections), mlp_bias=False. Granite's embedding, residual, attention
// and logits multipliers are scalars.
absl::Status ConvertLlamaLike(const Json& config, Conversion& c,
                              const char* config_class) {
  ConfigKeys keys = TopKeys(config, c, config_class);
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {32000, 4096, 11008, 32, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  RETURN_IF_ERROR(ReadAttentionBias(keys, s));
  ASSIGN_OR_RETURN(s.mlp_bias, keys.Flag("mlp_bias", false));
  return BuildDecoder(c, s);
}

absl::Status ConvertLlama(const Json& config, Conversion& c) {
  return ConvertLlamaLike(config, c, "LlamaConfig");
}

absl::Status ConvertMistral(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "MistralConfig");
  // MistralConfig: vocab_size=32000, hidden_size=4096,
  // intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=8, head_dim=None, max_position_embeddings=4096*32,
  // tie_word_embeddings=False, sliding_window=4096. No biases.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {32000, 4096, 14336, 32, 32, 8,
                                          std::nullopt, 4096 * 32, false}));
  RETURN_IF_ERROR(ReadUniformWindow(keys, 4096, s));
  return BuildDecoder(c, s);
}

absl::Status ConvertMixtral(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "MixtralConfig");
  // MixtralConfig: vocab_size=32000, hidden_size=4096,
  // intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=8, head_dim=None, max_position_embeddings=4096*32,
  // tie_word_embeddings=False, sliding_window=None, num_local_experts=8,
  // num_experts_per_tok=2. The router is a bias-free linear.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {32000, 4096, 14336, 32, 32, 8,
                                          std::nullopt, 4096 * 32, false}));
  RETURN_IF_ERROR(ReadUniformWindow(keys, std::nullopt, s));
  ASSIGN_OR_RETURN(s.experts,
                   keys.Size("num_local_experts", 8, 1, kMaxExperts));
  ASSIGN_OR_RETURN(s.top_k, keys.Size("num_experts_per_tok", 2, 1, s.experts));
  s.expert_ffn = s.ffn;
  s.sparse.assign(s.layers, true);
  return BuildDecoder(c, s);
}

absl::Status ConvertQwen2(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "Qwen2Config");
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
  ConfigKeys keys = TopKeys(config, c, "Qwen2MoeConfig");
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
  ConfigKeys keys = TopKeys(config, c, "Qwen3Config");
  // Qwen3Config: vocab_size=151936, hidden_size=4096,
  // intermediate_size=22016, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=32, head_dim=128, max_position_embeddings=32768,
  // tie_word_embeddings=False, attention_bias=False. Every layer has RMS
  // q_norm and k_norm of head_dim weights.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {151936, 4096, 22016, 32, 32, 32, 128,
                                          32768, false}));
  RETURN_IF_ERROR(ReadAttentionBias(keys, s));
  s.qk_norm = true;
  RETURN_IF_ERROR(ReadQwenWindows(keys, s));
  return BuildDecoder(c, s);
}

absl::Status ConvertGemma(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "GemmaConfig");
  // GemmaConfig: vocab_size=256000, hidden_size=3072,
  // intermediate_size=24576, num_hidden_layers=28, num_attention_heads=16,
  // num_key_value_heads=16, head_dim=256, max_position_embeddings=8192,
  // tie_word_embeddings=True, attention_bias=False.
  ASSIGN_OR_RETURN(DecoderShape s,
                   ReadDecoderCore(keys, {256000, 3072, 24576, 28, 16, 16, 256,
                                          8192, true}));
  RETURN_IF_ERROR(ReadAttentionBias(keys, s));
  return BuildDecoder(c, s);
}

absl::Status ConvertGemma2(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "Gemma2Config");
  // Gemma2Config: vocab_size=256000, hidden_size=2304,
  // intermediate_size=9216, num_hidden_layers=26, num_attention_heads=8,
  // num_key_value_heads=4, head_dim=256, max_position_embeddings=8192,
  // tie_word_embeddings=True, attention_bias=False, sliding_window=4096
  // on the even layers (layer_types=None). Four RMS norms per layer.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {256000, 2304, 9216, 26, 8, 4, 256, 8192, true}));
  RETURN_IF_ERROR(ReadAttentionBias(keys, s));
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
  ConfigKeys keys = TopKeys(config, c, "Gemma3TextConfig");
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
  RETURN_IF_ERROR(ReadAttentionBias(keys, s));
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
  return ConvertLlamaLike(config, c, "GraniteConfig");
}

// OlmoConfig's sizes, which Olmo2Config keeps: vocab_size=50304,
// hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
// num_attention_heads=32, num_key_value_heads=None,
// max_position_embeddings=2048, tie_word_embeddings=False,
// attention_bias=False.
absl::StatusOr<DecoderShape> ReadOlmoCore(ConfigKeys& keys) {
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {50304, 4096, 11008, 32, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  RETURN_IF_ERROR(ReadAttentionBias(keys, s));
  return s;
}

absl::Status ConvertOlmo(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "OlmoConfig");
  // OlmoConfig: vocab_size=50304, hidden_size=4096, intermediate_size=11008,
  // num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=2048, tie_word_embeddings=False,
  // attention_bias=False. OlmoLayerNorm has no weight or bias.
  ASSIGN_OR_RETURN(DecoderShape s, ReadOlmoCore(keys));
  s.norm_kind = v1::Norm::LAYER;
  s.norm_no_affine = true;
  return BuildDecoder(c, s);
}

absl::Status ConvertOlmo2(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "Olmo2Config");
  // Olmo2Config: OlmoConfig's sizes (vocab_size=50304, hidden_size=4096,
  // intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
  // num_key_value_heads=None, max_position_embeddings=2048,
  // tie_word_embeddings=False, attention_bias=False). RMS norms after
  // attention and after the MLP (none before), and RMS q_norm and k_norm
  // over the whole projections.
  ASSIGN_OR_RETURN(DecoderShape s, ReadOlmoCore(keys));
  s.input_norm = false;
  s.post_feedforward_norm = true;
  s.projection_qk_norm = true;
  return BuildDecoder(c, s);
}

absl::Status ConvertPhi3(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "Phi3Config");
  // Phi3Config: vocab_size=32064, hidden_size=3072, intermediate_size=8192,
  // num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=4096, tie_word_embeddings=False,
  // sliding_window=None. No biases.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {32064, 3072, 8192, 32, 32, std::nullopt,
                             std::nullopt, 4096, false}));
  RETURN_IF_ERROR(ReadUniformWindow(keys, std::nullopt, s));
  c.Note(
      "Phi-3's fused qkv_proj and gate_up_proj hold the same parameters as "
      "separate projections.");
  return BuildDecoder(c, s);
}

// ---- DeepSeek-V3 (multi-head latent attention, routed experts) -------------

namespace {

// DeepseekV3Config's sizes (defaults in ReadDeepseekShape).
struct DeepseekShape {
  uint64_t vocab = 0;
  uint64_t hidden = 0;
  uint64_t ffn = 0;  // dense layers
  uint64_t expert_ffn = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t shared = 0;
  uint64_t experts = 0;
  uint64_t top_k = 0;
  uint64_t first_dense = 0;
  uint64_t kv_lora = 0;
  std::optional<uint64_t> q_lora;  // none: a plain q_proj
  uint64_t rope = 0;
  uint64_t nope = 0;
  uint64_t v_dim = 0;
  uint64_t max_positions = 0;
  bool tied = false;
  bool bias = false;
};

absl::StatusOr<DeepseekShape> ReadDeepseekShape(ConfigKeys& keys) {
  // DeepseekV3Config: vocab_size=129280, hidden_size=7168,
  // intermediate_size=18432 (dense layers), moe_intermediate_size=2048,
  // num_hidden_layers=61, num_attention_heads=128, n_shared_experts=1,
  // n_routed_experts=256, num_experts_per_tok=8, first_k_dense_replace=3,
  // kv_lora_rank=512, q_lora_rank=1536 (None: a plain q_proj),
  // qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
  // max_position_embeddings=4096, tie_word_embeddings=False,
  // attention_bias=False. The multi-token-prediction layer of the
  // checkpoint (num_nextn_predict_layers) is not part of the model.
  DeepseekShape s;
  ASSIGN_OR_RETURN(s.vocab, keys.Size("vocab_size", 129280, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.hidden, keys.Size("hidden_size", 7168, 1, kMaxHidden));
  ASSIGN_OR_RETURN(s.ffn, keys.Size("intermediate_size", 18432, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.expert_ffn,
                   keys.Size("moe_intermediate_size", 2048, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.layers, keys.Size("num_hidden_layers", 61, 1, kMaxLayers));
  ASSIGN_OR_RETURN(s.heads,
                   keys.Size("num_attention_heads", 128, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.shared, keys.Size("n_shared_experts", 1, 0, kMaxExperts));
  ASSIGN_OR_RETURN(s.experts,
                   keys.Size("n_routed_experts", 256, 1, kMaxExperts));
  ASSIGN_OR_RETURN(s.top_k, keys.Size("num_experts_per_tok", 8, 1, s.experts));
  ASSIGN_OR_RETURN(s.first_dense,
                   keys.Size("first_k_dense_replace", 3, 0, s.layers));
  ASSIGN_OR_RETURN(s.kv_lora, keys.Size("kv_lora_rank", 512, 1, kMaxHidden));
  ASSIGN_OR_RETURN(s.q_lora,
                   keys.OptionalSize("q_lora_rank", 1536, 1, kMaxHidden));
  ASSIGN_OR_RETURN(s.rope, keys.Size("qk_rope_head_dim", 64, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.nope, keys.Size("qk_nope_head_dim", 128, 0, kMaxHeads));
  ASSIGN_OR_RETURN(s.v_dim, keys.Size("v_head_dim", 128, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.max_positions, keys.Size("max_position_embeddings", 4096,
                                              1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(s.tied, keys.Flag("tie_word_embeddings", false));
  ASSIGN_OR_RETURN(s.bias, keys.Flag("attention_bias", false));
  return s;
}

// MLA as its projections and norms: queries through a low-rank q_a/q_b
// pair, keys and values from a shared kv_lora_rank latent plus one rotary
// key head; the fused attention core keeps its context (one v_head_dim
// vector per head) for o_proj.
void AppendMla(const DeepseekShape& s, std::vector<Layer>* parts) {
  const uint64_t h = s.hidden;
  const uint64_t qk = s.nope + s.rope;
  if (s.q_lora.has_value()) {
    parts->push_back(LinearLayer("self_attn.q_a_proj", h, *s.q_lora, s.bias));
    parts->push_back(
        NormLayer("self_attn.q_a_layernorm", v1::Norm::RMS, *s.q_lora));
    parts->push_back(
        LinearLayer("self_attn.q_b_proj", *s.q_lora, s.heads * qk, false));
  } else {
    parts->push_back(LinearLayer("self_attn.q_proj", h, s.heads * qk, false));
  }
  parts->push_back(LinearLayer("self_attn.kv_a_proj_with_mqa", h,
                               s.kv_lora + s.rope, s.bias));
  parts->push_back(
      NormLayer("self_attn.kv_a_layernorm", v1::Norm::RMS, s.kv_lora));
  parts->push_back(LinearLayer("self_attn.kv_b_proj", s.kv_lora,
                               s.heads * (s.nope + s.v_dim), false));
  Layer context = Named("self_attn (fused attention context)");
  context.mutable_elementwise()->set_op(v1::Elementwise::ACTIVATION);
  context.mutable_elementwise()->set_dim(s.heads * s.v_dim);
  parts->push_back(std::move(context));
  parts->push_back(
      LinearLayer("self_attn.o_proj", s.heads * s.v_dim, h, s.bias));
}

// The router's weight and its e_score_correction_bias (one per expert); the
// shared experts are as wide as the routed ones.
Layer DeepseekMoe(const DeepseekShape& s) {
  Layer moe = Named("mlp");
  v1::Moe* m = moe.mutable_moe();
  m->set_hidden(s.hidden);
  m->set_ffn(s.expert_ffn);
  m->set_experts(s.experts);
  m->set_top_k(s.top_k);
  m->set_shared_experts(s.shared);
  m->set_gated(true);
  m->set_router_bias(true);
  return moe;
}

}  // namespace

absl::Status ConvertDeepseekV3(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "DeepseekV3Config");
  ASSIGN_OR_RETURN(const DeepseekShape s, ReadDeepseekShape(keys));
  const uint64_t h = s.hidden;
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  *spec.add_layers() = EmbeddingLayer("model.embed_tokens", s.vocab, h);
  std::vector<Layer> per_layer;
  per_layer.reserve(s.layers);
  for (uint64_t i = 0; i < s.layers; ++i) {
    std::vector<Layer> parts;
    parts.push_back(NormLayer("input_layernorm", v1::Norm::RMS, h));
    AppendMla(s, &parts);
    parts.push_back(NormLayer("post_attention_layernorm", v1::Norm::RMS, h));
    parts.push_back(i < s.first_dense
                        ? MlpLayer("mlp", h, s.ffn, /*gated=*/true, false)
                        : DeepseekMoe(s));
    per_layer.push_back(BlockLayer("", 1, std::move(parts)));
  }
  AppendStack("model.layers", std::move(per_layer), &spec);
  *spec.add_layers() = NormLayer("model.norm", v1::Norm::RMS, h);
  *spec.add_layers() = LmHeadLayer("lm_head", h, s.vocab, s.tied);
  c.Note(absl::StrCat(
      "DeepseekV3ForCausalLM: multi-head latent attention written as its "
      "projections and RMS norms (exact parameters; the fused attention "
      "core keeps no score matrix, only its context), ",
      s.first_dense, " dense layer(s), then ", s.experts,
      " routed experts (top ", s.top_k, ") plus ", s.shared,
      " shared per layer, a router with a correction bias, ",
      s.tied ? "LM head tied to embed_tokens" : "untied LM head",
      ". The checkpoint's multi-token-prediction layer is not part of "
      "DeepseekV3ForCausalLM and is not counted."));
  return absl::OkStatus();
}

}  // namespace headroom::hf
