// SQLite's side of the SQL seam: statements on one sqlite3 handle, and
// opening the store's file. No SQL of the store's tables lives here.

#include <sqlite3.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/core/common/status_macros.h"
#include "server/store/sql_connection.h"
#include "server/store/sqlite_store.h"

namespace headroom {
namespace {

class SqliteConnection : public SqlConnection {
 public:
  static absl::StatusOr<std::unique_ptr<SqliteConnection>> Open(
      const std::string& path, bool read_only) {
    sqlite3* db = nullptr;
    const int flags = (read_only ? SQLITE_OPEN_READONLY
                                 : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                      SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path.c_str(), &db, flags, nullptr) != SQLITE_OK) {
      const std::string message = db ? sqlite3_errmsg(db) : "out of memory";
      sqlite3_close(db);
      return absl::UnavailableError(
          absl::StrCat("cannot open SQLite database ", path, ": ", message));
    }
    sqlite3_busy_timeout(db, 5000);
    auto connection =
        std::unique_ptr<SqliteConnection>(new SqliteConnection(db));
    if (!read_only && path != ":memory:") {
      RETURN_IF_ERROR(
          connection->Script("enabling WAL", "PRAGMA journal_mode=WAL"));
    }
    RETURN_IF_ERROR(
        connection->Script("enabling foreign keys", "PRAGMA foreign_keys=ON"));
    return connection;
  }

  ~SqliteConnection() override { sqlite3_close(db_); }

  absl::StatusOr<SqlRows> Query(const char* what, const std::string& sql,
                                const SqlParams& params) override {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), static_cast<int>(sql.size()),
                           &stmt, nullptr) != SQLITE_OK) {
      return Error(what);
    }
    std::unique_ptr<sqlite3_stmt, int (*)(sqlite3_stmt*)> owned(
        stmt, &sqlite3_finalize);
    int index = 1;
    for (const SqlValue& value : params.values()) {
      switch (value.kind) {
        case SqlValue::Kind::kNull:
          sqlite3_bind_null(stmt, index);
          break;
        case SqlValue::Kind::kInt:
          sqlite3_bind_int64(stmt, index, value.integer);
          break;
        case SqlValue::Kind::kText:
          sqlite3_bind_text(stmt, index, value.bytes.data(),
                            static_cast<int>(value.bytes.size()),
                            SQLITE_TRANSIENT);
          break;
        case SqlValue::Kind::kBytes:
          sqlite3_bind_blob(stmt, index, value.bytes.data(),
                            static_cast<int>(value.bytes.size()),
                            SQLITE_TRANSIENT);
          break;
      }
      ++index;
    }
    SqlRows rows;
    int rc;
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      std::vector<SqlValue>& row = rows.AddRow();
      const int columns = sqlite3_column_count(stmt);
      for (int c = 0; c < columns; ++c) {
        SqlValue& value = row.emplace_back();
        switch (sqlite3_column_type(stmt, c)) {
          case SQLITE_NULL:
            break;
          case SQLITE_INTEGER:
            value.kind = SqlValue::Kind::kInt;
            value.integer = sqlite3_column_int64(stmt, c);
            break;
          default: {
            value.kind = SqlValue::Kind::kBytes;
            const void* blob = sqlite3_column_blob(stmt, c);
            const int size = sqlite3_column_bytes(stmt, c);
            if (blob != nullptr) {
              value.bytes.assign(static_cast<const char*>(blob), size);
            }
          }
        }
      }
    }
    if (rc != SQLITE_DONE) return Error(what);
    rows.set_changed(sqlite3_changes(db_));
    CountAnswered();
    return rows;
  }

  absl::Status Script(const char* what, const std::string& sql) override {
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) !=
        SQLITE_OK) {
      return Error(what);
    }
    CountAnswered();
    return absl::OkStatus();
  }

  // A file does not go away under its handle as a server connection does.
  bool Lost() override { return false; }
  absl::Status Reconnect() override { return absl::OkStatus(); }

 private:
  explicit SqliteConnection(sqlite3* db) : db_(db) {}

  absl::Status Error(const char* what) {
    const int code = sqlite3_extended_errcode(db_);
    const std::string text =
        absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db_));
    switch (code & 0xff) {
      case SQLITE_BUSY:
      case SQLITE_LOCKED:
        return absl::AbortedError(text);
      case SQLITE_CANTOPEN:
      case SQLITE_IOERR:
      case SQLITE_FULL:
        return absl::UnavailableError(text);
      case SQLITE_CORRUPT:
      case SQLITE_NOTADB:
        return absl::DataLossError(text);
      case SQLITE_CONSTRAINT:
        if (code == SQLITE_CONSTRAINT_UNIQUE ||
            code == SQLITE_CONSTRAINT_PRIMARYKEY) {
          return absl::AlreadyExistsError(text);
        }
        return absl::InternalError(text);
      default:
        return absl::InternalError(text);
    }
  }

  sqlite3* const db_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path, int readers) {
  std::vector<std::unique_ptr<SqlConnection>> writer;
  ASSIGN_OR_RETURN(writer.emplace_back(),
                   SqliteConnection::Open(path, /*read_only=*/false));
  auto store = std::make_unique<SqliteStore>(
      SqliteDialect(),
      std::make_unique<ConnectionPool>(std::move(writer), absl::Seconds(30)),
      nullptr);
  RETURN_IF_ERROR(store->Migrate(path));
  // A private in-memory database is reachable through its one handle only.
  if (path != ":memory:" && readers > 0) {
    std::vector<std::unique_ptr<SqlConnection>> connections;
    for (int i = 0; i < readers; ++i) {
      ASSIGN_OR_RETURN(connections.emplace_back(),
                       SqliteConnection::Open(path, /*read_only=*/true));
    }
    store->SetReaders(std::make_unique<ConnectionPool>(std::move(connections),
                                                       absl::Seconds(30)));
  }
  return store;
}

}  // namespace headroom
