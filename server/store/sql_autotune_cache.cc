// The autotune cache over SQL, by key id with the key's bytes.

#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/deterministic_bytes.h"
#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::Parse;

absl::StatusOr<bool> SqlStore::PutAutotuneRecord(
    const std::string& id, const std::string& key_bytes,
    const v1::AutotuneRecord& record) {
  bool replaced = false;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows deleted,
                     tx.Query("storing autotune record",
                              "DELETE FROM autotune_cache WHERE id = ?",
                              SqlParams().Text(id)));
    replaced = deleted.changed() > 0;
    // ON CONFLICT: another planner may store the same id concurrently.
    return tx.Exec("storing autotune record",
                   "INSERT INTO autotune_cache (id, key_bytes, created_unix, "
                   "body) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                   "key_bytes = excluded.key_bytes, created_unix = "
                   "excluded.created_unix, body = excluded.body",
                   SqlParams()
                       .Text(id)
                       .Bytes(key_bytes)
                       .Int(std::time(nullptr))
                       .Bytes(DeterministicBytes(record)));
  }));
  return replaced;
}

absl::StatusOr<std::optional<v1::AutotuneRecord>> SqlStore::FindAutotuneRecord(
    const std::string& id, const std::string& key_bytes) {
  std::optional<v1::AutotuneRecord> found;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("reading autotune cache",
                 "SELECT key_bytes, body FROM autotune_cache WHERE id = ?",
                 SqlParams().Text(id)));
    // Same id but another key (a hash collision) is a miss.
    if (rows.empty() || rows.Bytes(0, 0) != key_bytes) {
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(
        found, Parse<v1::AutotuneRecord>(rows.Bytes(0, 1), "autotune record"));
    return absl::OkStatus();
  }));
  return found;
}

absl::StatusOr<Page<v1::AutotuneCacheEntry>> SqlStore::ListAutotuneRecords(
    const PageSpec& page) {
  int64_t created = 0;
  std::string id;
  if (!page.after.empty()) {
    RETURN_IF_ERROR(ParseCreatedIdKey(page.after, &created, &id));
  }
  std::vector<std::pair<std::string, v1::AutotuneCacheEntry>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing autotune cache",
                 "SELECT id, created_unix, body FROM autotune_cache WHERE "
                 "(? = 0 OR created_unix > ? OR (created_unix = ? AND id > ?)) "
                 "ORDER BY created_unix, id LIMIT ?",
                 SqlParams()
                     .Int(page.after.empty() ? 0 : 1)
                     .Int(created)
                     .Int(created)
                     .Text(id)
                     .Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      v1::AutotuneCacheEntry entry;
      entry.set_id(rows.Bytes(i, 0));
      entry.set_created_unix(rows.Int(i, 1));
      ASSIGN_OR_RETURN(
          *entry.mutable_record(),
          Parse<v1::AutotuneRecord>(rows.Bytes(i, 2), "autotune record"));
      std::string key = CreatedIdKey(entry.created_unix(), entry.id());
      entries.emplace_back(std::move(key), std::move(entry));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

absl::Status SqlStore::DropAutotuneRecord(const std::string& id,
                                          bool measured_too) {
  return Write([&](Tx& tx) -> absl::Status {
    const auto not_stored = [&] {
      return absl::NotFoundError(absl::StrCat(
          "autotune cache entry '", id.substr(0, 64),
          "' is not stored; headroom microbatch cache list shows the ids"));
    };
    if (!measured_too) {
      ASSIGN_OR_RETURN(SqlRows found,
                       tx.Query("reading autotune cache",
                                "SELECT body FROM autotune_cache WHERE id = ?",
                                SqlParams().Text(id)));
      if (found.empty()) return not_stored();
      ASSIGN_OR_RETURN(
          v1::AutotuneRecord record,
          Parse<v1::AutotuneRecord>(found.Bytes(0, 0), "autotune record"));
      if (!record.measured_by_probe().empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("autotune cache entry '", id.substr(0, 64),
                         "' was measured by probe ", record.measured_by_probe(),
                         " on a worker; only an admin may drop it"));
      }
    }
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("dropping autotune record",
                              "DELETE FROM autotune_cache WHERE id = ?",
                              SqlParams().Text(id)));
    if (rows.changed() == 0) return not_stored();
    return absl::OkStatus();
  });
}

}  // namespace headroom
