#include "base/json_io.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace headroom {

absl::Status ParseJson(absl::string_view json, absl::string_view what,
                       bool ignore_unknown,
                       google::protobuf::Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = ignore_unknown;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), message,
      options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": malformed JSON for ", message->GetDescriptor()->full_name(),
        ": ", std::string(status.message())));
  }
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = pretty;
  options.always_print_primitive_fields = true;
  std::string out;
  // Serializing a valid in-memory message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

absl::StatusOr<std::vector<v1::MeasuredRun>> ParseRunsJsonl(
    absl::string_view text) {
  std::vector<v1::MeasuredRun> runs;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    v1::MeasuredRun run;
    const absl::Status status =
        ParseJson(line, absl::StrCat("runs line ", line_number),
                  /*ignore_unknown=*/true, &run);
    if (!status.ok()) return status;
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace headroom
