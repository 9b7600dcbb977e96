// Hugging Face decoder families with their own layouts: GPT-2, GPT-NeoX,
// OPT, Phi, BLOOM, Falcon, StableLM, StarCoder2, GPT-BigCode and MPT.

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/hf_builders.h"
#include "core/memory/model_spec.h"

namespace headroom::hf {

// ---- GPT-2 and GPT-NeoX ----------------------------------------------------

// A pre-LayerNorm decoder layer with biased attention (kv_heads key/value
// heads) and a 2-matrix MLP.
Layer BiasedDecoderLayer(absl::string_view name, uint64_t layers,
                         uint64_t hidden, uint64_t heads, uint64_t kv_heads,
                         uint64_t ffn, bool attention_bias, const char* norm1,
                         const char* attn, const char* norm2) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer(norm1, v1::Norm::LAYER, hidden));
  parts.push_back(AttentionLayer(attn, hidden, heads, kv_heads, hidden / heads,
                                 attention_bias, attention_bias,
                                 /*fused=*/true));
  parts.push_back(NormLayer(norm2, v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("mlp", hidden, ffn, /*gated=*/false, /*bias=*/true));
  return BlockLayer(name, static_cast<uint32_t>(layers), std::move(parts));
}

// GPT2Config's sizes, which GPTBigCodeConfig shares: vocab_size=50257,
// n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None
// (4 * n_embd).
struct Gpt2Sizes {
  uint64_t vocab = 0;
  uint64_t n_positions = 0;
  uint64_t hidden = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t ffn = 0;
};

