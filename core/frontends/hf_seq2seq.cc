// Hugging Face encoder-decoder families: BART, Whisper and T5.

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/hf_builders.h"
#include "core/memory/model_spec.h"

namespace headroom::hf {

// ---- BART and Whisper (encoder-decoder) ------------------------------------

absl::Status ConvertBart(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "BartConfig");
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
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

namespace {

// WhisperConfig's sizes (defaults in ReadWhisperShape).
struct WhisperShape {
  uint64_t vocab = 0;
  uint64_t mels = 0;
  uint64_t d = 0;
  uint64_t enc_layers = 0;
  uint64_t enc_heads = 0;
  uint64_t enc_ffn = 0;
  uint64_t dec_layers = 0;
  uint64_t dec_heads = 0;
  uint64_t dec_ffn = 0;
  uint64_t source = 0;  // max_source_positions
  uint64_t target = 0;  // max_target_positions
  bool tied = true;
};

absl::StatusOr<WhisperShape> ReadWhisperShape(ConfigKeys& keys) {
  // WhisperConfig: vocab_size=51865, num_mel_bins=80, encoder_layers=4,
  // encoder_attention_heads=6, decoder_layers=4, decoder_attention_heads=6,
  // decoder_ffn_dim=1536, encoder_ffn_dim=1536, d_model=384,
  // max_source_positions=1500, max_target_positions=448;
  // tie_word_embeddings keeps PretrainedConfig's True.
  WhisperShape s;
  ASSIGN_OR_RETURN(s.vocab, keys.Size("vocab_size", 51865, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.mels, keys.Size("num_mel_bins", 80, 1, kMaxChannels));
  ASSIGN_OR_RETURN(s.d, keys.Size("d_model", 384, 1, kMaxHidden));
  ASSIGN_OR_RETURN(s.enc_layers, keys.Size("encoder_layers", 4, 1, kMaxLayers));
  ASSIGN_OR_RETURN(s.enc_heads,
                   keys.Size("encoder_attention_heads", 6, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.enc_ffn, keys.Size("encoder_ffn_dim", 1536, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.dec_layers, keys.Size("decoder_layers", 4, 1, kMaxLayers));
  ASSIGN_OR_RETURN(s.dec_heads,
                   keys.Size("decoder_attention_heads", 6, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.dec_ffn, keys.Size("decoder_ffn_dim", 1536, 1, kMaxFfn));
  RETURN_IF_ERROR(
      CheckHeadsDivide(s.d, s.enc_heads, "d_model", "encoder_attention_heads"));
  RETURN_IF_ERROR(
      CheckHeadsDivide(s.d, s.dec_heads, "d_model", "decoder_attention_heads"));
  ASSIGN_OR_RETURN(s.source, keys.Size("max_source_positions", 1500, 1,
                                       kMaxSpecDimension / 2));
  ASSIGN_OR_RETURN(
      s.target, keys.Size("max_target_positions", 448, 1, kMaxSpecDimension));
  ASSIGN_OR_RETURN(s.tied, keys.Flag("tie_word_embeddings", true));
  return s;
}

// Whisper's q, v and out projections have biases, k_proj has none.
void AppendWhisperAttention(absl::string_view name, uint64_t d, uint64_t heads,
                            std::vector<Layer>* parts) {
  parts->push_back(AttentionLayer(name, d, heads, heads, d / heads, false, true,
                                  /*fused=*/true));
  parts->push_back(
      ParametersLayer(absl::StrCat(name, ".q_proj+v_proj.bias"), 2 * d));
}

// The encoder's two 1-d convolutions: 2 * source mel frames in, source
// positions out (the second has stride 2).
void AppendWhisperConvs(const WhisperShape& s, v1::ModelSpec* spec) {
  Layer conv1 = Named("model.encoder.conv1");
  conv1.set_positions(2 * s.source);
  conv1.mutable_conv()->set_in_channels(s.mels);
  conv1.mutable_conv()->set_out_channels(s.d);
  conv1.mutable_conv()->add_kernel(3);
  conv1.mutable_conv()->set_dims(1);
  conv1.mutable_conv()->set_bias(true);
  *spec->add_layers() = std::move(conv1);
  Layer conv2 = Named("model.encoder.conv2");
  conv2.mutable_conv()->set_in_channels(s.d);
  conv2.mutable_conv()->set_out_channels(s.d);
  conv2.mutable_conv()->add_kernel(3);
  conv2.mutable_conv()->set_dims(1);
  conv2.mutable_conv()->set_bias(true);
  conv2.mutable_conv()->set_in_positions(2 * s.source);
  *spec->add_layers() = std::move(conv2);
}

std::vector<Layer> WhisperEncoderParts(const WhisperShape& s) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer("self_attn_layer_norm", v1::Norm::LAYER, s.d));
  AppendWhisperAttention("self_attn", s.d, s.enc_heads, &parts);
  parts.push_back(NormLayer("final_layer_norm", v1::Norm::LAYER, s.d));
  parts.push_back(MlpLayer("fc1+fc2", s.d, s.enc_ffn, false, true));
  return parts;
}

std::vector<Layer> WhisperDecoderParts(const WhisperShape& s) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer("self_attn_layer_norm", v1::Norm::LAYER, s.d));
  AppendWhisperAttention("self_attn", s.d, s.dec_heads, &parts);
  parts.push_back(NormLayer("encoder_attn_layer_norm", v1::Norm::LAYER, s.d));
  AppendWhisperAttention("encoder_attn", s.d, s.dec_heads, &parts);
  // The cross attention reads the encoder's positions.
  parts[parts.size() - 2].mutable_attention()->set_kv_positions(s.source);
  parts.push_back(NormLayer("final_layer_norm", v1::Norm::LAYER, s.d));
  parts.push_back(MlpLayer("fc1+fc2", s.d, s.dec_ffn, false, true));
  return parts;
}

}  // namespace

absl::Status ConvertWhisper(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "WhisperConfig");
  ASSIGN_OR_RETURN(const WhisperShape s, ReadWhisperShape(keys));
  const uint64_t d = s.d;
  // seq_len sets the decoder's tokens; the encoder always sees 30 s of
  // audio, 2 * max_source_positions mel frames.
  ASSIGN_OR_RETURN(const uint64_t text,
                   TablePositions(c, s.target, "max_target_positions"));
  v1::ModelSpec& spec = StartSpec(c, "transformer", s.source);
  spec.set_input_source(absl::StrCat(
      2 * s.source, " mel frames (", s.mels, " bins) per sample, ", s.source,
      " encoder positions after the stride-2 convolution, and ",
      spec.input_source()));
  AppendWhisperConvs(s, &spec);
  *spec.add_layers() =
      ParametersLayer("model.encoder.embed_positions", s.source * d);
  *spec.add_layers() =
      BlockLayer("model.encoder.layers", static_cast<uint32_t>(s.enc_layers),
                 WhisperEncoderParts(s));
  *spec.add_layers() =
      NormLayer("model.encoder.layer_norm", v1::Norm::LAYER, d);
  Layer tokens = EmbeddingLayer("model.decoder.embed_tokens", s.vocab, d);
  tokens.set_positions(text);
  *spec.add_layers() = std::move(tokens);
  *spec.add_layers() =
      ParametersLayer("model.decoder.embed_positions", s.target * d);
  Layer stack =
      BlockLayer("model.decoder.layers", static_cast<uint32_t>(s.dec_layers),
                 WhisperDecoderParts(s));
  stack.set_positions(text);
  *spec.add_layers() = std::move(stack);
  Layer final_norm = NormLayer("model.decoder.layer_norm", v1::Norm::LAYER, d);
  final_norm.set_positions(text);
  *spec.add_layers() = std::move(final_norm);
  Layer head = LmHeadLayer("proj_out", d, s.vocab, s.tied);
  head.set_positions(text);
  *spec.add_layers() = std::move(head);
  c.Note(absl::StrCat(
      "WhisperForConditionalGeneration: two 1-d convolutions over the mel "
      "frames, pre-LayerNorm encoder and decoder, position tables as "
      "parameters (the encoder's sinusoidal one frozen but counted), k_proj "
      "without bias (the q and v biases are listed beside each attention), ",
      s.tied ? "proj_out tied to embed_tokens" : "untied proj_out",
      ". Attention is marked fused (scaled_dot_product_attention)."));
  return absl::OkStatus();
}

