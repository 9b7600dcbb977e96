#ifndef HEADROOM_SERVER_SERVICE_SERVICE_OPTIONS_H_
#define HEADROOM_SERVER_SERVICE_SERVICE_OPTIONS_H_

// What every gRPC service of the planner answers by alike: how large a
// request may be, who may call what, and how many store jobs may wait.
// PlannerApp fills it once from the flags; PlannerState (the domain
// services) and FleetService hold the same values.

#include <cstddef>
#include <memory>

#include "server/service/access.h"

namespace headroom {

struct ServiceOptions {
  // Requests larger than this get INVALID_ARGUMENT (the transport allows
  // twice that, so the caller hears why, not a bare RESOURCE_EXHAUSTED).
  // Also the response limit: list pages and rankings of stored runs stay
  // well under it (PageBytes) (--max_message_bytes).
  size_t max_request_bytes = 4 << 20;
  // Who may call what; null allows everything.
  std::shared_ptr<const Access> access;
  // Store jobs that may wait on the store executor (--store_queue); more
  // are answered RESOURCE_EXHAUSTED.
  size_t store_queue = 256;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_SERVICE_OPTIONS_H_
