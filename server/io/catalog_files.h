#ifndef HEADROOM_SERVER_IO_CATALOG_FILES_H_
#define HEADROOM_SERVER_IO_CATALOG_FILES_H_

// The model catalog as it lives on disk: one spec file per template in
// models/.

#include <string>

#include "absl/status/statusor.h"
#include "server/core/catalog/model_catalog.h"

namespace headroom {

// Reads every *.json file in `directory` as a ModelSpec; the file stem must
// equal the spec's name. Any invalid file fails the whole load, naming it.
absl::StatusOr<ModelCatalog> LoadModelCatalog(const std::string& directory);

}  // namespace headroom

#endif  // HEADROOM_SERVER_IO_CATALOG_FILES_H_