// ---- T5 --------------------------------------------------------------------

namespace {

// T5Config's sizes (defaults in ReadT5Shape).
struct T5Shape {
  uint64_t vocab = 0;
  uint64_t d_model = 0;
  uint64_t d_kv = 0;
  uint64_t d_ff = 0;
  uint64_t encoder_layers = 0;
  uint64_t decoder_layers = 0;
  uint64_t heads = 0;
  uint64_t buckets = 0;
  bool gated = false;  // feed_forward_proj "gated-ACT": wi_0 and wi_1
  bool tied = true;
  std::optional<uint64_t> n_positions;
};

absl::StatusOr<T5Shape> ReadT5Shape(ConfigKeys& keys) {
  // T5Config: vocab_size=32128, d_model=512, d_kv=64, d_ff=2048,
  // num_layers=6, num_decoder_layers=None (num_layers), num_heads=8,
  // relative_attention_num_buckets=32, feed_forward_proj="relu";
  // tie_word_embeddings keeps PretrainedConfig's True.
  T5Shape s;
  ASSIGN_OR_RETURN(s.vocab, keys.Size("vocab_size", 32128, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.d_model, keys.Size("d_model", 512, 1, kMaxHidden));
  ASSIGN_OR_RETURN(s.d_kv, keys.Size("d_kv", 64, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.d_ff, keys.Size("d_ff", 2048, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.encoder_layers, keys.Size("num_layers", 6, 1, kMaxLayers));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> decoder,
      keys.OptionalSize("num_decoder_layers", std::nullopt, 1, kMaxLayers));
  s.decoder_layers = decoder.value_or(s.encoder_layers);
  if (!decoder.has_value()) {
    keys.AssumeDerived("num_decoder_layers", s.decoder_layers, "num_layers");
  }
  ASSIGN_OR_RETURN(s.heads, keys.Size("num_heads", 8, 1, kMaxHeads));
  ASSIGN_OR_RETURN(s.buckets, keys.Size("relative_attention_num_buckets", 32, 1,
                                        kMaxHidden));
  ASSIGN_OR_RETURN(const std::string proj,
                   keys.Text("feed_forward_proj", "relu"));
  // T5Config accepts "ACT" or "gated-ACT"; gated uses wi_0 and wi_1.
  s.gated = absl::StartsWith(proj, "gated-");
  const absl::string_view act =
      s.gated ? absl::string_view(proj).substr(6) : absl::string_view(proj);
  if (act.empty() || act.find('-') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: feed_forward_proj = \"", proj,
        "\" is not a valid activation; allowed \"ACT\" or \"gated-ACT\" "
        "(e.g. \"relu\", \"gated-gelu\")"));
  }
  ASSIGN_OR_RETURN(s.tied, keys.Flag("tie_word_embeddings", true));
  // T5 has relative positions and no maximum; n_positions (512 in the
  // original checkpoints) is the pretraining input length when present.
  ASSIGN_OR_RETURN(s.n_positions, keys.OptionalSize("n_positions", std::nullopt,
                                                    1, kMaxSpecDimension));
  return s;
}

Layer T5Attention(const T5Shape& s, absl::string_view name) {
  return AttentionLayer(name, s.d_model, s.heads, s.heads, s.d_kv, false, false,
                        /*fused=*/false);
}

std::vector<Layer> T5EncoderParts(const T5Shape& s) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer("layer.0.layer_norm", v1::Norm::RMS, s.d_model));
  parts.push_back(T5Attention(s, "layer.0.SelfAttention"));
  parts.push_back(NormLayer("layer.1.layer_norm", v1::Norm::RMS, s.d_model));
  parts.push_back(
      MlpLayer("layer.1.DenseReluDense", s.d_model, s.d_ff, s.gated, false));
  return parts;
}

