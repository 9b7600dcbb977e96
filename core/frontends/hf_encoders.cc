// Hugging Face encoder families: BERT, RoBERTa, XLM-RoBERTa, ELECTRA,
// DistilBERT and DeBERTa-v2.

#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "core/frontends/hf_builders.h"
#include "core/memory/model_spec.h"

namespace headroom::hf {

// ---- DeBERTa-v2 / v3 -------------------------------------------------------

namespace {

// DebertaV2Config's sizes and switches (defaults in ReadDebertaShape).
struct DebertaShape {
  uint64_t vocab = 0;
  uint64_t hidden = 0;
  uint64_t embedding = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t ffn = 0;
  uint64_t max_positions = 0;
  uint64_t type_vocab = 0;
  bool biased_input = true;
  bool relative = false;
  int64_t max_relative = -1;
  int64_t buckets = -1;
  bool share_att_key = false;
  std::string norm_rel_ebd;
  // pos_att_type names "c2p", "p2c".
  bool c2p = false;
  bool p2c = false;
};

// max_relative_positions and position_buckets take -1 for "unset".
absl::StatusOr<int64_t> SignedKey(ConfigKeys& keys, const char* key,
                                  int64_t default_value) {
  if (!keys.Has(key)) return default_value;
  const Json& v = keys.Raw(key);
  if (!v.is_number_integer() || v.get<int64_t>() < -1 ||
      v.get<int64_t>() > static_cast<int64_t>(kMaxSpecDimension)) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: ", key, " = ", Abbreviated(v),
                     " is out of range; allowed -1..", kMaxSpecDimension));
  }
  return v.get<int64_t>();
}

// pos_att_type: a list, or a "|"-separated string in older configs.
void ReadPosAttTypes(ConfigKeys& keys, DebertaShape* s) {
  if (!keys.Has("pos_att_type") || keys.Raw("pos_att_type").is_null()) return;
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
    s->c2p = s->c2p || lower == "c2p";
    s->p2c = s->p2c || lower == "p2c";
  }
}

absl::StatusOr<DebertaShape> ReadDebertaShape(ConfigKeys& keys) {
  // DebertaV2Config: vocab_size=128100, hidden_size=1536,
  // num_hidden_layers=24, num_attention_heads=24, intermediate_size=6144,
  // max_position_embeddings=512, type_vocab_size=0,
  // position_biased_input=True, relative_attention=False,
  // max_relative_positions=-1, pos_att_type=None; read through getattr:
  // embedding_size (hidden_size), position_buckets=-1, share_att_key=False,
  // norm_rel_ebd="none", conv_kernel_size=0.
  DebertaShape s;
  ASSIGN_OR_RETURN(s.vocab, keys.Size("vocab_size", 128100, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.hidden, keys.Size("hidden_size", 1536, 1, kMaxHidden));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> embedding_key,
      keys.OptionalSize("embedding_size", std::nullopt, 1, kMaxHidden));
  s.embedding = embedding_key.value_or(s.hidden);
  if (!embedding_key.has_value()) {
    keys.AssumeDerived("embedding_size", s.embedding, "hidden_size");
  }
  ASSIGN_OR_RETURN(s.layers, keys.Size("num_hidden_layers", 24, 1, kMaxLayers));
  ASSIGN_OR_RETURN(s.heads, ReadHeads(keys, "num_attention_heads", 24, s.hidden,
                                      "hidden_size"));
  ASSIGN_OR_RETURN(s.ffn, keys.Size("intermediate_size", 6144, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.max_positions, keys.Size("max_position_embeddings", 512, 1,
                                              kMaxSpecDimension));
  ASSIGN_OR_RETURN(s.type_vocab, keys.Size("type_vocab_size", 0, 0, kMaxVocab));
  ASSIGN_OR_RETURN(s.biased_input, keys.Flag("position_biased_input", true));
  ASSIGN_OR_RETURN(s.relative, keys.Flag("relative_attention", false));
  ASSIGN_OR_RETURN(s.max_relative,
                   SignedKey(keys, "max_relative_positions", -1));
  ASSIGN_OR_RETURN(s.buckets, SignedKey(keys, "position_buckets", -1));
  ASSIGN_OR_RETURN(s.share_att_key, keys.Flag("share_att_key", false));
  ASSIGN_OR_RETURN(s.norm_rel_ebd, keys.Text("norm_rel_ebd", "none"));
  ASSIGN_OR_RETURN(const uint64_t conv_kernel,
                   keys.Size("conv_kernel_size", 0, 0, kMaxPatch));
  if (conv_kernel != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: conv_kernel_size = ", conv_kernel,
        " is not supported (DeBERTa-v2's convolution layer); allowed 0"));
  }
  ReadPosAttTypes(keys, &s);
  return s;
}

