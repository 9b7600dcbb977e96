#ifndef HEADROOM_CORE_CATALOG_MODEL_CATALOG_H_
#define HEADROOM_CORE_CATALOG_MODEL_CATALOG_H_

// The model catalog: one validated spec per template, and the full models
// converted from published Hugging Face configs (io/ reads both from
// models/ and models/hf/).

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// Where a full model in the catalog came from: the published config.json it
// was converted from, kept so a request at another length converts it again.
struct FullModelSource {
  // The file as shipped, relative to the catalog ("hf/llama-3-8b.json").
  std::string file;
  // The Hugging Face Hub repository that publishes it
  // ("meta-llama/Meta-Llama-3-8B").
  std::string hub;
  // The config text as published.
  std::string hf_config;
  // What its conversion at the config's own length assumed (HfConversion).
  std::vector<std::string> assumed_defaults;
  // Other names frameworks give the same model (litgpt's `name`, torchtune's
  // builder functions), each an id ResolveId takes.
  std::vector<std::string> aliases;
  // Its learned position table (HfConversion::max_positions): the longest
  // sequence it, and a template cut from it, can take, and the config key;
  // 0 and "" for rotary or relative positions.
  uint64_t max_positions = 0;
  std::string max_positions_key;
};

class ModelCatalog {
 public:
  ModelCatalog() = default;

  // Adds a validated spec; INVALID_ARGUMENT if its name is taken.
  absl::Status Add(v1::ModelSpec spec);

  // The template's spec; NOT_FOUND lists the closest template names.
  absl::StatusOr<const v1::ModelSpec*> Find(absl::string_view name) const;

  // Adds a full model: `spec` is `source.hf_config` converted at the
  // config's own length. INVALID_ARGUMENT if its name is taken, or if its hub
  // id or an alias (compared case-insensitively) already names a model.
  absl::Status AddFullModel(v1::ModelSpec spec, FullModelSource source);

  // The catalog name that `id` names: a catalog name (any case); a full
  // model's Hugging Face Hub id ("meta-llama/Meta-Llama-3-8B"), any case,
  // with a trailing "/" or a leading "checkpoints/" (litgpt's checkpoint_dir)
  // stripped; or one of its aliases, any case. NOT_FOUND names the id, the
  // closest names and ids, and says that `--model FILE` takes the model's
  // config.json instead.
  absl::StatusOr<std::string> ResolveId(absl::string_view id) const;

  // Records that the cut-down template `template_name` was cut from the full
  // model `full_model`; INVALID_ARGUMENT unless the first is a cut-down
  // template and the second a full model, both in the catalog.
  absl::Status LinkFullModel(absl::string_view template_name,
                             absl::string_view full_model);

  // The source of full model `name`; nullptr for a template or an unknown
  // name.
  const FullModelSource* FullModelSourceOf(absl::string_view name) const;

  // The full model the cut-down template `name` was cut from ("" if none
  // ships).
  std::string FullModelOf(absl::string_view name) const;

  // What every answer about `name` says of where it came from ("" for a
  // whole-model template): a cut-down template that it is cut down and the
  // full model to ask for instead, when one ships; a full model its file and
  // Hub repository. `subject` says what the answer gives ("the answer is",
  // "these figures are").
  std::string OriginNotice(absl::string_view name,
                           absl::string_view subject) const;

  // Template and full model names in sorted order.
  std::vector<std::string> Names() const;

  // CutDownRemark of the template `name`, found once when it was added
  // ("" for a whole model or an unknown name): answers on the hot path
  // need not search its text again.
  std::string CutDownRemarkOf(absl::string_view name) const;

  // Entries: templates and full models.
  size_t size() const { return specs_.size(); }
  // Full models among them.
  size_t full_models() const { return full_models_.size(); }

 private:
  std::map<std::string, v1::ModelSpec> specs_;
  std::map<std::string, std::string> cut_down_;
  std::map<std::string, FullModelSource> full_models_;
  // Cut-down template name -> the full model it was cut from.
  std::map<std::string, std::string> full_model_of_;
  // A full model's hub id and aliases, lowercase -> its catalog name.
  std::map<std::string, std::string> ids_;
};

// What a cut-down template cut, as its source or notes say ("reduced to 1
// of its 12 encoder layers"), or "" for a template of the whole model.
std::string CutDownRemark(const v1::ModelSpec& spec);

}  // namespace headroom

#endif  // HEADROOM_CORE_CATALOG_MODEL_CATALOG_H_
