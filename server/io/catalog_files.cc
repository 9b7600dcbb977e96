#include "server/io/catalog_files.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/common/status_macros.h"
#include "server/core/memory/model_spec.h"
#include "server/io/files.h"

namespace headroom {

absl::StatusOr<ModelCatalog> LoadModelCatalog(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    return absl::NotFoundError(
        absl::StrCat("model catalog directory ", directory, " does not exist"));
  }
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(directory, error)) {
    if (entry.is_regular_file() && entry.path().extension() == ".json") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  ModelCatalog catalog;
  for (const fs::path& file : files) {
    ASSIGN_OR_RETURN(std::string text, ReadFile(file.string()));
    ASSIGN_OR_RETURN(v1::ModelSpec spec, ParseSpecJson(text, file.string()));
    if (spec.name() != file.stem().string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          file.string(), ": name '", spec.name(),
          "' must equal the file name '", file.stem().string(), "'"));
    }
    RETURN_IF_ERROR(catalog.Add(std::move(spec)));
  }
  return catalog;
}

}  // namespace headroom
