#include "core/jobs/job_reader.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/input_limits.h"

namespace headroom::jobs {

std::string ValueText(const Tree& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_null()) return "null";
  return Echo(value.dump());
}

JobReader::JobReader(std::string file_name, const Tree& tree,
                     v1::JobDerivation* derivation)
    : file_(std::move(file_name)), tree_(tree), derivation_(derivation) {}

const Tree* JobReader::Find(absl::string_view key) {
  read_.insert(std::string(key));
  const Tree* node = &tree_;
  for (absl::string_view part : absl::StrSplit(key, '.')) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(std::string(part));
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node->is_null() ? nullptr : node;
}

absl::Status JobReader::Bad(absl::string_view key,
                            absl::string_view problem) const {
  return absl::InvalidArgumentError(
      absl::StrCat(file_, ": ", key, " ", problem));
}

absl::StatusOr<std::optional<int64_t>> JobReader::Int(absl::string_view key,
                                                      int64_t min,
                                                      int64_t max) {
  const Tree* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number_integer()) {
    return Bad(key,
               absl::StrCat("= ", ValueText(*value),
                            " is not an integer; allowed ", min, "..", max));
  }
  const int64_t n = value->get<int64_t>();
  if (n < min || n > max) {
    return Bad(key, absl::StrCat("= ", n, " is out of range; allowed ", min,
                                 "..", max));
  }
  return n;
}

absl::StatusOr<std::optional<bool>> JobReader::Bool(absl::string_view key) {
  const Tree* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_boolean()) return value->get<bool>();
  if (value->is_string()) {
    const std::string text = value->get<std::string>();
    if (text == "true" || text == "True") return true;
    if (text == "false" || text == "False") return false;
  }
  return Bad(key, absl::StrCat("= ", ValueText(*value),
                               " is not a boolean; allowed true, false"));
}

absl::StatusOr<std::optional<std::string>> JobReader::String(
    absl::string_view key) {
  const Tree* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_string()) return value->get<std::string>();
  if (value->is_primitive()) return ValueText(*value);
  return Bad(key,
             absl::StrCat("= ", ValueText(*value), " is not a single value"));
}

absl::StatusOr<std::optional<double>> JobReader::Number(absl::string_view key) {
  const Tree* value = Find(key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number()) return value->get<double>();
  return Bad(key, absl::StrCat("= ", ValueText(*value), " is not a number"));
}

absl::StatusOr<std::optional<std::vector<std::string>>> JobReader::Strings(
    absl::string_view key) {
  const Tree* value = Find(key);
  if (value == nullptr) return std::nullopt;
  std::vector<std::string> out;
  if (value->is_string()) {
    for (absl::string_view part :
         absl::StrSplit(value->get<std::string>(), absl::ByAnyChar(", "),
                        absl::SkipEmpty())) {
      out.emplace_back(part);
    }
    return out;
  }
  if (value->is_array()) {
    for (const Tree& item : *value) {
      if (!item.is_string()) {
        return Bad(key, absl::StrCat("= ", ValueText(*value),
                                     " is not a list of names"));
      }
      out.push_back(item.get<std::string>());
    }
    return out;
  }
  return Bad(key,
             absl::StrCat("= ", ValueText(*value), " is not a list of names"));
}

void JobReader::FromFile(absl::string_view key, absl::string_view value,
                         absl::string_view field) {
  derivation_->add_from_file(
      absl::StrCat(file_, ": ", key, " = ", value, " -> ", field));
}

void JobReader::Default(absl::string_view field, absl::string_view value,
                        absl::string_view why) {
  derivation_->add_defaults(absl::StrCat(field, " = ", value, ": ", why));
}

bool JobReader::IsRead(const std::string& path) const {
  // Read itself, or under a key that was read whole.
  for (std::string prefix = path;;) {
    if (read_.count(prefix) > 0) return true;
    const size_t dot = prefix.rfind('.');
    if (dot == std::string::npos) return false;
    prefix.resize(dot);
  }
}

bool JobReader::AnyRead(const std::string& path) const {
  if (IsRead(path)) return true;
  auto it = read_.lower_bound(path + ".");
  return it != read_.end() && absl::StartsWith(*it, path + ".");
}

namespace {

bool IsMemoryKey(const std::string& path,
                 const std::vector<std::string>& memory_keys) {
  for (const std::string& key : memory_keys) {
    const char last = key.empty() ? '\0' : key.back();
    if (last == '.' || last == '_') {
      if (absl::StartsWith(path, key)) return true;
    } else if (last == '*') {
      if (absl::StartsWith(path, key.substr(0, key.size() - 1))) return true;
    } else if (path == key) {
      return true;
    }
  }
  return false;
}

}  // namespace

void JobReader::Unread(const Tree& node, const std::string& path,
                       const std::vector<std::string>& memory_keys,
                       std::vector<std::string>* memory,
                       std::vector<std::string>* ignored) const {
  if (node.is_object()) {
    const bool whole = !path.empty() && !AnyRead(path);
    size_t memory_before = memory->size();
    std::vector<std::string> inner;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const std::string child =
          path.empty() ? it.key() : absl::StrCat(path, ".", it.key());
      Unread(it.value(), child, memory_keys, memory, &inner);
    }
    if (whole && memory->size() == memory_before &&
        !IsMemoryKey(path, memory_keys)) {
      ignored->push_back(path);
    } else {
      ignored->insert(ignored->end(), inner.begin(), inner.end());
    }
    return;
  }
  if (IsRead(path)) return;
  if (!node.is_null() && IsMemoryKey(path, memory_keys)) {
    memory->push_back(path);
  } else {
    ignored->push_back(path);
  }
}

absl::Status JobReader::Finish(const std::vector<std::string>& memory_keys) {
  std::vector<std::string> memory;
  std::vector<std::string> ignored;
  Unread(tree_, "", memory_keys, &memory, &ignored);
  if (!memory.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file_, ": ", absl::StrJoin(memory, ", "),
        memory.size() == 1 ? " is a key that changes" : " are keys that change",
        " the memory figure and that headroom does not read; remove ",
        memory.size() == 1 ? "it" : "them",
        " or give the setup as flags (headroom fit --help)"));
  }
  for (const std::string& key : ignored) {
    derivation_->add_ignored(absl::StrCat(file_, ": ", key));
  }
  return absl::OkStatus();
}

}  // namespace headroom::jobs
