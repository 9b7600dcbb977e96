#ifndef HEADROOM_CORE_FRONTENDS_HF_CONFIG_H_
#define HEADROOM_CORE_FRONTENDS_HF_CONFIG_H_

// Hugging Face front-end: a model's config.json (the transformers library's
// PretrainedConfig as JSON) becomes a ModelSpec the planner can read.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// Largest config.json accepted; real ones are a few kilobytes (tens with a
// label map), so anything bigger is refused before it is parsed.
inline constexpr size_t kMaxHfConfigBytes = size_t{4} << 20;

// Default positions for models with rotary or relative positions, whose
// max_position_embeddings (often 32k-128k) is a capability, not the length
// they train at: the config's value capped at this.
inline constexpr uint64_t kDefaultHfSeqLenCap = 2048;

struct HfOptions {
  // Positions per sample of a text model (the sequence length). 0 takes the
  // config's max_position_embeddings (n_positions for GPT-2) capped at
  // kDefaultHfSeqLenCap; models with a learned position table refuse more
  // than the table holds. Vision towers take theirs from image_size and
  // patch_size and ignore it.
  uint64_t seq_len = 0;
  // Spec name; empty derives one from the config's _name_or_path, else from
  // its model_type.
  std::string name;
};

// The spec a config describes and what the conversion had to assume.
struct HfConversion {
  v1::ModelSpec spec;
  // Keys the config did not set, each "key=value (transformers <Class>
  // default)"; nested configs prefix their object ("text_config.hidden_size").
  std::vector<std::string> assumed_defaults;
  // Modelling choices a reviewer should know (positions chosen, which head
  // is modelled, what has no parameter effect). Also in spec.notes.
  std::vector<std::string> notes;
  // A model with learned absolute position tables: the rows of the shortest,
  // the longest seq_len it takes, and the config key that sets it
  // ("max_position_embeddings", "n_positions"). 0 and "" when its positions
  // are rotary or relative (no hard limit).
  uint64_t max_positions = 0;
  std::string max_positions_key;
};

// The model_type values SpecFromHfConfig handles, sorted.
const std::vector<std::string>& SupportedHfModelTypes();

// Converts config.json text into a valid spec whose CountParams equals the
// parameter count of the transformers model class: the *ForCausalLM model
// for decoders (LM head tied or not per tie_word_embeddings), the base model
// with its pooler for BERT, RoBERTa and ViT, T5ForConditionalGeneration and
// CLIPModel. INVALID_ARGUMENT for text that is not a JSON object, larger
// than kMaxHfConfigBytes, an unsupported model_type (the message lists the
// supported ones), or a key of the wrong type or out of range (named).
absl::StatusOr<HfConversion> SpecFromHfConfig(absl::string_view config_json,
                                              const HfOptions& options);

}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_HF_CONFIG_H_
