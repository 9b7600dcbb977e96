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
  std::vector<std::string> ids = {absl::AsciiStrToLower(source.hub)};
  for (const std::string& alias : source.aliases) {
    ids.push_back(absl::AsciiStrToLower(alias));
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string shown = i == 0 ? source.hub : source.aliases[i - 1];
    std::string taken;
    if (auto it = ids_.find(ids[i]); it != ids_.end()) taken = it->second;
    for (size_t j = 0; j < i && taken.empty(); ++j) {
      if (ids[j] == ids[i]) taken = name;
    }
    for (const auto& [other, unused] : specs_) {
      if (taken.empty() && absl::AsciiStrToLower(other) == ids[i]) {
        taken = other;
      }
    }
    if (!taken.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(i == 0 ? "hub '" : "alias '", shown.substr(0, 64),
                       "' of ", name, " already names ", taken));
    }
  }
  if (auto it = ids_.find(absl::AsciiStrToLower(name)); it != ids_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("name '", name, "' is already an id of ", it->second));
  }
  RETURN_IF_ERROR(Add(std::move(spec)));
  for (std::string& id : ids) ids_.emplace(std::move(id), name);
  full_models_.emplace(name, std::move(source));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ModelCatalog::ResolveId(
    absl::string_view id) const {
  if (specs_.count(std::string(id)) > 0) return std::string(id);
  absl::string_view bare = absl::StripAsciiWhitespace(id);
  while (absl::ConsumeSuffix(&bare, "/")) {
  }
  absl::ConsumePrefix(&bare, "./");
  absl::ConsumePrefix(&bare, "checkpoints/");
  const std::string lower = absl::AsciiStrToLower(bare);
  if (auto it = ids_.find(lower); it != ids_.end()) return it->second;
  for (const auto& [name, spec] : specs_) {
    if (absl::AsciiStrToLower(name) == lower) return name;
  }
  std::vector<std::string> known = Names();
  for (const auto& [name, source] : full_models_) {
    known.push_back(source.hub);
    known.insert(known.end(), source.aliases.begin(), source.aliases.end());
  }
  return absl::NotFoundError(absl::StrCat(
      "model id '", id.substr(0, 128),
      "' is neither a catalog name, nor the Hugging Face hub id or an alias "
      "of a full model in the catalog; closest: ",
      absl::StrJoin(CloseNames(bare, known, 3), ", "),
      "; for a model the catalog lacks, give its config.json with --model "
      "FILE"));
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
