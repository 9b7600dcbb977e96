#ifndef HEADROOM_BASE_JSON_IO_H_
#define HEADROOM_BASE_JSON_IO_H_

// The project's one JSON loader: Protobuf's JSON mapping, so a file and a
// wire message share one schema. Text in, messages out: reading the files
// is io/'s.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// Parses `json` into `message`. Unknown fields are ignored only when
// `ignore_unknown` is true. Errors are INVALID_ARGUMENT naming `what`.
absl::Status ParseJson(absl::string_view json, absl::string_view what,
                       bool ignore_unknown, google::protobuf::Message* message);

// Serializes `message` as JSON with field names in lowerCamelCase and every
// primitive field printed, zeros included.
std::string ToJson(const google::protobuf::Message& message, bool pretty);

// Parses a JSON-lines file of measured runs (memory-runs.jsonl format).
// Blank lines are skipped; an error names the line number.
absl::StatusOr<std::vector<v1::MeasuredRun>> ParseRunsJsonl(
    absl::string_view text);

}  // namespace headroom

#endif  // HEADROOM_BASE_JSON_IO_H_
