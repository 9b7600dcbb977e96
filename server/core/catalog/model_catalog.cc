#include "server/core/catalog/model_catalog.h"

#include <algorithm>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "server/core/catalog/close_names.h"
#include "server/core/common/status_macros.h"
#include "server/core/memory/model_spec.h"

namespace headroom {

absl::Status ModelCatalog::Add(v1::ModelSpec spec) {
  RETURN_IF_ERROR(ValidateSpec(spec));
  const std::string name = spec.name();
  std::string cut = CutDownRemark(spec);
  if (!specs_.emplace(name, std::move(spec)).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("template '", name, "' is defined twice"));
  }
  if (!cut.empty()) cut_down_.emplace(name, std::move(cut));
  return absl::OkStatus();
}

std::string ModelCatalog::CutDownRemarkOf(absl::string_view name) const {
  auto it = cut_down_.find(std::string(name));
  return it == cut_down_.end() ? "" : it->second;
}

absl::StatusOr<const v1::ModelSpec*> ModelCatalog::Find(
    absl::string_view name) const {
  auto it = specs_.find(std::string(name));
  if (it != specs_.end()) return &it->second;
  return absl::NotFoundError(absl::StrCat(
      "template '", name.substr(0, 64), "' is not in the catalog; closest: ",
      absl::StrJoin(CloseNames(name, Names(), 3), ", ")));
}

std::vector<std::string> ModelCatalog::Names() const {
  std::vector<std::string> names;
  names.reserve(specs_.size());
  for (const auto& [name, spec] : specs_) names.push_back(name);
  return names;
}

namespace {

// The clause of `text` that starts with "reduced" or "scaled down", up to
// its end (".", ";", a parenthesis) and at most about 100 characters.
std::string CutClause(const std::string& text) {
  static const std::regex kCut("(reduced|scaled down)", std::regex::icase);
  std::smatch match;
  if (!std::regex_search(text, match, kCut)) return "";
  const size_t start = static_cast<size_t>(match.position(0));
  const size_t keyword_end = start + match.length(0);
  size_t end = start;
  while (end < text.size()) {
    const char c = text[end];
    if (c == ';' || c == '(' ||
        (c == '.' && end + 1 < text.size() && text[end + 1] == ' ')) {
      break;
    }
    if (c == ':' && end > keyword_end + 1) break;
    ++end;
  }
  std::string clause = text.substr(start, end - start);
  if (clause.size() > 100) {
    clause = clause.substr(0, clause.rfind(' ', 100)) + " ...";
  }
  clause = std::string(absl::StripAsciiWhitespace(clause));
  if (!clause.empty()) clause[0] = absl::ascii_tolower(clause[0]);
  return clause;
}

}  // namespace

std::string CutDownRemark(const v1::ModelSpec& spec) {
  std::string clause = CutClause(spec.source());
  if (clause.empty()) clause = CutClause(spec.notes());
  return clause;
}

}  // namespace headroom
