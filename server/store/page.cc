#include "server/store/page.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace headroom {

absl::StatusOr<int64_t> SeqAfter(const std::string& after) {
  if (after.empty()) return 0;
  int64_t seq = 0;
  if (!absl::SimpleAtoi(after, &seq) || seq <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page key '", after.substr(0, 32), "' is not a sequence number"));
  }
  return seq;
}

std::string CreatedIdKey(int64_t created_unix, const std::string& id) {
  return absl::StrCat(created_unix, ":", id);
}

absl::Status ParseCreatedIdKey(const std::string& after, int64_t* created_unix,
                               std::string* id) {
  const size_t colon = after.find(':');
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(after.substr(0, colon), created_unix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page key '", after.substr(0, 32), "' is not created_unix:id"));
  }
  *id = after.substr(colon + 1);
  return absl::OkStatus();
}

}  // namespace headroom
