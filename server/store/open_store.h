#ifndef HEADROOM_SERVER_STORE_OPEN_STORE_H_
#define HEADROOM_SERVER_STORE_OPEN_STORE_H_

// Picks the store a location names, so the planner's --db takes either.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/store/store.h"

namespace headroom {

// Whether `location` names a PostgreSQL database: a postgres:// or
// postgresql:// URL, or a libpq key=value string starting with "host=" or
// "dbname=".
bool IsPostgresLocation(const std::string& location);

// Opens the store at `location`: PostgresStore::Open for a PostgreSQL
// location (see IsPostgresLocation), otherwise SqliteStore::Open on it as
// a file path (":memory:" for a private in-memory database), with `pool`
// connections (PostgreSQL's pool, SQLite's readers). `init_empty_file`:
// an existing 0-byte SQLite file becomes a new store (--db_init) rather
// than being refused. Errors are those stores' own.
absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& location,
                                                 int pool = 4,
                                                 bool init_empty_file = false);

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_OPEN_STORE_H_
