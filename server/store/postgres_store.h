#ifndef HEADROOM_SERVER_STORE_POSTGRES_STORE_H_
#define HEADROOM_SERVER_STORE_POSTGRES_STORE_H_

// The shared store: SqlStore on one PostgreSQL database that several
// planner replicas use at once, through a pool of connections. Same
// semantics and version names as SqliteStore; schema migrations versioned
// in a schema_version table and applied at open under an advisory lock, so
// replicas starting together migrate once.

#include <memory>
#include <string>

#include "server/store/sql_store.h"

namespace headroom {

// Schema version this build writes and understands (its own numbering,
// not SQLite's: version 1 held everything SQLite's version 6 did).
inline constexpr int kPostgresSchemaVersion =
    kLegacyPostgresVersion + kSqlStoreMigrations;

class PostgresStore : public SqlStore {
 public:
  // Connects `pool` times to the database at `url` (a postgresql:// URL or
  // a libpq key=value string) and migrates it. Each store call takes one
  // connection, waiting a bounded time when all are busy; a transaction
  // stays on its connection. UNAVAILABLE (naming host, port and database,
  // never the password) when the server cannot be reached;
  // FAILED_PRECONDITION, changing nothing, when the database's schema is
  // newer than this build knows.
  static absl::StatusOr<std::unique_ptr<PostgresStore>> Open(
      const std::string& url, int pool = 4);

  using SqlStore::SqlStore;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_POSTGRES_STORE_H_