// The embeddings, and the relative position embeddings (with their norm)
// that the layers share.
void AppendDebertaEmbeddings(const DebertaShape& s, v1::ModelSpec* spec) {
  const uint64_t hidden = s.hidden;
  const uint64_t embedding = s.embedding;
  *spec->add_layers() =
      EmbeddingLayer("deberta.embeddings.word_embeddings", s.vocab, embedding);
  if (s.biased_input) {
    *spec->add_layers() = ParametersLayer(
        "deberta.embeddings.position_embeddings", s.max_positions * embedding);
  }
  if (s.type_vocab > 0) {
    *spec->add_layers() = ParametersLayer(
        "deberta.embeddings.token_type_embeddings", s.type_vocab * embedding);
  }
  if (embedding != hidden) {
    *spec->add_layers() =
        LinearLayer("deberta.embeddings.embed_proj", embedding, hidden, false);
  }
  *spec->add_layers() =
      NormLayer("deberta.embeddings.LayerNorm", v1::Norm::LAYER, hidden);
  if (!s.relative) return;
  const uint64_t max_rel = s.max_relative < 1
                               ? s.max_positions
                               : static_cast<uint64_t>(s.max_relative);
  const uint64_t rel_rows =
      s.buckets > 0 ? 2 * static_cast<uint64_t>(s.buckets) : 2 * max_rel;
  *spec->add_layers() =
      ParametersLayer("deberta.encoder.rel_embeddings", rel_rows * hidden);
  if (absl::StrContains(absl::AsciiStrToLower(s.norm_rel_ebd), "layer_norm")) {
    *spec->add_layers() =
        NormLayer("deberta.encoder.LayerNorm", v1::Norm::LAYER, hidden);
  }
}

// One encoder layer's parts.
std::vector<Layer> DebertaLayerParts(const DebertaShape& s) {
  const uint64_t hidden = s.hidden;
  std::vector<Layer> parts;
  // Disentangled attention adds position terms to an explicit score matrix.
  parts.push_back(AttentionLayer("attention", hidden, s.heads, s.heads,
                                 hidden / s.heads, true, true,
                                 /*fused=*/false));
  if (s.relative && !s.share_att_key) {
    if (s.c2p) {
      parts.push_back(
          LinearLayer("attention.self.pos_key_proj", hidden, hidden, true));
    }
    if (s.p2c) {
      parts.push_back(
          LinearLayer("attention.self.pos_query_proj", hidden, hidden, true));
    }
  }
  parts.push_back(
      NormLayer("attention.output.LayerNorm", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("intermediate+output", hidden, s.ffn, false, true));
  parts.push_back(NormLayer("output.LayerNorm", v1::Norm::LAYER, hidden));
  return parts;
}

}  // namespace

absl::Status ConvertDebertaV2(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "DebertaV2Config");
  ASSIGN_OR_RETURN(const DebertaShape s, ReadDebertaShape(keys));
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      TablePositions(c, s.max_positions, "max_position_embeddings"));
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  AppendDebertaEmbeddings(s, &spec);
  *spec.add_layers() =
      BlockLayer("deberta.encoder.layer", static_cast<uint32_t>(s.layers),
                 DebertaLayerParts(s));
  c.Note(
      "DebertaV2Model (no pooler; a classifier or masked-LM head named in "
      "architectures is not modelled): relative position embeddings shared "
      "by the layers, disentangled attention over an explicit score "
      "matrix (not marked fused).");
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

