#ifndef HEADROOM_SERVER_STORE_PAGE_H_
#define HEADROOM_SERVER_STORE_PAGE_H_

// One page of a store listing: keyset paging (entries after a key, in the
// listing's order), bounded by count and by bytes, so no listing loads or
// answers everything that is stored.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom {

struct PageSpec {
  // The previous page's Page::next_after; empty for the first page.
  std::string after;
  // At most this many entries; at least 1.
  int max_entries = 100;
  // The page ends before an entry that would take the entries' serialized
  // bytes past this. The first entry always comes, so paging progresses
  // whatever is stored; callers bound single entries themselves.
  size_t max_bytes = std::numeric_limits<size_t>::max();
};

template <typename Entry>
struct Page {
  std::vector<Entry> entries;
  // Pass as PageSpec::after for the next page; empty on the last page.
  std::string next_after;
  // The key of the last entry (empty when none): where a later listing
  // picks up what was stored after this page, last page included.
  std::string last_key;
};

// The serialized bytes of one entry: a message's, or a string's own.
template <typename Message>
size_t EntryBytes(const Message& entry) {
  return entry.ByteSizeLong();
}
inline size_t EntryBytes(const std::string& entry) { return entry.size(); }

// Fills a page from rows in listing order: `rows` holds up to
// spec.max_entries + 1 (key, entry) pairs, the extra one saying that more
// follow. Stops early at the byte budget.
template <typename Entry>
Page<Entry> FillPage(std::vector<std::pair<std::string, Entry>> rows,
                     const PageSpec& spec) {
  Page<Entry> page;
  size_t bytes = 0;
  std::string last_key;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (page.entries.size() == static_cast<size_t>(spec.max_entries)) break;
    // The entry's bytes plus its tag and length in the response, and its
    // key's in the next page token (base64: 4/3).
    const size_t size =
        EntryBytes(rows[i].second) + 8 + rows[i].first.size() * 4 / 3 + 4;
    if (!page.entries.empty() && bytes + size > spec.max_bytes) break;
    bytes += size;
    last_key = std::move(rows[i].first);
    page.entries.push_back(std::move(rows[i].second));
  }
  page.last_key = last_key;
  if (page.entries.size() < rows.size()) page.next_after = std::move(last_key);
  return page;
}

// The integer a sequence-keyed listing's `after` holds; 0 when empty.
// INVALID_ARGUMENT when it is not a positive integer.
absl::StatusOr<int64_t> SeqAfter(const std::string& after);

// A (created_unix, id) key as one `after` string, and back.
std::string CreatedIdKey(int64_t created_unix, const std::string& id);
absl::Status ParseCreatedIdKey(const std::string& after, int64_t* created_unix,
                               std::string* id);

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_PAGE_H_
