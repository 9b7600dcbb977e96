#include "core/jobs/job_tree.h"

#include <cstdint>
#include <exception>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "yaml-cpp/yaml.h"

namespace headroom::jobs {
namespace {

// Counts nodes as the tree is built and refuses past the limits.
struct Budget {
  const std::string& file;
  size_t nodes = 0;
  bool too_deep = false;
  bool too_many = false;
};

bool IsOneOf(absl::string_view text, std::initializer_list<const char*> list) {
  for (const char* word : list) {
    if (text == word) return true;
  }
  return false;
}

// A plain (unquoted) YAML scalar typed as PyYAML's safe loader types it.
Tree ScalarOf(const YAML::Node& node) {
  const std::string& text = node.Scalar();
  if (node.Tag() == "!") return text;  // quoted: always a string
  if (IsOneOf(text, {"", "~", "null", "Null", "NULL"})) return nullptr;
  if (IsOneOf(text, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On",
                     "ON"})) {
    return true;
  }
  if (IsOneOf(text, {"false", "False", "FALSE", "no", "No", "NO", "off", "Off",
                     "OFF"})) {
    return false;
  }
  int64_t integer = 0;
  if (absl::SimpleAtoi(text, &integer)) return integer;
  double real = 0;
  const bool looks_real =
      text.find_first_of(".eE") != std::string::npos &&
      text.find_first_not_of("0123456789+-.eE") == std::string::npos;
  if (looks_real && absl::SimpleAtod(text, &real)) return real;
  return text;
}

Tree FromYaml(const YAML::Node& node, int depth, Budget* budget) {
  if (++budget->nodes > kMaxJobNodes) budget->too_many = true;
  if (depth > kMaxJobDepth) budget->too_deep = true;
  if (budget->too_many || budget->too_deep) return nullptr;
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Tree map = Tree::object();
      for (const auto& entry : node) {
        const std::string key = entry.first.IsScalar()
                                    ? entry.first.Scalar()
                                    : std::string("<non-scalar key>");
        map[key] = FromYaml(entry.second, depth + 1, budget);
      }
      return map;
    }
    case YAML::NodeType::Sequence: {
      Tree list = Tree::array();
      for (const auto& item : node) {
        list.push_back(FromYaml(item, depth + 1, budget));
      }
      return list;
    }
    case YAML::NodeType::Scalar:
      return ScalarOf(node);
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      break;
  }
  return nullptr;
}

absl::StatusOr<Tree> ParseYaml(const v1::JobFile& file) {
  YAML::Node root;
  try {
    root = YAML::Load(file.content());
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " is not valid YAML (line ", e.mark.line + 1,
                     "): ", e.msg));
  }
  Budget budget{file.name()};
  Tree tree;
  try {
    tree = FromYaml(root, 0, &budget);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " could not be read as YAML: ", e.msg));
  }
  if (budget.too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " nests deeper than ", kMaxJobDepth,
                     " levels; a job config is a few levels deep"));
  }
  if (budget.too_many) {
    return absl::InvalidArgumentError(absl::StrCat(
        file.name(), " has more than ", kMaxJobNodes,
        " nodes (YAML aliases counted expanded); a job config has hundreds"));
  }
  return tree;
}

absl::StatusOr<Tree> ParseJson(const v1::JobFile& file) {
  bool too_deep = false;
  size_t nodes = 0;
  Tree::parser_callback_t guard =
      [&too_deep, &nodes](int depth, Tree::parse_event_t event, Tree&) {
        if (depth > kMaxJobDepth) too_deep = true;
        if (event == Tree::parse_event_t::value) ++nodes;
        return !too_deep && nodes <= kMaxJobNodes;
      };
  Tree tree;
  try {
    tree = Tree::parse(file.content().begin(), file.content().end(), guard);
  } catch (const Tree::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " is not valid JSON: ", e.what()));
  }
  if (too_deep) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " nests deeper than ", kMaxJobDepth,
                     " levels; a job config is a few levels deep"));
  }
  if (nodes > kMaxJobNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " has more than ", kMaxJobNodes,
                     " nodes; a job config has hundreds"));
  }
  return tree;
}

}  // namespace

absl::StatusOr<Tree> ParseJobTree(const v1::JobFile& file) {
  if (file.content().size() > kMaxJobFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(), " is ", file.content().size(),
                     " bytes; allowed up to ", kMaxJobFileBytes, " (1 MiB)"));
  }
  const absl::string_view text =
      absl::StripLeadingAsciiWhitespace(absl::string_view(file.content()));
  absl::StatusOr<Tree> tree =
      !text.empty() && text.front() == '{' ? ParseJson(file) : ParseYaml(file);
  if (!tree.ok()) return tree;
  if (!tree->is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file.name(),
                     " is not a map of keys to values at its top level; "
                     "expected a job config (YAML or JSON)"));
  }
  return tree;
}

}  // namespace headroom::jobs
