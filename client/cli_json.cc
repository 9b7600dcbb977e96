#include "client/cli_json.h"

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "base/json_io.h"
#include "google/protobuf/descriptor.h"

namespace headroom::cli {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

bool Is64BitInteger(const FieldDescriptor* field) {
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT64:
    case FieldDescriptor::CPPTYPE_UINT64:
      return true;
    default:
      return false;
  }
}

// "31120896" -> 31120896, as a signed or unsigned number.
void StringToNumber(nlohmann::json& value, bool is_signed) {
  if (!value.is_string()) return;
  const std::string text = value.get<std::string>();
  if (is_signed) {
    int64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) value = n;
  } else {
    uint64_t n = 0;
    if (absl::SimpleAtoi(text, &n)) value = n;
  }
}

void FixValue(const FieldDescriptor* field, const Message* sub,
              nlohmann::json& value);

// Walks `message` and its JSON together, turning 64-bit integers into
// numbers.
void Fix(const Message& message, nlohmann::json& json) {
  if (!json.is_object()) return;
  const Reflection* reflection = message.GetReflection();
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    auto it = json.find(field->json_name());
    if (it == json.end()) continue;
    if (field->is_map()) {
      const FieldDescriptor* value_field =
          field->message_type()->FindFieldByName("value");
      if (!it->is_object()) continue;
      if (value_field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        // Map entries come unordered from reflection: use a default
        // instance of the value's type for every entry.
        const Message* prototype =
            reflection->GetMessageFactory()->GetPrototype(
                value_field->message_type());
        for (auto& [key, entry] : it->items()) Fix(*prototype, entry);
      } else if (Is64BitInteger(value_field)) {
        for (auto& [key, entry] : it->items()) {
          StringToNumber(
              entry, value_field->cpp_type() == FieldDescriptor::CPPTYPE_INT64);
        }
      }
      continue;
    }
    if (field->is_repeated()) {
      if (!it->is_array()) continue;
      for (int j = 0; j < static_cast<int>(it->size()); ++j) {
        const Message* sub =
            field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE &&
                    j < reflection->FieldSize(message, field)
                ? &reflection->GetRepeatedMessage(message, field, j)
                : nullptr;
        FixValue(field, sub, (*it)[j]);
      }
      continue;
    }
    const Message* sub = field->cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE
                             ? &reflection->GetMessage(message, field)
                             : nullptr;
    FixValue(field, sub, *it);
  }
}

void FixValue(const FieldDescriptor* field, const Message* sub,
              nlohmann::json& value) {
  if (sub != nullptr) {
    // Well-known types (Timestamp, Duration, Struct) print as strings or
    // free JSON: leave them.
    if (sub->GetDescriptor()->file()->package() != "google.protobuf") {
      Fix(*sub, value);
    }
  } else if (Is64BitInteger(field)) {
    StringToNumber(value, field->cpp_type() == FieldDescriptor::CPPTYPE_INT64);
  }
}

}  // namespace

nlohmann::json CliJsonValue(const Message& message) {
  nlohmann::json json = nlohmann::json::parse(ToJson(message, false));
  Fix(message, json);
  return json;
}

std::string CliJson(const Message& message, bool pretty) {
  return CliJsonValue(message).dump(pretty ? 2 : -1);
}

}  // namespace headroom::cli
