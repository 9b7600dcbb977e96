#include "server/service/paging.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"

namespace headroom {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

constexpr size_t kKeptStringBytes = 1024;

// Cuts every string and bytes field of `message` (and of the messages in
// it) longer than kKeptStringBytes; returns whether any was.
bool CutStrings(Message* message) {
  bool cut_any = false;
  const Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  const auto cut = [](const std::string& value) {
    return absl::StrCat(value.substr(0, kKeptStringBytes), "... (",
                        value.size() - kKeptStringBytes,
                        " bytes cut to fit the response)");
  };
  for (const FieldDescriptor* field : fields) {
    if (field->cpp_type() == FieldDescriptor::CPPTYPE_STRING) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          const std::string value =
              reflection->GetRepeatedString(*message, field, i);
          if (value.size() > kKeptStringBytes) {
            reflection->SetRepeatedString(message, field, i, cut(value));
            cut_any = true;
          }
        }
      } else {
        const std::string value = reflection->GetString(*message, field);
        if (value.size() > kKeptStringBytes) {
          reflection->SetString(message, field, cut(value));
          cut_any = true;
        }
      }
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field->is_repeated()) {
        for (int i = 0; i < reflection->FieldSize(*message, field); ++i) {
          cut_any |=
              CutStrings(reflection->MutableRepeatedMessage(message, field, i));
        }
      } else {
        cut_any |= CutStrings(reflection->MutableMessage(message, field));
      }
    }
  }
  return cut_any;
}

// Empties every repeated field of `message` and of the messages in it.
void ClearRepeated(Message* message) {
  const Reflection* reflection = message->GetReflection();
  std::vector<const FieldDescriptor*> fields;
  reflection->ListFields(*message, &fields);
  for (const FieldDescriptor* field : fields) {
    if (field->is_repeated()) {
      reflection->ClearField(message, field);
    } else if (field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      ClearRepeated(reflection->MutableMessage(message, field));
    }
  }
}

}  // namespace

absl::StatusOr<PageSpec> PageFromRequest(const std::string& listing,
                                         int32_t page_size,
                                         const std::string& page_token,
                                         size_t max_bytes) {
  if (page_size < 0 || page_size > kMaxPageSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("page_size = ", page_size, " is out of range; allowed 1..",
                     kMaxPageSize, " (0 = ", kDefaultPageSize, ")"));
  }
  PageSpec spec;
  spec.max_entries = page_size == 0 ? kDefaultPageSize : page_size;
  spec.max_bytes = max_bytes;
  if (page_token.empty()) return spec;
  std::string decoded;
  const std::string prefix = absl::StrCat(listing, ":");
  if (!absl::WebSafeBase64Unescape(page_token, &decoded) ||
      decoded.size() <= prefix.size() ||
      decoded.compare(0, prefix.size(), prefix) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "page_token is not one this listing (", listing,
        ") gave; pass a next_page_token from the previous page, or none for "
        "the first page"));
  }
  spec.after = decoded.substr(prefix.size());
  return spec;
}

std::string NextPageToken(const std::string& listing,
                          const std::string& next_after) {
  if (next_after.empty()) return "";
  return absl::WebSafeBase64Escape(absl::StrCat(listing, ":", next_after));
}

bool CutLongStrings(google::protobuf::Message* message) {
  return CutStrings(message);
}

bool BoundEntry(google::protobuf::Message* entry, size_t max_bytes) {
  if (entry->ByteSizeLong() <= max_bytes) return false;
  CutStrings(entry);
  if (entry->ByteSizeLong() > max_bytes) ClearRepeated(entry);
  return true;
}

}  // namespace headroom
