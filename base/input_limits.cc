#include "base/input_limits.h"

#include "absl/strings/str_cat.h"

namespace headroom {

std::string Echo(absl::string_view value) {
  if (value.size() <= kMaxEchoChars) return std::string(value);
  size_t cut = kMaxEchoChars;
  // Back off continuation bytes (10xxxxxx) so no character is split.
  while (cut > 0 && (static_cast<unsigned char>(value[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return absl::StrCat(value.substr(0, cut), "\xE2\x80\xA6(", value.size(),
                      " bytes)");
}

absl::Status CheckLength(absl::string_view value, absl::string_view field,
                         size_t max_chars) {
  if (value.size() <= max_chars) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " is ", value.size(), " bytes; allowed up to ",
                   max_chars, " (", Echo(value), ")"));
}

}  // namespace headroom
