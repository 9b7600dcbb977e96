// The layer builders and position rules the Hugging Face converters share.

#include "core/frontends/hf_builders.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/memory/model_spec.h"
#include "google/protobuf/util/message_differencer.h"

namespace headroom::hf {

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
  // The shortest table bounds the model (a decoder's and an encoder's).
  if (c.out->max_positions == 0 || usable < c.out->max_positions) {
    c.out->max_positions = usable;
    c.out->max_positions_key = std::string(key);
  }
  if (c.options.seq_len > usable) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len = ", c.options.seq_len,
                     " exceeds the learned position table (", key, " allows ",
                     usable, " positions); allowed 1..", usable));
  }
  return FreePositions(c, usable, key);
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

absl::StatusOr<uint64_t> ReadHeads(ConfigKeys& keys, const char* key,
                                   uint64_t default_value, uint64_t hidden,
                                   const char* hidden_key) {
  ASSIGN_OR_RETURN(const uint64_t heads,
                   keys.Size(key, default_value, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(hidden, heads, hidden_key, key));
  return heads;
}

// The layer and head counts under their transformers names or the older
// n_layer / n_head ones the attribute maps accept.
absl::StatusOr<uint64_t> SizeEither(ConfigKeys& keys, const char* key,
                                    const char* alias, uint64_t default_value,
                                    uint64_t max_value) {
  return keys.Has(alias) && !keys.Has(key)
             ? keys.Size(alias, default_value, 1, max_value)
             : keys.Size(key, default_value, 1, max_value);
}

ConfigKeys TopKeys(const Json& config, Conversion& c,
                   const std::string& config_class) {
  c.config_class = config_class;
  return ConfigKeys(config, "", c.config_class, &c.out->assumed_defaults);
}

v1::ModelSpec& StartSpec(Conversion& c, absl::string_view family,
                         uint64_t positions) {
  v1::ModelSpec& spec = c.spec();
  spec.set_family(std::string(family));
  spec.set_positions(positions);
  return spec;
}

}  // namespace headroom::hf
