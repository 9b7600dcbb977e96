#include "server/store/sqlite_store.h"

#include <sqlite3.h>

#include <ctime>
#include <functional>

#include "absl/strings/str_cat.h"
#include "server/core/common/json_io.h"
#include "server/core/common/status_macros.h"

namespace headroom {
namespace {

// Migrations in order; migration i brings the schema to version i+1.
const char* const kMigrations[] = {
    R"sql(
CREATE TABLE factor_sets (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  version TEXT NOT NULL UNIQUE,
  created_unix INTEGER NOT NULL,
  body TEXT NOT NULL
);
CREATE TABLE current_factor_set (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  version TEXT NOT NULL REFERENCES factor_sets(version)
);
CREATE TABLE measured_runs (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  template TEXT NOT NULL,
  gpu TEXT NOT NULL,
  batch INTEGER NOT NULL,
  body TEXT NOT NULL
);
)sql",
    // 2: every change of the current factor set, for rollback.
    R"sql(
CREATE TABLE current_history (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  version TEXT NOT NULL REFERENCES factor_sets(version),
  changed_unix INTEGER NOT NULL
);
INSERT INTO current_history (version, changed_unix)
  SELECT version, strftime('%s', 'now') FROM current_factor_set;
DELETE FROM measured_runs
  WHERE seq NOT IN (SELECT MIN(seq) FROM measured_runs GROUP BY body);
CREATE UNIQUE INDEX measured_runs_body ON measured_runs(body);
)sql",
    // 3: versioned energy curve sets.
    R"sql(
CREATE TABLE energy_curve_sets (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  version TEXT NOT NULL UNIQUE,
  created_unix INTEGER NOT NULL,
  body TEXT NOT NULL
);
CREATE TABLE current_energy_curve_set (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  version TEXT NOT NULL REFERENCES energy_curve_sets(version)
);
)sql",
    // 4: serve-while-train runs for density rankings.
    R"sql(
CREATE TABLE density_runs (
  id TEXT PRIMARY KEY,
  arch TEXT NOT NULL,
  dtype TEXT NOT NULL,
  mode TEXT NOT NULL,
  body TEXT NOT NULL
);
)sql",
};

// Prepared statement that finalizes itself.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  bool ok() const { return rc_ == SQLITE_OK; }
  sqlite3_stmt* get() { return stmt_; }
  void BindText(int index, const std::string& text) {
    sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()),
                      SQLITE_TRANSIENT);
  }
  std::string ColumnText(int index) {
    const unsigned char* text = sqlite3_column_text(stmt_, index);
    return text == nullptr ? std::string()
                           : std::string(reinterpret_cast<const char*>(text));
  }

 private:
  sqlite3_stmt* stmt_ = nullptr;
  int rc_;
};

absl::Status SqliteError(sqlite3* db, const std::string& what) {
  return absl::InternalError(
      absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(
    const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(
          path.c_str(), &db,
          SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
          nullptr) != SQLITE_OK) {
    const std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open SQLite database ", path, ": ", message));
  }
  sqlite3_busy_timeout(db, 5000);
  std::unique_ptr<SqliteStore> store(new SqliteStore(db));
  absl::MutexLock lock(&store->mu_);
  if (path != ":memory:")
    RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL;"));
  RETURN_IF_ERROR(store->Exec("PRAGMA foreign_keys=ON;"));
  RETURN_IF_ERROR(store->Migrate());
  return store;
}

SqliteStore::~SqliteStore() {
  absl::MutexLock lock(&mu_);
  sqlite3_close(db_);
}

absl::Status SqliteStore::Exec(const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(absl::StrCat("sqlite: ", message));
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::Migrate() {
  Statement get(db_, "PRAGMA user_version;");
  if (!get.ok() || sqlite3_step(get.get()) != SQLITE_ROW) {
    return SqliteError(db_, "reading schema version");
  }
  const int version = sqlite3_column_int(get.get(), 0);
  if (version > kSqliteSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database schema version ", version, " is newer than this planner's ",
        kSqliteSchemaVersion, "; upgrade the planner"));
  }
  for (int v = version; v < kSqliteSchemaVersion; ++v) {
    RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
    absl::Status status = Exec(kMigrations[v]);
    if (status.ok())
      status = Exec(absl::StrCat("PRAGMA user_version=", v + 1, ";"));
    if (!status.ok()) {
      (void)Exec("ROLLBACK;");
      return status;
    }
    RETURN_IF_ERROR(Exec("COMMIT;"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<v1::FactorSet>> SqliteStore::CurrentFactorSet() {
  std::string version;
  {
    absl::MutexLock lock(&mu_);
    Statement s(db_, "SELECT version FROM current_factor_set WHERE id = 1;");
    if (!s.ok()) return SqliteError(db_, "reading current factor set");
    const int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) return std::optional<v1::FactorSet>();
    if (rc != SQLITE_ROW) return SqliteError(db_, "reading current factor set");
    version = s.ColumnText(0);
  }
  ASSIGN_OR_RETURN(v1::FactorSet set, GetFactorSet(version));
  return std::optional<v1::FactorSet>(std::move(set));
}

absl::StatusOr<std::string> SqliteStore::InsertVersionedLocked(
    const char* table, const char* prefix, int64_t created_unix,
    const std::function<std::string(const std::string&)>& body) {
  int64_t next = 1;
  {
    const std::string sql =
        absl::StrCat("SELECT COALESCE(MAX(seq), 0) + 1 FROM ", table, ";");
    Statement s(db_, sql.c_str());
    if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) {
      return SqliteError(db_, absl::StrCat("numbering ", table));
    }
    next = sqlite3_column_int64(s.get(), 0);
  }
  const std::string version = absl::StrCat(prefix, next);
  const std::string sql =
      absl::StrCat("INSERT INTO ", table,
                   " (seq, version, created_unix, body) VALUES (?, ?, ?, ?);");
  Statement s(db_, sql.c_str());
  if (!s.ok()) return SqliteError(db_, absl::StrCat("storing into ", table));
  sqlite3_bind_int64(s.get(), 1, next);
  s.BindText(2, version);
  sqlite3_bind_int64(s.get(), 3, created_unix);
  s.BindText(4, body(version));
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, absl::StrCat("storing into ", table));
  }
  return version;
}

