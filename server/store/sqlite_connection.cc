// SQLite's side of the SQL seam: statements on one sqlite3 handle, and
// opening the store's file. No SQL of the store's tables lives here.

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "server/store/sql_connection.h"
#include "server/store/sqlite_store.h"
#include "spdlog/spdlog.h"

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

// SQLite's own word that an open replayed a write-ahead log: its log
// callback gets SQLITE_NOTICE_RECOVER_WAL on the thread that recovered it.
// A log another process has open is read, not recovered, and says nothing.
thread_local bool recovered_wal = false;

void OnSqliteLog(void*, int code, const char*) {
  if (code == SQLITE_NOTICE_RECOVER_WAL) recovered_wal = true;
}

// Whether OnSqliteLog is SQLite's log callback: it can only be set before
// SQLite initializes, so false when something in this process used SQLite
// first (then a log with frames at open is taken as recovered).
bool ListeningForRecovery() {
  static const bool listening =
      sqlite3_config(SQLITE_CONFIG_LOG, &OnSqliteLog, nullptr) == SQLITE_OK;
  return listening;
}

// SQLite's write-ahead log header is 32 bytes, each frame a 24-byte header
// and one page (https://www.sqlite.org/fileformat2.html#walformat).
constexpr uintmax_t kWalHeaderBytes = 32;
constexpr uintmax_t kWalFrameHeaderBytes = 24;

// The frames in the write-ahead log beside `path` (0 when it has none): the
// writer's last connection to close checkpoints and deletes it, so frames
// at open mean the last writer stopped without closing the store, and
// opening replays them.
uintmax_t WalFrames(const std::string& path, uintmax_t* wal_bytes) {
  std::error_code error;
  *wal_bytes = std::filesystem::file_size(path + "-wal", error);
  if (error || *wal_bytes <= kWalHeaderBytes) return 0;
  std::ifstream wal(path + "-wal", std::ios::binary);
  unsigned char header[kWalHeaderBytes] = {};
  if (!wal.read(reinterpret_cast<char*>(header), sizeof(header))) return 0;
  // Bytes 8..11: the page size, big-endian.
  const uintmax_t page_bytes =
      (uintmax_t{header[8]} << 24) | (uintmax_t{header[9]} << 16) |
      (uintmax_t{header[10]} << 8) | uintmax_t{header[11]};
  if (page_bytes == 0) return 0;
  return (*wal_bytes - kWalHeaderBytes) / (kWalFrameHeaderBytes + page_bytes);
}

// Refuses an existing 0-byte file at `path` unless `init_empty_file`: SQLite
// would silently make it a new, empty store.
absl::Status CheckNotEmptyFile(const std::string& path, bool init_empty_file) {
  std::error_code error;
  const uintmax_t bytes = std::filesystem::file_size(path, error);
  if (error || bytes != 0 || init_empty_file) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "--db ", path,
      " is an empty file (0 bytes), not a store: a truncated store or a "
      "wrong path would be served as a new, empty one. Point --db at the "
      "store's file, or pass --db_init to make a new store in this file"));
}

// SQLite's own check of every page's structure (PRAGMA quick_check: the
// b-trees and their pages, without comparing indexes to their tables), so a
// damaged file is refused at start rather than served until a write fails.
absl::Status CheckIntegrity(SqlConnection& connection,
                            const std::string& path) {
  absl::StatusOr<SqlRows> rows =
      connection.Query("checking integrity", "PRAGMA quick_check(1)", {});
  std::string first;
  if (!rows.ok()) {
    first = std::string(rows.status().message());
  } else if (rows->empty()) {
    first = "no answer";
  } else if (rows->Bytes(0, 0) != "ok") {
    first = rows->Bytes(0, 0);
  } else {
    return absl::OkStatus();
  }
  return absl::DataLossError(absl::StrCat(
      "--db ", path, " is corrupt; SQLite's PRAGMA quick_check says: ", first,
      ". Restore the store from a backup (its file and any -wal beside it), "
      "or try sqlite3's .recover into a new file"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path, int readers, bool init_empty_file) {
  const bool file = path != ":memory:" && !path.empty();
  uintmax_t wal_bytes = 0;
  uintmax_t wal_frames = 0;
  const bool listening = ListeningForRecovery();
  if (file) {
    RETURN_IF_ERROR(CheckNotEmptyFile(path, init_empty_file));
    wal_frames = WalFrames(path, &wal_bytes);
  }
  recovered_wal = false;
  std::vector<std::unique_ptr<SqlConnection>> writer;
  ASSIGN_OR_RETURN(writer.emplace_back(),
                   SqliteConnection::Open(path, /*read_only=*/false));
  if (file) {
    RETURN_IF_ERROR(CheckIntegrity(*writer.front(), path));
    // The writer's first statements replayed the log.
    if (wal_frames > 0 && (recovered_wal || !listening)) {
      spdlog::warn(
          "event=store_wal_recovered db={} wal_bytes={} wal_frames={} "
          "why=\"the last writer stopped without closing the store\"",
          path, wal_bytes, wal_frames);
    }
  }
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
