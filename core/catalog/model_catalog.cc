#include "core/catalog/model_catalog.h"

#include <algorithm>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "core/catalog/close_names.h"
#include "core/memory/model_spec.h"

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

absl::Status ModelCatalog::AddFullModel(v1::ModelSpec spec,
                                        FullModelSource source) {
  const std::string name = spec.name();
  RETURN_IF_ERROR(Add(std::move(spec)));
  full_models_.emplace(name, std::move(source));
  return absl::OkStatus();
}

absl::Status ModelCatalog::LinkFullModel(absl::string_view template_name,
                                         absl::string_view full_model) {
  if (cut_down_.count(std::string(template_name)) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", template_name.substr(0, 64),
                     "' is not a cut-down template of the catalog"));
  }
  if (full_models_.count(std::string(full_model)) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", full_model.substr(0, 64), "' is not a full model of the catalog"));
  }
  full_model_of_[std::string(template_name)] = std::string(full_model);
  return absl::OkStatus();
}

const FullModelSource* ModelCatalog::FullModelSourceOf(
    absl::string_view name) const {
  auto it = full_models_.find(std::string(name));
  return it == full_models_.end() ? nullptr : &it->second;
}

std::string ModelCatalog::FullModelOf(absl::string_view name) const {
  auto it = full_model_of_.find(std::string(name));
  return it == full_model_of_.end() ? "" : it->second;
}

std::string ModelCatalog::OriginNotice(absl::string_view name,
                                       absl::string_view subject) const {
  if (const FullModelSource* full = FullModelSourceOf(name); full != nullptr) {
    return absl::StrCat("the full model: ", name, " is models/", full->file,
                        ", the config.json of ", full->hub,
                        " as published, converted by the Hugging Face "
                        "front-end");
  }
  const std::string cut = CutDownRemarkOf(name);
  if (cut.empty()) return "";
  const std::string full = FullModelOf(name);
  return absl::StrCat(
      "a cut-down template: ", name, " is ", absl::StripSuffix(cut, "."), "; ",
      subject, " for this template, not the full model",
      full.empty() ? ""
                   : absl::StrCat(" (the full model: --model ", full, ")"));
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