absl::StatusOr<v1::FactorSet> SqliteStore::AddFactorSet(v1::FactorSet set,
                                                        bool make_current) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  if (set.created_unix() == 0) set.set_created_unix(std::time(nullptr));
  absl::StatusOr<std::string> version = InsertVersionedLocked(
      "factor_sets", "fs-", set.created_unix(), [&](const std::string& v) {
        set.set_version(v);
        return ToJson(set, /*pretty=*/false);
      });
  absl::Status status = version.status();
  if (status.ok() && make_current) status = SetCurrentLocked(*version);
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  RETURN_IF_ERROR(Exec("COMMIT;"));
  return set;
}

absl::Status SqliteStore::SetCurrentLocked(const std::string& version) {
  {
    Statement s(db_,
                "INSERT INTO current_factor_set (id, version) VALUES (1, ?) "
                "ON CONFLICT(id) DO UPDATE SET version = excluded.version;");
    if (!s.ok()) return SqliteError(db_, "making factor set current");
    s.BindText(1, version);
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      return SqliteError(db_, "making factor set current");
    }
  }
  Statement s(db_,
              "INSERT INTO current_history (version, changed_unix) "
              "VALUES (?, ?);");
  if (!s.ok()) return SqliteError(db_, "recording current factor set");
  s.BindText(1, version);
  sqlite3_bind_int64(s.get(), 2, std::time(nullptr));
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "recording current factor set");
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SetCurrentFactorSet(const std::string& version) {
  absl::MutexLock lock(&mu_);
  {
    Statement s(db_, "SELECT 1 FROM factor_sets WHERE version = ?;");
    if (!s.ok()) return SqliteError(db_, "reading factor set");
    s.BindText(1, version);
    if (sqlite3_step(s.get()) != SQLITE_ROW) {
      return absl::NotFoundError(absl::StrCat(
          "factor set '", version.substr(0, 64), "' is not stored"));
    }
  }
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  const absl::Status status = SetCurrentLocked(version);
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  return Exec("COMMIT;");
}

absl::StatusOr<std::vector<std::string>> SqliteStore::CurrentHistory() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT version FROM current_history ORDER BY seq;");
  if (!s.ok()) return SqliteError(db_, "reading current history");
  std::vector<std::string> versions;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    versions.push_back(s.ColumnText(0));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "reading current history");
  return versions;
}

absl::StatusOr<v1::FactorSet> SqliteStore::GetFactorSet(
    const std::string& version) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT body FROM factor_sets WHERE version = ?;");
  if (!s.ok()) return SqliteError(db_, "reading factor set");
  s.BindText(1, version);
  const int rc = sqlite3_step(s.get());
  if (rc == SQLITE_DONE) {
    return absl::NotFoundError(
        absl::StrCat("factor set '", version.substr(0, 64), "' is not stored"));
  }
  if (rc != SQLITE_ROW) return SqliteError(db_, "reading factor set");
  v1::FactorSet set;
  RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored factor set",
                            /*ignore_unknown=*/true, &set));
  return set;
}

absl::StatusOr<std::vector<v1::FactorSet>> SqliteStore::ListFactorSets() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT body FROM factor_sets ORDER BY seq;");
  if (!s.ok()) return SqliteError(db_, "listing factor sets");
  std::vector<v1::FactorSet> sets;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::FactorSet set;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored factor set",
                              /*ignore_unknown=*/true, &set));
    sets.push_back(std::move(set));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing factor sets");
  return sets;
}

