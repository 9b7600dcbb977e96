#ifndef HEADROOM_CLIENT_CLI_JSON_H_
#define HEADROOM_CLIENT_CLI_JSON_H_

// The one JSON convention of every --json answer: the proto JSON mapping's
// lowerCamelCase names, every field printed, and 64-bit integers as numbers
// (the mapping prints them as strings), as the tables print them.

#include <string>

#include "google/protobuf/message.h"
#include "nlohmann/json.hpp"

namespace headroom::cli {

// `message` as a JSON value in the CLI's convention.
nlohmann::json CliJsonValue(const google::protobuf::Message& message);

// `message` as JSON text in the CLI's convention, indented by 2 when
// `pretty`, else on one line.
std::string CliJson(const google::protobuf::Message& message,
                    bool pretty = true);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_CLI_JSON_H_