namespace {

// A BERT-shaped config's sizes (defaults in the flavor and ReadBertShape).
struct BertShape {
  uint64_t vocab = 0;
  uint64_t hidden = 0;
  uint64_t embedding = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t ffn = 0;
  uint64_t max_positions = 0;
  uint64_t type_vocab = 0;
  std::string position_type;
  // Positions a sequence may use: max_positions, less RoBERTa's pad_token_id
  // + 1.
  uint64_t usable = 0;
};

absl::StatusOr<BertShape> ReadBertShape(ConfigKeys& keys, const BertFlavor& f) {
  // BertConfig: vocab_size=30522, hidden_size=768, num_hidden_layers=12,
  // num_attention_heads=12, intermediate_size=3072,
  // max_position_embeddings=512, type_vocab_size=2,
  // position_embedding_type="absolute". RobertaConfig: the same but
  // vocab_size=50265 and pad_token_id=1 (positions start after it).
  // XLMRobertaConfig: BertConfig's sizes (vocab_size=30522) with
  // RoBERTa's positions. ElectraConfig: vocab_size=30522,
  // embedding_size=128, hidden_size=256, num_attention_heads=4,
  // intermediate_size=1024, the rest as BertConfig.
  BertShape s;
  ASSIGN_OR_RETURN(s.vocab,
                   keys.Size("vocab_size", f.vocab_size, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.hidden,
                   keys.Size("hidden_size", f.hidden_size, 1, kMaxHidden));
  s.embedding = s.hidden;
  if (f.electra) {
    ASSIGN_OR_RETURN(s.embedding,
                     keys.Size("embedding_size", 128, 1, kMaxHidden));
  }
  ASSIGN_OR_RETURN(s.layers, keys.Size("num_hidden_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(s.heads, keys.Size("num_attention_heads",
                                      f.num_attention_heads, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(s.hidden, s.heads, "hidden_size",
                                   "num_attention_heads"));
  ASSIGN_OR_RETURN(
      s.ffn, keys.Size("intermediate_size", f.intermediate_size, 1, kMaxFfn));
  ASSIGN_OR_RETURN(s.max_positions, keys.Size("max_position_embeddings", 512, 1,
                                              kMaxSpecDimension));
  ASSIGN_OR_RETURN(s.type_vocab, keys.Size("type_vocab_size", 2, 1, kMaxVocab));
  ASSIGN_OR_RETURN(s.position_type,
                   keys.Text("position_embedding_type", "absolute"));
  if (s.position_type != "absolute" && s.position_type != "relative_key" &&
      s.position_type != "relative_key_query") {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: position_embedding_type = \"", s.position_type,
        "\" is not supported; allowed \"absolute\", \"relative_key\", "
        "\"relative_key_query\""));
  }
  s.usable = s.max_positions;
  if (f.roberta_positions) {
    ASSIGN_OR_RETURN(const uint64_t pad,
                     keys.Size("pad_token_id", 1, 0, kMaxVocab));
    if (pad + 1 >= s.max_positions) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: max_position_embeddings = ", s.max_positions,
          " leaves no positions after pad_token_id = ", pad,
          "; RoBERTa numbers positions from pad_token_id + 1"));
    }
    s.usable = s.max_positions - pad - 1;
  }
  return s;
}

// The embeddings: word, position and token-type tables, their norm, and
// ELECTRA's projection to hidden_size.
void AppendBertEmbeddings(const BertShape& s, const std::string& prefix,
                          v1::ModelSpec* spec) {
  *spec->add_layers() = EmbeddingLayer(prefix + "embeddings.word_embeddings",
                                       s.vocab, s.embedding);
  *spec->add_layers() = ParametersLayer(
      prefix + "embeddings.position_embeddings", s.max_positions * s.embedding);
  *spec->add_layers() = ParametersLayer(
      prefix + "embeddings.token_type_embeddings", s.type_vocab * s.embedding);
  *spec->add_layers() =
      NormLayer(prefix + "embeddings.LayerNorm", v1::Norm::LAYER, s.embedding);
  if (s.embedding != s.hidden) {
    *spec->add_layers() =
        LinearLayer(prefix + "embeddings_project", s.embedding, s.hidden, true);
  }
}

// One encoder layer's parts.
std::vector<Layer> BertLayerParts(const BertShape& s) {
  const uint64_t hidden = s.hidden;
  std::vector<Layer> parts;
  if (s.position_type != "absolute") {
    // distance_embedding: (2 * max_position_embeddings - 1) x head size.
    parts.push_back(
        ParametersLayer("attention.self.distance_embedding",
                        (2 * s.max_positions - 1) * (hidden / s.heads)));
  }
  parts.push_back(AttentionLayer("attention", hidden, s.heads, s.heads,
                                 hidden / s.heads, true, true,
                                 /*fused=*/s.position_type == "absolute"));
  parts.push_back(
      NormLayer("attention.output.LayerNorm", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("intermediate+output", hidden, s.ffn, false, true));
  parts.push_back(NormLayer("output.LayerNorm", v1::Norm::LAYER, hidden));
  return parts;
}

}  // namespace

absl::Status ConvertBertLike(const Json& config, Conversion& c,
                             const BertFlavor& f) {
  ConfigKeys keys = TopKeys(config, c, f.config_class);
  ASSIGN_OR_RETURN(const BertShape s, ReadBertShape(keys, f));
  ASSIGN_OR_RETURN(
      const uint64_t positions,
      TablePositions(c, s.usable,
                     f.roberta_positions
                         ? "max_position_embeddings - pad_token_id - 1"
                         : "max_position_embeddings"));
  const std::string prefix = f.prefix;
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
  AppendBertEmbeddings(s, prefix, &spec);
  *spec.add_layers() =
      BlockLayer(prefix + "encoder.layer", static_cast<uint32_t>(s.layers),
                 BertLayerParts(s));
  if (!f.electra) {
    Layer pooler =
        LinearLayer(prefix + "pooler.dense", s.hidden, s.hidden, true);
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
  ConfigKeys keys = TopKeys(config, c, "DistilBertConfig");
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
  v1::ModelSpec& spec = StartSpec(c, "transformer", positions);
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

}  // namespace headroom::hf
