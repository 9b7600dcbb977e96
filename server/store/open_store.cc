#include "server/store/open_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "server/store/postgres_store.h"
#include "server/store/sqlite_store.h"

namespace headroom {

bool IsPostgresLocation(const std::string& location) {
  for (const char* prefix :
       {"postgres://", "postgresql://", "host=", "dbname="}) {
    if (absl::StartsWith(location, prefix)) return true;
  }
  return false;
}

absl::StatusOr<std::unique_ptr<Store>> OpenStore(const std::string& location,
                                                 int pool,
                                                 bool init_empty_file) {
  if (pool < 1 || pool > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--db_pool must be 1..64 store connections; got ", pool));
  }
  std::unique_ptr<Store> store;
  if (IsPostgresLocation(location)) {
    ASSIGN_OR_RETURN(store, PostgresStore::Open(location, pool));
  } else {
    ASSIGN_OR_RETURN(store, SqliteStore::Open(location, pool, init_empty_file));
  }
  return store;
}

}  // namespace headroom
