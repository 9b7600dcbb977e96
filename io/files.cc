#include "io/files.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/json_io.h"

namespace headroom {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

absl::StatusOr<std::vector<v1::MeasuredRun>> LoadRunsJsonl(
    const std::string& paths) {
  std::vector<v1::MeasuredRun> runs;
  for (absl::string_view path : absl::StrSplit(paths, ',', absl::SkipEmpty())) {
    absl::StatusOr<std::string> text = ReadFile(std::string(path));
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<v1::MeasuredRun>> parsed = ParseRunsJsonl(*text);
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          absl::StrCat(path, ": ", parsed.status().message()));
    }
    for (v1::MeasuredRun& run : *parsed) runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace headroom
