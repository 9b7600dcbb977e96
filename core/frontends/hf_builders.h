#ifndef HEADROOM_CORE_FRONTENDS_HF_BUILDERS_H_
#define HEADROOM_CORE_FRONTENDS_HF_BUILDERS_H_

// Internal to the Hugging Face front-end (hf_*.cc): the config reader, the
// layer builders the family converters share, and the converters
// themselves. Not for use outside core/frontends.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "core/frontends/hf_config.h"
#include "core/memory/model_spec.h"
#include "headroom/v1/model.pb.h"
#include "nlohmann/json.hpp"

namespace headroom::hf {

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
std::string Abbreviated(const Json& value);

// INVALID_ARGUMENT: `path` = value is outside min_value..max_value.
absl::Status OutOfRange(const std::string& path, uint64_t value,
                        uint64_t min_value, uint64_t max_value);

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

  // The key as error messages and assumed defaults name it.
  std::string Path(absl::string_view key) const {
    return absl::StrCat(prefix_, key);
  }

  // The raw value; the key must be present.
  const Json& Raw(const char* key) const { return object_.at(key); }

  // An integer in min_value..max_value; missing takes default_value.
  absl::StatusOr<uint64_t> Size(const char* key, uint64_t default_value,
                                uint64_t min_value, uint64_t max_value);

  // Like Size, but null, or a missing key whose default is None
  // (default_value nullopt), gives nullopt: the caller applies the class's
  // meaning of None and records it with AssumeDerived when missing.
  absl::StatusOr<std::optional<uint64_t>> OptionalSize(
      const char* key, std::optional<uint64_t> default_value,
      uint64_t min_value, uint64_t max_value);

  // A boolean; missing takes default_value.
  absl::StatusOr<bool> Flag(const char* key, bool default_value);

  // A string; missing takes default_value.
  absl::StatusOr<std::string> Text(const char* key,
                                   const std::string& default_value);

  // A list of 1 to 64 sizes (depths, hidden_sizes, num_heads), each in
  // 1..max_value; missing takes `defaults`.
  absl::StatusOr<std::vector<uint64_t>> SizeList(
      const char* key, const std::vector<uint64_t>& defaults,
      uint64_t max_value);

  // Records a value the class derives when `key` is missing (its default is
  // None), e.g. num_key_value_heads from num_attention_heads.
  void AssumeDerived(const char* key, uint64_t value, absl::string_view how);