absl::StatusOr<Gpt2Sizes> ReadGpt2Sizes(ConfigKeys& keys) {
  Gpt2Sizes g;
  ASSIGN_OR_RETURN(g.vocab, keys.Size("vocab_size", 50257, 1, kMaxVocab));
  ASSIGN_OR_RETURN(g.n_positions,
                   keys.Size("n_positions", 1024, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(g.hidden, keys.Size("n_embd", 768, 1, kMaxHidden));
  ASSIGN_OR_RETURN(g.layers, keys.Size("n_layer", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(g.heads, keys.Size("n_head", 12, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(g.hidden, g.heads, "n_embd", "n_head"));
  ASSIGN_OR_RETURN(std::optional<uint64_t> inner,
                   keys.OptionalSize("n_inner", std::nullopt, 1, kMaxFfn));
  g.ffn = inner.value_or(4 * g.hidden);
  if (!inner.has_value()) keys.AssumeDerived("n_inner", g.ffn, "4 * n_embd");
  return g;
}

// GPT-2's layout: token and learned position tables, the layers, ln_f and
// the LM head.
absl::Status BuildGpt2(Conversion& c, const Gpt2Sizes& g, uint64_t kv_heads,
                       bool tied) {
  ASSIGN_OR_RETURN(const uint64_t positions,
                   TablePositions(c, g.n_positions, "n_positions"));
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  *spec.add_layers() = EmbeddingLayer("transformer.wte", g.vocab, g.hidden);
  *spec.add_layers() =
      ParametersLayer("transformer.wpe", g.n_positions * g.hidden);
  *spec.add_layers() =
      BiasedDecoderLayer("transformer.h", g.layers, g.hidden, g.heads, kv_heads,
                         g.ffn, true, "ln_1", "attn", "ln_2");
  *spec.add_layers() = NormLayer("transformer.ln_f", v1::Norm::LAYER, g.hidden);
  *spec.add_layers() = LmHeadLayer("lm_head", g.hidden, g.vocab, tied);
  return absl::OkStatus();
}

absl::Status ConvertGpt2(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "GPT2Config");
  // GPT2Config: tie_word_embeddings keeps PretrainedConfig's True.
  ASSIGN_OR_RETURN(const Gpt2Sizes g, ReadGpt2Sizes(keys));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  RETURN_IF_ERROR(BuildGpt2(c, g, g.heads, tied));
  c.Note(absl::StrCat(
      "GPT2LMHeadModel: learned position table (n_positions x n_embd) as "
      "parameters, Conv1D projections with biases, ",
      tied ? "LM head tied to wte" : "untied LM head",
      ". Attention is marked fused (transformers' default "
      "scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertGptNeox(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "GPTNeoXConfig");
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
  ASSIGN_OR_RETURN(const uint64_t heads, ReadHeads(keys, "num_attention_heads",
                                                   64, hidden, "hidden_size"));
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  *spec.add_layers() = EmbeddingLayer("gpt_neox.embed_in", vocab, hidden);
  *spec.add_layers() = BiasedDecoderLayer(
      "gpt_neox.layers", layers, hidden, heads, heads, ffn, attention_bias,
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
  ConfigKeys keys = TopKeys(config, c, "OPTConfig");
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
  ASSIGN_OR_RETURN(const uint64_t heads, ReadHeads(keys, "num_attention_heads",
                                                   12, hidden, "hidden_size"));
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
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
  ConfigKeys keys = TopKeys(config, c, "PhiConfig");
  // PhiConfig: vocab_size=51200, hidden_size=2048, intermediate_size=8192,
  // num_hidden_layers=24, num_attention_heads=32, num_key_value_heads=None,
  // max_position_embeddings=2048, tie_word_embeddings=False,
  // qk_layernorm=False. PhiConfig has no head_dim key.
  ASSIGN_OR_RETURN(
      DecoderShape s,
      ReadDecoderCore(keys, {51200, 2048, 8192, 24, 32, std::nullopt,
                             std::nullopt, 2048, false}));
  ASSIGN_OR_RETURN(const bool qk_layernorm, keys.Flag("qk_layernorm", false));
  ASSIGN_OR_RETURN(v1::ModelSpec* const started, StartDecoder(c, s));
  v1::ModelSpec& spec = *started;
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

absl::Status ConvertBloom(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "BloomConfig");
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
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
  ConfigKeys keys = TopKeys(config, c, "FalconConfig");
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
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
  ConfigKeys keys = TopKeys(config, c, "StableLmConfig");
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
  ASSIGN_OR_RETURN(v1::ModelSpec* const started, StartDecoder(c, s));
  v1::ModelSpec& spec = *started;
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
  ConfigKeys keys = TopKeys(config, c, "Starcoder2Config");
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
  ASSIGN_OR_RETURN(v1::ModelSpec* const started, StartDecoder(c, s));
  v1::ModelSpec& spec = *started;
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
  ConfigKeys keys = TopKeys(config, c, "GPTBigCodeConfig");
  // GPTBigCodeConfig: GPT2Config's sizes, multi_query=True;
  // tie_word_embeddings keeps PretrainedConfig's True. GPT-2's layout
  // with one shared key/value head under multi_query.
  ASSIGN_OR_RETURN(const Gpt2Sizes g, ReadGpt2Sizes(keys));
  ASSIGN_OR_RETURN(const bool multi_query, keys.Flag("multi_query", true));
  ASSIGN_OR_RETURN(const bool tied, keys.Flag("tie_word_embeddings", true));
  RETURN_IF_ERROR(BuildGpt2(c, g, multi_query ? 1 : g.heads, tied));
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
  ConfigKeys keys = TopKeys(config, c, "MptConfig");
  // MptConfig: d_model=2048, n_heads=16, n_layers=24, expansion_ratio=4,
  // max_seq_len=2048, vocab_size=50368; tie_word_embeddings keeps
  // PretrainedConfig's True. transformers' MPT has no biases at all: its
  // LayerNorms drop theirs and every linear is bias-free; ALiBi has no
  // parameters.
  ASSIGN_OR_RETURN(const uint64_t hidden,
                   keys.Size("d_model", 2048, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t heads,
                   ReadHeads(keys, "n_heads", 16, hidden, "d_model"));
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
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

}  // namespace headroom::hf
