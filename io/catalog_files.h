#ifndef HEADROOM_IO_CATALOG_FILES_H_
#define HEADROOM_IO_CATALOG_FILES_H_

// The model catalog as it lives on disk: one spec file per template in
// models/, and the full models' published config.json files in models/hf/,
// listed in models/hf/index.json.

#include <string>

#include "absl/status/statusor.h"
#include "core/catalog/model_catalog.h"

namespace headroom {

// The subfolder of the catalog holding full models, and its index.
inline constexpr char kFullModelsDir[] = "hf";
inline constexpr char kFullModelsIndex[] = "index.json";

// Reads every *.json file in `directory` as a ModelSpec (the file stem must
// equal the spec's name), then the full models of `directory`/hf when it
// exists (LoadFullModels). Any invalid file fails the whole load, naming it.
absl::StatusOr<ModelCatalog> LoadModelCatalog(const std::string& directory);

// Adds the full models of `hf_directory` to `catalog`: its index.json is
// {"models": [{"name": N, "hub": "owner/repo", "cut_down_template": T,
// "aliases": [A, ...]}]} (T optional: the catalog template cut down from this
// model; the aliases optional: other names frameworks give it, see
// ModelCatalog::ResolveId; no other key), and each N
// names the config.json N.json beside it, converted by the Hugging Face
// front-end at the config's own length. Names are lowercase letters, digits,
// '.' and '-'. Every *.json there but the index must be listed, and every
// listed file must exist and convert, and no hub id or alias may name two
// models: INVALID_ARGUMENT naming the file and key otherwise.
absl::Status LoadFullModels(const std::string& hf_directory,
                            ModelCatalog* catalog);

}  // namespace headroom

#endif  // HEADROOM_IO_CATALOG_FILES_H_