 private:
  void Assume(const char* key, absl::string_view value);

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

// The keys of the top-level config object, read as transformers'
// `config_class` (also recorded in c.config_class for the spec's source).
ConfigKeys TopKeys(const Json& config, Conversion& c,
                   const std::string& config_class);

// ---- Layers and positions --------------------------------------------------

// A layer of no kind yet, named as the transformers module is.
Layer Named(absl::string_view name);

// A lookup table of rows x dim.
Layer EmbeddingLayer(absl::string_view name, uint64_t rows, uint64_t dim);

// Parameters with no activations of their own (position tables).
Layer ParametersLayer(absl::string_view name, uint64_t count);

// A norm over dim, with its weight and bias unless the caller drops them.
Layer NormLayer(absl::string_view name, v1::Norm::Kind kind, uint64_t dim);

// A dense projection in -> out.
Layer LinearLayer(absl::string_view name, uint64_t in, uint64_t out, bool bias);

// The LM head: logits over the vocabulary, its weight shared with the token
// embedding when tied.
Layer LmHeadLayer(absl::string_view name, uint64_t hidden, uint64_t vocab,
                  bool tied);

// The feed-forward block: two matrices, or three when gated.
Layer MlpLayer(absl::string_view name, uint64_t hidden, uint64_t ffn,
               bool gated, bool bias);

// Self-attention over `hidden` with `heads` query heads of head_dim each;
// kv_heads and head_dim are written only where they differ from the spec's
// defaults (heads, hidden / heads).
Layer AttentionLayer(absl::string_view name, uint64_t hidden, uint64_t heads,
                     uint64_t kv_heads, uint64_t head_dim, bool qkv_bias,
                     bool out_bias, bool fused);

// `layers` run in order, the whole repeated `repeat` times.
Layer BlockLayer(absl::string_view name, uint32_t repeat,
                 std::vector<Layer> layers);

// Appends one block per run of identical consecutive model layers, so a
// uniform stack is one repeated block and, say, a model whose last layers
// use a sliding window is two. Runs are named "<name>.<first>-<last>".
void AppendStack(absl::string_view name, std::vector<Layer> per_layer,
                 v1::ModelSpec* spec);

// Positions of a text model with rotary or relative positions: seq_len, or
// the config's maximum capped at kDefaultHfSeqLenCap.
absl::StatusOr<uint64_t> FreePositions(Conversion& c, uint64_t max_positions,
                                       absl::string_view key);

// Positions of a model with a learned position table of `usable` rows: it
// cannot run longer sequences, so a larger seq_len is refused.
absl::StatusOr<uint64_t> TablePositions(Conversion& c, uint64_t usable,
                                        absl::string_view key);

// INVALID_ARGUMENT naming both keys unless heads divides hidden.
absl::Status CheckHeadsDivide(uint64_t hidden, uint64_t heads,
                              absl::string_view hidden_key,
                              absl::string_view heads_key);

// The attention head count under `key` (1..kMaxHeads), which must divide
// `hidden` (read under hidden_key).
absl::StatusOr<uint64_t> ReadHeads(ConfigKeys& keys, const char* key,
                                   uint64_t default_value, uint64_t hidden,
                                   const char* hidden_key);

// The layer and head counts under their transformers names or the older
// n_layer / n_head ones the attribute maps accept.
absl::StatusOr<uint64_t> SizeEither(ConfigKeys& keys, const char* key,
                                    const char* alias, uint64_t default_value,
                                    uint64_t max_value);

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

// Reads the keys in DecoderDefaults (num_key_value_heads and head_dim
// derived when None) and checks the head counts divide.
absl::StatusOr<DecoderShape> ReadDecoderCore(ConfigKeys& keys,
                                             const DecoderDefaults& d);

// Starts a decoder's spec: positions from max_position_embeddings (see
// FreePositions), family "transformer" and the model.embed_tokens table.
absl::StatusOr<v1::ModelSpec*> StartDecoder(Conversion& c,
                                            const DecoderShape& s);

// Sets the spec's family and positions and returns it, for the layers.
v1::ModelSpec& StartSpec(Conversion& c, absl::string_view family,
                         uint64_t positions);

// ---- Converters, one per model_type ----------------------------------------

// Each fills c.spec() (family, positions, layers), c.config_class and the
// notes from one config object.
using Converter = absl::Status (*)(const Json&, Conversion&);

absl::Status ConvertLlama(const Json& config, Conversion& c);
absl::Status ConvertMistral(const Json& config, Conversion& c);
absl::Status ConvertMixtral(const Json& config, Conversion& c);
absl::Status ConvertQwen2(const Json& config, Conversion& c);
absl::Status ConvertQwen2Moe(const Json& config, Conversion& c);
absl::Status ConvertQwen3(const Json& config, Conversion& c);
absl::Status ConvertGemma(const Json& config, Conversion& c);
absl::Status ConvertGemma2(const Json& config, Conversion& c);
absl::Status ConvertGemma3Text(const Json& config, Conversion& c);
absl::Status ConvertGranite(const Json& config, Conversion& c);
absl::Status ConvertOlmo(const Json& config, Conversion& c);
absl::Status ConvertOlmo2(const Json& config, Conversion& c);
absl::Status ConvertPhi3(const Json& config, Conversion& c);
absl::Status ConvertGpt2(const Json& config, Conversion& c);
absl::Status ConvertGptNeox(const Json& config, Conversion& c);
absl::Status ConvertOpt(const Json& config, Conversion& c);
absl::Status ConvertPhi(const Json& config, Conversion& c);
absl::Status ConvertBloom(const Json& config, Conversion& c);
absl::Status ConvertFalcon(const Json& config, Conversion& c);
absl::Status ConvertStableLm(const Json& config, Conversion& c);
absl::Status ConvertStarcoder2(const Json& config, Conversion& c);
absl::Status ConvertGptBigCode(const Json& config, Conversion& c);
absl::Status ConvertMpt(const Json& config, Conversion& c);
absl::Status ConvertDebertaV2(const Json& config, Conversion& c);
absl::Status ConvertBart(const Json& config, Conversion& c);
absl::Status ConvertWhisper(const Json& config, Conversion& c);
absl::Status ConvertDeepseekV3(const Json& config, Conversion& c);
absl::Status ConvertBert(const Json& config, Conversion& c);
absl::Status ConvertRoberta(const Json& config, Conversion& c);
absl::Status ConvertXlmRoberta(const Json& config, Conversion& c);
absl::Status ConvertElectra(const Json& config, Conversion& c);
absl::Status ConvertDistilBert(const Json& config, Conversion& c);
absl::Status ConvertT5(const Json& config, Conversion& c);
absl::Status ConvertVit(const Json& config, Conversion& c);
absl::Status ConvertClip(const Json& config, Conversion& c);
absl::Status ConvertConvNext(const Json& config, Conversion& c);
absl::Status ConvertSwin(const Json& config, Conversion& c);
absl::Status ConvertDinov2(const Json& config, Conversion& c);
absl::Status ConvertDinov2WithRegisters(const Json& config, Conversion& c);

}  // namespace headroom::hf

#endif  // HEADROOM_CORE_FRONTENDS_HF_BUILDERS_H_
