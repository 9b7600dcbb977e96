#ifndef HEADROOM_SERVER_STORE_SQL_CONNECTION_H_
#define HEADROOM_SERVER_STORE_SQL_CONNECTION_H_

// The thin seam under SqlStore: one connection to one database, running
// one statement at a time with positional parameters. SQLite and
// PostgreSQL implement it (sqlite_connection.cc, postgres_connection.cc);
// all of the store's SQL lives in sql_*.cc. A connection is used by
// one thread at a time: the store's pool hands it out.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom {

// One value of a statement's parameters or result rows.
struct SqlValue {
  enum class Kind { kNull, kInt, kText, kBytes };
  Kind kind = Kind::kNull;
  int64_t integer = 0;
  std::string bytes;  // kText, kBytes
};

// The parameters of one statement, in placeholder order.
class SqlParams {
 public:
  SqlParams& Int(int64_t value);
  SqlParams& Text(std::string value);
  // A BLOB (SQLite) or bytea (PostgreSQL) value.
  SqlParams& Bytes(std::string value);
  SqlParams& Null();
  const std::vector<SqlValue>& values() const { return values_; }

 private:
  std::vector<SqlValue> values_;
};

// The rows one statement returned, read into memory.
class SqlRows {
 public:
  int size() const { return static_cast<int>(rows_.size()); }
  bool empty() const { return rows_.empty(); }
  // Rows an INSERT, UPDATE or DELETE changed.
  int64_t changed() const { return changed_; }
  bool IsNull(int row, int column) const;
  // An integer column (0 for NULL).
  int64_t Int(int row, int column) const;
  // A text or blob column ("" for NULL).
  const std::string& Bytes(int row, int column) const;

  // For connections filling the result.
  std::vector<SqlValue>& AddRow();
  void set_changed(int64_t changed) { changed_ = changed; }

 private:
  std::vector<std::vector<SqlValue>> rows_;
  int64_t changed_ = 0;
};

class SqlConnection {
 public:
  virtual ~SqlConnection() = default;

  // Runs one statement whose parameters are `?` in order. `what` names
  // the operation in errors. Errors: UNAVAILABLE when the connection is
  // lost, ABORTED for a conflict with another transaction (serialization
  // failure, deadlock, database busy), ALREADY_EXISTS for a unique
  // constraint, INTERNAL otherwise.
  virtual absl::StatusOr<SqlRows> Query(const char* what,
                                        const std::string& sql,
                                        const SqlParams& params) = 0;
  // Runs statements without parameters (a migration script).
  virtual absl::Status Script(const char* what, const std::string& sql) = 0;
  // Whether the connection is known to be lost.
  virtual bool Lost() = 0;
  // Connects again after Lost(); UNAVAILABLE when it cannot.
  virtual absl::Status Reconnect() = 0;
  // Statements answered since the last ResetAnswered(): 0 means a unit of
  // work that failed ran nothing on the server, and may run again.
  int answered() const { return answered_; }
  void ResetAnswered() { answered_ = 0; }

 protected:
  void CountAnswered() { ++answered_; }

 private:
  int answered_ = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_SQL_CONNECTION_H_
