#ifndef HEADROOM_SERVER_SERVICE_PAGING_H_
#define HEADROOM_SERVER_SERVICE_PAGING_H_

// How every List RPC pages: page_size and page_token in, next_page_token
// out, and pages bounded in bytes so that no response can reach the message
// limit, whatever is stored.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "server/store/page.h"

namespace headroom {

// Page sizes a request may ask for: 0 means kDefaultPageSize.
inline constexpr int kDefaultPageSize = 100;
inline constexpr int kMaxPageSize = 500;

// The store page a request asks for, in the listing named `listing` (a
// token from another listing is refused): at most page_size entries, at
// most `max_bytes` of them. INVALID_ARGUMENT names page_size (allowed
// 1..500, 0 = 100) or page_token.
absl::StatusOr<PageSpec> PageFromRequest(const std::string& listing,
                                         int32_t page_size,
                                         const std::string& page_token,
                                         size_t max_bytes);

// The response's next_page_token for the store's next_after ("" stays "").
std::string NextPageToken(const std::string& listing,
                          const std::string& next_after);

// The byte budget of one page for a server whose responses may be up to
// `max_message_bytes`: a quarter, so a page plus one oversized entry
// (bounded by BoundEntry to the same budget) stays under half the limit.
inline size_t PageBytes(size_t max_message_bytes) {
  return max_message_bytes / 4;
}

// Makes `entry` at most `max_bytes` when it is larger: strings longer than
// 1 KiB are cut to their first 1 KiB and a note of what was cut, then, if
// still too large, repeated fields are emptied. Returns whether anything
// was cut. A listing answers with what fits rather than failing.
bool BoundEntry(google::protobuf::Message* entry, size_t max_bytes);

// Cuts every string of `message` (and of the messages in it) longer than
// 1 KiB as BoundEntry does; returns whether any was cut.
bool CutLongStrings(google::protobuf::Message* message);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_PAGING_H_
