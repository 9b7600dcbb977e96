#include "common/shipped_files.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace headroom {
namespace {

std::string ExecutableDir() {
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "" : exe.parent_path().string();
}

absl::StatusOr<std::string> FindOne(const std::string& path,
                                    const std::string& flag) {
  std::error_code ec;
  if (path.empty() || std::filesystem::exists(path, ec)) return path;
  if (std::filesystem::path(path).is_absolute()) {
    return absl::NotFoundError(
        absl::StrCat("--", flag, " = ", path, " does not exist"));
  }
  std::vector<std::string> looked = {
      (std::filesystem::current_path(ec) / path).string()};
  for (const std::string& root : ShippedRoots()) {
    const std::filesystem::path candidate = std::filesystem::path(root) / path;
    if (std::filesystem::exists(candidate, ec)) return candidate.string();
    looked.push_back(candidate.string());
  }
  return absl::NotFoundError(absl::StrCat(
      "--", flag, " = ", path, ": not found in ", absl::StrJoin(looked, ", "),
      "; pass --", flag, " with the file's path"));
}

}  // namespace

std::vector<std::string> ShippedRoots() {
  std::vector<std::string> roots;
  const std::string exe = ExecutableDir();
  if (!exe.empty()) {
    roots.push_back((std::filesystem::path(exe) / ".." / "share" / "headroom")
                        .lexically_normal()
                        .string());
  }
  roots.push_back(HEADROOM_SOURCE_DIR);
  return roots;
}

absl::StatusOr<std::string> FindShipped(const std::string& path,
                                        const std::string& flag) {
  std::vector<std::string> found;
  for (const std::string& part :
       std::vector<std::string>(absl::StrSplit(path, ','))) {
    absl::StatusOr<std::string> one = FindOne(part, flag);
    if (!one.ok()) return one.status();
    found.push_back(*std::move(one));
  }
  return absl::StrJoin(found, ",");
}

}  // namespace headroom