absl::StatusOr<int64_t> SqliteStore::AddRuns(
    const std::vector<v1::MeasuredRun>& runs) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  for (const v1::MeasuredRun& run : runs) {
    Statement s(
        db_,
        "INSERT OR IGNORE INTO measured_runs (template, gpu, batch, body) "
        "VALUES (?, ?, ?, ?);");
    if (!s.ok()) {
      (void)Exec("ROLLBACK;");
      return SqliteError(db_, "storing run");
    }
    s.BindText(1, run.template_());
    s.BindText(2, run.gpu());
    sqlite3_bind_int64(s.get(), 3, static_cast<int64_t>(run.batch()));
    s.BindText(4, ToJson(run, /*pretty=*/false));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      const absl::Status status = SqliteError(db_, "storing run");
      (void)Exec("ROLLBACK;");
      return status;
    }
  }
  RETURN_IF_ERROR(Exec("COMMIT;"));
  Statement count(db_, "SELECT COUNT(*) FROM measured_runs;");
  if (!count.ok() || sqlite3_step(count.get()) != SQLITE_ROW) {
    return SqliteError(db_, "counting runs");
  }
  return sqlite3_column_int64(count.get(), 0);
}

absl::StatusOr<std::vector<v1::MeasuredRun>> SqliteStore::ListRuns() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT body FROM measured_runs ORDER BY seq;");
  if (!s.ok()) return SqliteError(db_, "listing runs");
  std::vector<v1::MeasuredRun> runs;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::MeasuredRun run;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored run",
                              /*ignore_unknown=*/true, &run));
    runs.push_back(std::move(run));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing runs");
  return runs;
}

absl::StatusOr<v1::EnergyCurveSet> SqliteStore::AddEnergyCurveSet(
    v1::EnergyCurveSet set, bool make_current) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  absl::StatusOr<std::string> version =
      InsertVersionedLocked("energy_curve_sets", "ec-", std::time(nullptr),
                            [&](const std::string& v) {
                              set.set_version(v);
                              return ToJson(set, /*pretty=*/false);
                            });
  absl::Status status = version.status();
  if (status.ok() && make_current) {
    Statement s(db_,
                "INSERT INTO current_energy_curve_set (id, version) VALUES (1, "
                "?) ON CONFLICT(id) DO UPDATE SET version = excluded.version;");
    if (!s.ok()) {
      status = SqliteError(db_, "making curves current");
    } else {
      s.BindText(1, *version);
      if (sqlite3_step(s.get()) != SQLITE_DONE) {
        status = SqliteError(db_, "making curves current");
      }
    }
  }
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  RETURN_IF_ERROR(Exec("COMMIT;"));
  return set;
}

absl::StatusOr<std::optional<v1::EnergyCurveSet>>
SqliteStore::CurrentEnergyCurveSet() {
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "SELECT e.body FROM energy_curve_sets e JOIN "
              "current_energy_curve_set c ON c.version = e.version;");
  if (!s.ok()) return SqliteError(db_, "reading energy curves");
  const int rc = sqlite3_step(s.get());
  if (rc == SQLITE_DONE) return std::optional<v1::EnergyCurveSet>();
  if (rc != SQLITE_ROW) return SqliteError(db_, "reading energy curves");
  v1::EnergyCurveSet set;
  RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored energy curves",
                            /*ignore_unknown=*/true, &set));
  return std::optional<v1::EnergyCurveSet>(std::move(set));
}

absl::StatusOr<int64_t> SqliteStore::AddDensityRuns(
    const std::vector<v1::DensityRawRun>& runs) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  for (const v1::DensityRawRun& run : runs) {
    Statement s(db_,
                "INSERT INTO density_runs (id, arch, dtype, mode, body) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET "
                "arch = excluded.arch, dtype = excluded.dtype, "
                "mode = excluded.mode, body = excluded.body;");
    if (!s.ok()) {
      (void)Exec("ROLLBACK;");
      return SqliteError(db_, "storing density run");
    }
    s.BindText(1, run.id());
    s.BindText(2, run.arch());
    s.BindText(3, run.dtype());
    s.BindText(4, run.mode());
    s.BindText(5, ToJson(run, /*pretty=*/false));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      const absl::Status status = SqliteError(db_, "storing density run");
      (void)Exec("ROLLBACK;");
      return status;
    }
  }
  RETURN_IF_ERROR(Exec("COMMIT;"));
  Statement count(db_, "SELECT COUNT(*) FROM density_runs;");
  if (!count.ok() || sqlite3_step(count.get()) != SQLITE_ROW) {
    return SqliteError(db_, "counting density runs");
  }
  return sqlite3_column_int64(count.get(), 0);
}

absl::StatusOr<std::vector<v1::DensityRawRun>> SqliteStore::ListDensityRuns(
    const std::string& arch, const std::string& dtype,
    const std::string& mode) {
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "SELECT body FROM density_runs WHERE (?1 = '' OR arch = ?1) "
              "AND (?2 = '' OR dtype = ?2) AND (?3 = '' OR mode = ?3) "
              "ORDER BY id;");
  if (!s.ok()) return SqliteError(db_, "listing density runs");
  s.BindText(1, arch);
  s.BindText(2, dtype);
  s.BindText(3, mode);
  std::vector<v1::DensityRawRun> runs;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::DensityRawRun run;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored density run",
                              /*ignore_unknown=*/true, &run));
    runs.push_back(std::move(run));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing density runs");
  return runs;
}

}  // namespace headroom
