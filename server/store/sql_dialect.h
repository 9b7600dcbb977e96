#ifndef HEADROOM_SERVER_STORE_SQL_DIALECT_H_
#define HEADROOM_SERVER_STORE_SQL_DIALECT_H_

// What differs between SQLite and PostgreSQL in the store's SQL, and
// nothing else: SqlStore writes each statement once and splices these in.
// Placeholders are `?` everywhere (the PostgreSQL connection numbers them);
// upserts are ON CONFLICT in both.

#include <cstdint>
#include <string>

namespace headroom {

// The schema versions the two stores had reached before they became one
// SqlStore (a72e992: SQLite's JSON bodies at 9, PostgreSQL's binary ones
// at 4); SqlStore's own migrations count on from there.
inline constexpr int kLegacySqliteVersion = 9;
inline constexpr int kLegacyPostgresVersion = 4;

struct SqlDialect {
  // "sqlite" or "postgres", in error messages.
  const char* name;
  // Starts a write transaction: SQLite takes the database's write lock at
  // once (BEGIN IMMEDIATE), so two writers never deadlock upgrading.
  const char* begin_write;
  // Starts a read: one snapshot for every statement in it.
  const char* begin_read;
  // Appended to a SELECT that reads rows it then writes: locks them until
  // the commit (PostgreSQL); SQLite's write transaction holds the whole
  // database already.
  const char* for_update;
  // Appended to the claim's SELECT: another claimer's locked row is
  // skipped, not waited for.
  const char* skip_locked;
  // Column types.
  const char* blob_type;
  const char* bigint_type;
  // An integer primary key the database numbers.
  const char* serial_key;
  // A text column that sorts bytewise.
  const char* sorted_text;
  // A statement (one parameter: the table's name) serializing numbering
  // of that table until the transaction ends; "" where write transactions
  // are serial already.
  const char* numbering_lock;
  // Serializes migrations of replicas starting together; "" for SQLite.
  const char* migration_lock;
  // Creates the schema version's bookkeeping when it has its own table.
  const char* create_version_table;
  // Reads the schema version (one integer row).
  const char* read_version;
  // The statement recording that the schema reached `version`.
  std::string (*write_version)(int64_t version);
  // The last schema version of the backend's own store before SqlStore
  // (kLegacySqliteVersion, kLegacyPostgresVersion): what SqlStore
  // upgrades from.
  int legacy_version;
  // Bodies before SqlStore's first migration were JSON text (SQLite).
  bool legacy_json_bodies;
};

const SqlDialect& SqliteDialect();
const SqlDialect& PostgresDialect();

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_SQL_DIALECT_H_
