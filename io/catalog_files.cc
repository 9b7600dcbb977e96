#include "io/catalog_files.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/frontends/frontend_registry.h"
#include "core/memory/model_spec.h"
#include "io/files.h"
#include "nlohmann/json.hpp"

namespace headroom {
namespace {

namespace fs = std::filesystem;

// The *.json files directly in `directory`, sorted.
std::vector<fs::path> JsonFiles(const std::string& directory) {
  std::error_code error;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool IsCatalogName(const std::string& name) {
  if (name.empty() || name.size() > 64 || !absl::ascii_isalnum(name[0])) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(c) || absl::ascii_isdigit(c) || c == '.' ||
           c == '-';
  });
}

// One index entry's string field; "" when absent, an error when not a
// string.
absl::StatusOr<std::string> StringField(const nlohmann::json& entry,
                                        const char* key,
                                        const std::string& where) {
  auto it = entry.find(key);
  if (it == entry.end()) return std::string();
  if (!it->is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"", key, "\" must be a string"));
  }
  return it->get<std::string>();
}

// The index entry's optional "aliases": an array of distinct non-empty
// strings without spaces (ModelCatalog::AddFullModel refuses one that already
// names another model).
absl::StatusOr<std::vector<std::string>> Aliases(const nlohmann::json& entry,
                                                 const std::string& where) {
  std::vector<std::string> aliases;
  auto it = entry.find("aliases");
  if (it == entry.end()) return aliases;
  const std::string field = absl::StrCat(where, " \"aliases\"");
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be an array of strings"));
  }
  for (size_t i = 0; i < it->size(); ++i) {
    const nlohmann::json& alias = (*it)[i];
    if (!alias.is_string() || alias.get<std::string>().empty() ||
        alias.get<std::string>().size() > 128 ||
        alias.get<std::string>().find(' ') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, "[", i,
                       "]: must be a string of 1..128 characters, no spaces"));
    }
    aliases.push_back(alias.get<std::string>());
  }
  return aliases;
}

// INVALID_ARGUMENT naming the first key of `entry` that an index entry does
// not have.
absl::Status KnownKeys(const nlohmann::json& entry, const std::string& where) {
  static const auto* kKeys =
      new std::set<std::string>{"name", "hub", "cut_down_template", "aliases"};
  for (const auto& [key, value] : entry.items()) {
    if (kKeys->count(key) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": unknown key \"", key.substr(0, 64),
                       "\"; allowed: name, hub, cut_down_template, aliases"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelCatalog> LoadModelCatalog(const std::string& directory) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    return absl::NotFoundError(
        absl::StrCat("model catalog directory ", directory, " does not exist"));
  }
  ModelCatalog catalog;
  for (const fs::path& file : JsonFiles(directory)) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(file.string()));
    ASSIGN_OR_RETURN(v1::ModelSpec spec, ParseSpecJson(text, file.string()));
    if (spec.name() != file.stem().string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.string(), ": name '", spec.name(),
          "' must equal the file name '", file.stem().string(), "'"));
    }
    RETURN_IF_ERROR(catalog.Add(std::move(spec)));
  }
  const std::string hf = (fs::path(directory) / kFullModelsDir).string();
  if (fs::is_directory(hf, error)) {
    RETURN_IF_ERROR(LoadFullModels(hf, &catalog));
  }
  return catalog;
}

absl::Status LoadFullModels(const std::string& hf_directory,
                            ModelCatalog* catalog) {
  const std::string index_path =
      (fs::path(hf_directory) / kFullModelsIndex).string();
  ASSIGN_OR_RETURN(std::string index_text, ReadFile(index_path));
  const nlohmann::json index =
      nlohmann::json::parse(index_text, nullptr, /*allow_exceptions=*/false);
  if (!index.is_object() || !index.contains("models") ||
      !index["models"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        index_path, ": must be a JSON object {\"models\": [...]}"));
  }
  std::set<std::string> listed;
  std::vector<std::pair<std::string, std::string>> links;
  for (size_t i = 0; i < index["models"].size(); ++i) {
    const nlohmann::json& entry = index["models"][i];
    const std::string where = absl::StrCat(index_path, " models[", i, "]");
    if (!entry.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": must be an object"));
    }
    RETURN_IF_ERROR(KnownKeys(entry, where));
    ASSIGN_OR_RETURN(const std::string name, StringField(entry, "name", where));
    ASSIGN_OR_RETURN(const std::string hub, StringField(entry, "hub", where));
    ASSIGN_OR_RETURN(const std::string cut_down,
                     StringField(entry, "cut_down_template", where));
    ASSIGN_OR_RETURN(std::vector<std::string> aliases, Aliases(entry, where));
    if (!IsCatalogName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": name '", name.substr(0, 64),
          "' must be 1..64 lowercase letters, digits, '.' and '-'"));
    }
    if (hub.empty() || hub.find('/') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": hub must name the Hub repository, \"owner/name\""));
    }
    if (!listed.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": '", name, "' is listed twice"));
    }
    const std::string file = name + ".json";
    const std::string path = (fs::path(hf_directory) / file).string();
    ASSIGN_OR_RETURN(std::string text, ReadFile(path));
    ASSIGN_OR_RETURN(const ModelFrontend* frontend,
                     FrontendForFile(path, text));
    if (frontend->source() != v1::ModelRef::kHfConfig) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": a full model is a Hugging Face config.json; this is ",
          frontend->description()));
    }
    v1::ModelRef ref;
    RETURN_IF_ERROR(frontend->SetFromFile(path, text, &ref));
    absl::StatusOr<ResolvedModel> resolved =
        frontend->Resolve(ref, v1::TrainingSetup(), *catalog);
    if (!resolved.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", resolved.status().message()));
    }
    resolved->owned_spec.set_name(name);
    FullModelSource source;
    source.file = absl::StrCat(kFullModelsDir, "/", file);
    source.hub = hub;
    source.hf_config = std::move(text);
    source.assumed_defaults = std::move(resolved->assumptions);
    source.aliases = std::move(aliases);
    source.max_positions = resolved->max_positions;
    source.max_positions_key = resolved->max_positions_key;
    absl::Status added = catalog->AddFullModel(std::move(resolved->owned_spec),
                                               std::move(source));
    if (!added.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": ", added.message()));
    }
    if (!cut_down.empty()) links.emplace_back(cut_down, name);
  }
  for (const fs::path& file : JsonFiles(hf_directory)) {
    if (file.filename() == kFullModelsIndex) continue;
    if (listed.count(file.stem().string()) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(file.string(), " is not listed in ", index_path));
    }
  }
  for (const auto& [cut_down, full] : links) {
    absl::Status linked = catalog->LinkFullModel(cut_down, full);
    if (!linked.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": cut_down_template of ", full, ": ", linked.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace headroom
