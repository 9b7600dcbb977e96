#ifndef HEADROOM_SERVER_STORE_SQL_TX_H_
#define HEADROOM_SERVER_STORE_SQL_TX_H_

// Inside the SQL store, shared by its files (one per interface of store.h,
// sql_schema.cc for the schema): the unit of work a store method runs its
// statements in, and the row helpers more than one interface uses. Not for
// use outside server/store/sql_*.cc.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "headroom/v1/fleet.pb.h"
#include "server/store/page.h"
#include "server/store/sql_connection.h"
#include "server/store/sql_store.h"

namespace headroom {

// The statements of one unit of work, on the connection leased for it.
class SqlStore::Tx {
 public:
  Tx(SqlConnection& connection, const SqlDialect& dialect)
      : connection_(connection), dialect_(dialect) {}
  Tx(const Tx&) = delete;
  Tx& operator=(const Tx&) = delete;

  absl::StatusOr<SqlRows> Query(const char* what, const std::string& sql,
                                const SqlParams& params = SqlParams()) {
    return connection_.Query(what, sql, params);
  }
  absl::Status Exec(const char* what, const std::string& sql,
                    const SqlParams& params = SqlParams()) {
    return connection_.Query(what, sql, params).status();
  }
  absl::Status Script(const char* what, const std::string& sql) {
    return connection_.Script(what, sql);
  }
  const SqlDialect& dialect() const { return dialect_; }

 private:
  SqlConnection& connection_;
  const SqlDialect& dialect_;
};
namespace sql {

using Tx = SqlStore::Tx;

// Bodies are DeterministicBytes: identical messages give identical bytes,
// so a hash of the body (SHA-256) tells identical runs apart from new ones.
std::string BodyHash(const std::string& body);

// A stored body; DATA_LOSS when it does not parse.
template <typename Message>
absl::StatusOr<Message> Parse(const std::string& bytes, const char* what) {
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(
        "stored ", what, " does not parse (", bytes.size(), " bytes)"));
  }
  return message;
}

// "?, ?, ?" for `n` values; "NULL" (matching nothing) for none.
std::string Placeholders(size_t n);

// NOT_FOUND: "<what> '<name>' is not stored" (the name cut at 64 bytes).
absl::Status NotStored(const char* what, const std::string& name);

// The probe row's body: the probe without its results (they have rows of
// their own).
std::string ProbeBody(const v1::Probe& probe);

// The next seq of `table` ("p-N", "fs-N" numbering), serialized with other
// numberers of it until the transaction ends.
absl::StatusOr<int64_t> NextSeq(Tx& tx, const char* table);

// Inserts (seq, version, created_unix, body) into a versioned table; `body`
// gets the version and returns the row's body. Returns the version.
absl::StatusOr<std::string> InsertVersioned(
    Tx& tx, const char* table, const char* prefix, int64_t created_unix,
    const std::function<std::string(const std::string&)>& body);

// Makes `version` current in `current_table` and appends it to
// `history_table`; with `check`, NOT_FOUND (naming `what`) when
// `versions_table` does not hold it.
absl::Status MakeCurrent(Tx& tx, const char* what, const char* versions_table,
                         const char* current_table, const char* history_table,
                         const std::string& version, bool check);

// One page of the versions a history table holds, oldest first, keyed by
// the history row's seq.
absl::StatusOr<Page<std::string>> History(Tx& tx, const char* table,
                                          const PageSpec& page);

// How many rows `table` holds.
absl::StatusOr<int64_t> Count(Tx& tx, const char* table);

// Stores `run` unless an identical one is; returns the seq of the one
// stored.
absl::StatusOr<int64_t> InsertRun(Tx& tx, const v1::MeasuredRun& run);

}  // namespace sql
}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_SQL_TX_H_
