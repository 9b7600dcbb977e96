#include "core/catalog/close_names.h"

#include <algorithm>
#include <cctype>
#include <utility>

namespace headroom {
namespace {

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t substitute =
          previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitute});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

std::string NormalizeName(absl::string_view name) {
  std::string out;
  out.reserve(name.size());
  for (char c : name) {
    if (c == ' ' || c == '_' || c == '-') continue;
    out.push_back(
        static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

std::vector<std::string> CloseNames(absl::string_view query,
                                    const std::vector<std::string>& candidates,
                                    size_t limit) {
  const std::string q = NormalizeName(query.substr(0, 256));
  std::vector<std::pair<size_t, std::string>> scored;
  for (const std::string& candidate : candidates) {
    const std::string c = NormalizeName(candidate);
    size_t score = EditDistance(q, c);
    if (!q.empty() &&
        (c.find(q) != std::string::npos || q.find(c) != std::string::npos)) {
      score = 0;
    }
    scored.emplace_back(score, candidate);
  }
  std::stable_sort(
      scored.begin(), scored.end(),
      [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (const auto& [score, name] : scored) {
    if (out.size() >= limit) break;
    out.push_back(name);
  }
  return out;
}

}  // namespace headroom
