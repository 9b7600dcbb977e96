#include "server/store/sql_dialect.h"

#include "absl/strings/str_cat.h"

namespace headroom {

const SqlDialect& SqliteDialect() {
  static const SqlDialect dialect = {
      "sqlite",
      "BEGIN IMMEDIATE",
      "BEGIN",
      "",
      "",
      "BLOB",
      "INTEGER",
      "INTEGER PRIMARY KEY AUTOINCREMENT",
      "TEXT",
      "",
      "",
      "",
      "PRAGMA user_version",
      [](int64_t version) {
        return absl::StrCat("PRAGMA user_version = ", version);
      },
      kLegacySqliteVersion,
      /*legacy_json_bodies=*/true,
  };
  return dialect;
}

// pg_advisory_xact_lock keys: one (64-bit) for migrations, and a class (the
// first of two 32-bit keys, a separate key space) for numbering a table.
const SqlDialect& PostgresDialect() {
  static const SqlDialect dialect = {
      "postgres",
      "BEGIN",
      "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
      " FOR UPDATE",
      " FOR UPDATE SKIP LOCKED",
      "bytea",
      "bigint",
      "bigserial PRIMARY KEY",
      "text COLLATE \"C\"",
      // "Head"
      "SELECT pg_advisory_xact_lock(1214603620, hashtext(?))",
      // "Headr" "m1"
      "SELECT pg_advisory_xact_lock(20377667294620977)",
      "CREATE TABLE IF NOT EXISTS schema_version ("
      "version integer PRIMARY KEY, applied_unix bigint NOT NULL)",
      "SELECT CAST(COALESCE(MAX(version), 0) AS bigint) FROM schema_version",
      [](int64_t version) {
        return absl::StrCat(
            "INSERT INTO schema_version (version, applied_unix) VALUES (",
            version, ", CAST(extract(epoch FROM now()) AS bigint))");
      },
      kLegacyPostgresVersion,
      /*legacy_json_bodies=*/false,
  };
  return dialect;
}

}  // namespace headroom
