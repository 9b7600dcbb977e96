#ifndef HEADROOM_SERVER_CORE_CATALOG_MODEL_CATALOG_H_
#define HEADROOM_SERVER_CORE_CATALOG_MODEL_CATALOG_H_

// The model catalog: one validated spec per template (server/io/ reads
// them from models/).

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

class ModelCatalog {
 public:
  ModelCatalog() = default;

  // Adds a validated spec; INVALID_ARGUMENT if its name is taken.
  absl::Status Add(v1::ModelSpec spec);

  // The template's spec; NOT_FOUND lists the closest template names.
  absl::StatusOr<const v1::ModelSpec*> Find(absl::string_view name) const;

  // Template names in sorted order.
  std::vector<std::string> Names() const;

  // CutDownRemark of the template `name`, found once when it was added
  // ("" for a whole model or an unknown name): answers on the hot path
  // need not search its text again.
  std::string CutDownRemarkOf(absl::string_view name) const;

  size_t size() const { return specs_.size(); }

 private:
  std::map<std::string, v1::ModelSpec> specs_;
  std::map<std::string, std::string> cut_down_;
};

// What a cut-down template cut, as its source or notes say ("reduced to 1
// of its 12 encoder layers"), or "" for a template of the whole model.
std::string CutDownRemark(const v1::ModelSpec& spec);

}  // namespace headroom

#endif  // HEADROOM_SERVER_CORE_CATALOG_MODEL_CATALOG_H_
