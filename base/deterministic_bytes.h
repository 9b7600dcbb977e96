#ifndef HEADROOM_BASE_DETERMINISTIC_BYTES_H_
#define HEADROOM_BASE_DETERMINISTIC_BYTES_H_

// A message's binary encoding with deterministic serialization (map entries
// in key order), so equal messages give equal bytes: what cache keys and
// model keys are made of.

#include <string>

#include "google/protobuf/message.h"

namespace headroom {

std::string DeterministicBytes(const google::protobuf::Message& message);

}  // namespace headroom

#endif  // HEADROOM_BASE_DETERMINISTIC_BYTES_H_
