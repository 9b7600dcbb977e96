#ifndef HEADROOM_CORE_CATALOG_CLOSE_NAMES_H_
#define HEADROOM_CORE_CATALOG_CLOSE_NAMES_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace headroom {

// Lowercase with spaces, underscores and dashes removed: "RTX 5090" and
// "rtx-5090" normalize alike.
std::string NormalizeName(absl::string_view name);

// Up to `limit` of `candidates` closest to `query` by edit distance on
// normalized names (and substring matches first), for NOT_FOUND messages.
std::vector<std::string> CloseNames(absl::string_view query,
                                    const std::vector<std::string>& candidates,
                                    size_t limit);

}  // namespace headroom

#endif  // HEADROOM_CORE_CATALOG_CLOSE_NAMES_H_