std::vector<Layer> T5DecoderParts(const T5Shape& s) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer("layer.0.layer_norm", v1::Norm::RMS, s.d_model));
  parts.push_back(T5Attention(s, "layer.0.SelfAttention"));
  parts.push_back(NormLayer("layer.1.layer_norm", v1::Norm::RMS, s.d_model));
  parts.push_back(T5Attention(s, "layer.1.EncDecAttention"));
  parts.push_back(NormLayer("layer.2.layer_norm", v1::Norm::RMS, s.d_model));
  parts.push_back(
      MlpLayer("layer.2.DenseReluDense", s.d_model, s.d_ff, s.gated, false));
  return parts;
}

}  // namespace

absl::Status ConvertT5(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "T5Config");
  ASSIGN_OR_RETURN(const T5Shape s, ReadT5Shape(keys));
  const uint64_t d_model = s.d_model;
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      FreePositions(c, s.n_positions.value_or(512), "n_positions"));
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  *spec.add_layers() = EmbeddingLayer("shared", s.vocab, d_model);
  *spec.add_layers() = ParametersLayer(
      "encoder.block.0.layer.0.SelfAttention.relative_attention_bias",
      s.buckets * s.heads);
  *spec.add_layers() =
      BlockLayer("encoder.block", static_cast<uint32_t>(s.encoder_layers),
                 T5EncoderParts(s));
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
      s.buckets * s.heads);
  *spec.add_layers() =
      BlockLayer("decoder.block", static_cast<uint32_t>(s.decoder_layers),
                 T5DecoderParts(s));
  *spec.add_layers() =
      NormLayer("decoder.final_layer_norm", v1::Norm::RMS, d_model);
  *spec.add_layers() = LmHeadLayer("lm_head", d_model, s.vocab, s.tied);
  c.Note(absl::StrCat(
      "T5ForConditionalGeneration: no biases, RMS layer norms, relative "
      "attention bias tables in the first layer of each stack, ",
      s.gated ? "gated feed-forward (wi_0, wi_1, wo), " : "",
      s.tied ? "LM head tied to the shared embedding" : "untied LM head",
      ". The decoder runs as many positions as the encoder. Attention is "
      "not fused: T5 adds its position bias to an explicit score matrix."));
  return absl::OkStatus();
}

}  // namespace headroom::hf
