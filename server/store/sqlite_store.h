#ifndef HEADROOM_SERVER_STORE_SQLITE_STORE_H_
#define HEADROOM_SERVER_STORE_SQLITE_STORE_H_

// The embedded store: SqlStore on one SQLite file in WAL mode. Writes go
// through one connection (SQLite has one writer at a time anyway); reads
// through read-only connections of their own, so a long write never
// holds up a read.

#include <memory>
#include <string>

#include "server/store/sql_store.h"

namespace headroom {

// Schema version this build writes and understands.
inline constexpr int kSqliteSchemaVersion =
    kLegacySqliteVersion + kSqlStoreMigrations;

class SqliteStore : public SqlStore {
 public:
  // Opens (creating if needed) the database at `path` (":memory:" for a
  // private in-memory one, read and written through one connection) and
  // migrates it; `readers` read-only connections serve reads. UNAVAILABLE
  // when the file cannot be opened; FAILED_PRECONDITION when its schema
  // is newer than this build knows, or when `path` is an existing 0-byte
  // file and not `init_empty_file` (a path with no file is created either
  // way); DATA_LOSS, with SQLite's first message, when PRAGMA quick_check
  // finds the file damaged. A write-ahead log with frames at open (the
  // last writer did not close the store) is logged as
  // event=store_wal_recovered with its size.
  static absl::StatusOr<std::unique_ptr<SqliteStore>> Open(
      const std::string& path, int readers = 4, bool init_empty_file = false);

  using SqlStore::SqlStore;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_SQLITE_STORE_H_
