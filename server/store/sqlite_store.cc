#include "server/store/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <ctime>
#include <functional>

#include "absl/strings/str_cat.h"
#include "server/core/common/json_io.h"
#include "server/core/common/status_macros.h"
#include "server/store/probe_transitions.h"

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
    // 5: the probe queue with leases, results stored once, workers.
    R"sql(
CREATE TABLE probes (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE,
  state INTEGER NOT NULL,
  gpu TEXT NOT NULL,
  worker_pin TEXT NOT NULL,
  executor TEXT NOT NULL,
  assignment_id TEXT NOT NULL DEFAULT '',
  lease_until_ms INTEGER NOT NULL DEFAULT 0,
  body TEXT NOT NULL
);
CREATE INDEX probes_by_state ON probes(state, seq);
CREATE TABLE probe_results (
  key TEXT PRIMARY KEY,
  probe_id TEXT NOT NULL REFERENCES probes(id),
  body TEXT NOT NULL
);
CREATE TABLE workers (
  id TEXT PRIMARY KEY,
  body TEXT NOT NULL
);
)sql",
    // 6: the autotune cache.
    R"sql(
CREATE TABLE autotune_cache (
  id TEXT PRIMARY KEY,
  key_bytes BLOB NOT NULL,
  created_unix INTEGER NOT NULL,
  body TEXT NOT NULL
);
)sql",
    // 7: learning probes (request.learn_key) wait behind operator probes.
    R"sql(
ALTER TABLE probes ADD COLUMN background INTEGER NOT NULL DEFAULT 0;
)sql",
    // 8: every change of the current energy curve set, for rollback.
    R"sql(
CREATE TABLE energy_current_history (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  version TEXT NOT NULL REFERENCES energy_curve_sets(version),
  changed_unix INTEGER NOT NULL
);
INSERT INTO energy_current_history (version, changed_unix)
  SELECT version, strftime('%s', 'now') FROM current_energy_curve_set;
)sql",
    // 9: queued probes fail once their expiry (request.expires_s) passes.
    R"sql(
ALTER TABLE probes ADD COLUMN expires_at_ms INTEGER NOT NULL DEFAULT 0;
CREATE INDEX probes_by_expiry ON probes(expires_at_ms)
  WHERE expires_at_ms > 0;
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) ==
              kSqliteSchemaVersion);

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

absl::StatusOr<Page<v1::FactorSet>> SqliteStore::ListFactorSets(
    const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "SELECT seq, body FROM factor_sets WHERE seq > ? "
              "ORDER BY seq LIMIT ?;");
  if (!s.ok()) return SqliteError(db_, "listing factor sets");
  sqlite3_bind_int64(s.get(), 1, after);
  sqlite3_bind_int64(s.get(), 2, int64_t{page.max_entries} + 1);
  std::vector<std::pair<std::string, v1::FactorSet>> rows;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::FactorSet set;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(1), "stored factor set",
                              /*ignore_unknown=*/true, &set));
    rows.emplace_back(absl::StrCat(sqlite3_column_int64(s.get(), 0)),
                      std::move(set));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing factor sets");
  return FillPage(std::move(rows), page);
}

absl::StatusOr<int64_t> SqliteStore::AddRuns(
    const std::vector<v1::MeasuredRun>& runs) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    for (const v1::MeasuredRun& run : runs)
      RETURN_IF_ERROR(InsertRunLocked(run));
    return absl::OkStatus();
  }));
  Statement count(db_, "SELECT COUNT(*) FROM measured_runs;");
  if (!count.ok() || sqlite3_step(count.get()) != SQLITE_ROW) {
    return SqliteError(db_, "counting runs");
  }
  return sqlite3_column_int64(count.get(), 0);
}

absl::StatusOr<int64_t> SqliteStore::CountRuns() {
  absl::MutexLock lock(&mu_);
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
  if (status.ok() && make_current) status = SetCurrentEnergyLocked(*version);
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  RETURN_IF_ERROR(Exec("COMMIT;"));
  return set;
}

absl::Status SqliteStore::SetCurrentEnergyLocked(const std::string& version) {
  {
    Statement s(db_,
                "INSERT INTO current_energy_curve_set (id, version) VALUES (1, "
                "?) ON CONFLICT(id) DO UPDATE SET version = excluded.version;");
    if (!s.ok()) return SqliteError(db_, "making curves current");
    s.BindText(1, version);
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      return SqliteError(db_, "making curves current");
    }
  }
  Statement s(db_,
              "INSERT INTO energy_current_history (version, changed_unix) "
              "VALUES (?, ?);");
  if (!s.ok()) return SqliteError(db_, "recording current curves");
  s.BindText(1, version);
  sqlite3_bind_int64(s.get(), 2, std::time(nullptr));
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "recording current curves");
  }
  return absl::OkStatus();
}

absl::Status SqliteStore::SetCurrentEnergyCurveSet(const std::string& version) {
  absl::MutexLock lock(&mu_);
  {
    Statement s(db_, "SELECT 1 FROM energy_curve_sets WHERE version = ?;");
    if (!s.ok()) return SqliteError(db_, "reading energy curves");
    s.BindText(1, version);
    if (sqlite3_step(s.get()) != SQLITE_ROW) {
      return absl::NotFoundError(absl::StrCat(
          "energy curve set '", version.substr(0, 64), "' is not stored"));
    }
  }
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  const absl::Status status = SetCurrentEnergyLocked(version);
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  return Exec("COMMIT;");
}

absl::StatusOr<std::vector<std::string>> SqliteStore::EnergyCurveHistory() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT version FROM energy_current_history ORDER BY seq;");
  if (!s.ok()) return SqliteError(db_, "reading energy curve history");
  std::vector<std::string> versions;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    versions.push_back(s.ColumnText(0));
  }
  if (rc != SQLITE_DONE) {
    return SqliteError(db_, "reading energy curve history");
  }
  return versions;
}

absl::StatusOr<v1::EnergyCurveSet> SqliteStore::GetEnergyCurveSet(
    const std::string& version) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT body FROM energy_curve_sets WHERE version = ?;");
  if (!s.ok()) return SqliteError(db_, "reading energy curves");
  s.BindText(1, version);
  const int rc = sqlite3_step(s.get());
  if (rc == SQLITE_DONE) {
    return absl::NotFoundError(absl::StrCat(
        "energy curve set '", version.substr(0, 64), "' is not stored"));
  }
  if (rc != SQLITE_ROW) return SqliteError(db_, "reading energy curves");
  v1::EnergyCurveSet set;
  RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored energy curves",
                            /*ignore_unknown=*/true, &set));
  return set;
}

absl::StatusOr<std::vector<v1::EnergyCurveSet>>
SqliteStore::ListEnergyCurveSets(const std::string& after_version, int limit) {
  absl::MutexLock lock(&mu_);
  int64_t after_seq = 0;
  if (!after_version.empty()) {
    Statement s(db_, "SELECT seq FROM energy_curve_sets WHERE version = ?;");
    if (!s.ok()) return SqliteError(db_, "listing energy curves");
    s.BindText(1, after_version);
    const int rc = sqlite3_step(s.get());
    if (rc == SQLITE_DONE) {
      return absl::NotFoundError(absl::StrCat("energy curve set '",
                                              after_version.substr(0, 64),
                                              "' is not stored"));
    }
    if (rc != SQLITE_ROW) return SqliteError(db_, "listing energy curves");
    after_seq = sqlite3_column_int64(s.get(), 0);
  }
  Statement s(db_,
              "SELECT body FROM energy_curve_sets WHERE seq > ? ORDER BY seq "
              "LIMIT ?;");
  if (!s.ok()) return SqliteError(db_, "listing energy curves");
  sqlite3_bind_int64(s.get(), 1, after_seq);
  sqlite3_bind_int64(s.get(), 2, limit);
  std::vector<v1::EnergyCurveSet> sets;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::EnergyCurveSet set;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored energy curves",
                              /*ignore_unknown=*/true, &set));
    sets.push_back(std::move(set));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing energy curves");
  return sets;
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

absl::Status SqliteStore::InTransactionLocked(
    const std::function<absl::Status()>& body) {
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  const absl::Status status = body();
  if (!status.ok()) {
    (void)Exec("ROLLBACK;");
    return status;
  }
  return Exec("COMMIT;");
}

absl::Status SqliteStore::InsertRunLocked(const v1::MeasuredRun& run) {
  Statement s(
      db_,
      "INSERT OR IGNORE INTO measured_runs (template, gpu, batch, body) "
      "VALUES (?, ?, ?, ?);");
  if (!s.ok()) return SqliteError(db_, "storing run");
  s.BindText(1, run.template_());
  s.BindText(2, run.gpu());
  sqlite3_bind_int64(s.get(), 3, static_cast<int64_t>(run.batch()));
  s.BindText(4, ToJson(run, /*pretty=*/false));
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "storing run");
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::Probe> SqliteStore::AddProbe(v1::Probe probe) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    int64_t next = 1;
    {
      Statement s(db_, "SELECT COALESCE(MAX(seq), 0) + 1 FROM probes;");
      if (!s.ok() || sqlite3_step(s.get()) != SQLITE_ROW) {
        return SqliteError(db_, "numbering probes");
      }
      next = sqlite3_column_int64(s.get(), 0);
    }
    probe.set_id(absl::StrCat("p-", next));
    probe.set_state(v1::Probe::QUEUED);
    Statement s(db_,
                "INSERT INTO probes (seq, id, state, gpu, worker_pin, "
                "executor, body, background, expires_at_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?);");
    if (!s.ok()) return SqliteError(db_, "storing probe");
    sqlite3_bind_int64(s.get(), 1, next);
    s.BindText(2, probe.id());
    sqlite3_bind_int(s.get(), 3, probe.state());
    s.BindText(4, probe.gpu());
    s.BindText(5, probe.request().worker());
    s.BindText(6, probe.request().executor());
    s.BindText(7, ToJson(probe, /*pretty=*/false));
    sqlite3_bind_int(s.get(), 8, probe.request().learn_key().empty() ? 0 : 1);
    sqlite3_bind_int64(s.get(), 9, ExpiryDeadlineMs(probe));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      return SqliteError(db_, "storing probe");
    }
    return absl::OkStatus();
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqliteStore::GetProbeLocked(const std::string& id) {
  Statement s(db_, "SELECT body FROM probes WHERE id = ?;");
  if (!s.ok()) return SqliteError(db_, "reading probe");
  s.BindText(1, id);
  const int rc = sqlite3_step(s.get());
  if (rc == SQLITE_DONE) {
    return absl::NotFoundError(
        absl::StrCat("probe '", id.substr(0, 64), "' is not stored"));
  }
  if (rc != SQLITE_ROW) return SqliteError(db_, "reading probe");
  v1::Probe probe;
  RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored probe",
                            /*ignore_unknown=*/true, &probe));
  return probe;
}

absl::StatusOr<v1::Probe> SqliteStore::GetProbe(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return GetProbeLocked(id);
}

absl::Status SqliteStore::UpdateProbeLocked(const v1::Probe& probe,
                                            int64_t lease_until_ms) {
  Statement s(db_,
              "UPDATE probes SET state = ?, assignment_id = ?, "
              "lease_until_ms = ?, body = ?, expires_at_ms = ? WHERE id = ?;");
  if (!s.ok()) return SqliteError(db_, "updating probe");
  sqlite3_bind_int(s.get(), 1, probe.state());
  s.BindText(2, probe.state() == v1::Probe::RUNNING ? probe.assignment_id()
                                                    : std::string());
  sqlite3_bind_int64(s.get(), 3, lease_until_ms);
  s.BindText(4, ToJson(probe, /*pretty=*/false));
  sqlite3_bind_int64(s.get(), 5, ExpiryDeadlineMs(probe));
  s.BindText(6, probe.id());
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "updating probe");
  }
  return absl::OkStatus();
}

absl::StatusOr<Page<v1::Probe>> SqliteStore::ListProbes(v1::Probe::State state,
                                                        const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t before, SeqAfter(page.after));
  absl::MutexLock lock(&mu_);
  // Newest first: the next page holds the probes before the last one.
  Statement s(db_,
              "SELECT seq, body FROM probes WHERE (?1 = 0 OR state = ?1) "
              "AND (?2 = 0 OR seq < ?2) ORDER BY seq DESC LIMIT ?3;");
  if (!s.ok()) return SqliteError(db_, "listing probes");
  sqlite3_bind_int(s.get(), 1, state);
  sqlite3_bind_int64(s.get(), 2, before);
  sqlite3_bind_int64(s.get(), 3, int64_t{page.max_entries} + 1);
  std::vector<std::pair<std::string, v1::Probe>> rows;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::Probe probe;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(1), "stored probe",
                              /*ignore_unknown=*/true, &probe));
    rows.emplace_back(absl::StrCat(sqlite3_column_int64(s.get(), 0)),
                      std::move(probe));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing probes");
  return FillPage(std::move(rows), page);
}

absl::StatusOr<std::optional<v1::Probe>> SqliteStore::ClaimProbe(
    const std::string& worker, const std::vector<std::string>& gpus,
    const std::vector<std::string>& executors, int64_t now_ms,
    int64_t lease_ms) {
  const auto contains = [](const std::vector<std::string>& list,
                           const std::string& item) {
    return std::find(list.begin(), list.end(), item) != list.end();
  };
  absl::MutexLock lock(&mu_);
  std::optional<v1::Probe> claimed;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    // The queue is scanned oldest first; a bounded window keeps one claim
    // cheap even with a long queue no worker here can serve.
    Statement s(db_,
                "SELECT id, gpu, worker_pin, executor FROM probes "
                "WHERE state = ? ORDER BY background, seq LIMIT 1000;");
    if (!s.ok()) return SqliteError(db_, "claiming probe");
    sqlite3_bind_int(s.get(), 1, v1::Probe::QUEUED);
    std::string id;
    int rc;
    while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
      const std::string pin = s.ColumnText(2);
      const std::string executor = s.ColumnText(3);
      const bool placed =
          pin.empty() ? contains(gpus, s.ColumnText(1)) : pin == worker;
      if (placed && (executor.empty() || contains(executors, executor))) {
        id = s.ColumnText(0);
        break;
      }
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
      return SqliteError(db_, "claiming probe");
    }
    if (id.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(v1::Probe probe, GetProbeLocked(id));
    MarkClaimed(&probe, worker, now_ms);
    RETURN_IF_ERROR(UpdateProbeLocked(probe, now_ms + lease_ms));
    claimed = std::move(probe);
    return absl::OkStatus();
  }));
  return claimed;
}

absl::Status SqliteStore::RenewLease(const std::string& assignment_id,
                                     int64_t until_ms) {
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "UPDATE probes SET lease_until_ms = MAX(lease_until_ms, ?) "
              "WHERE assignment_id = ? AND state = ?;");
  if (!s.ok()) return SqliteError(db_, "renewing lease");
  sqlite3_bind_int64(s.get(), 1, until_ms);
  s.BindText(2, assignment_id);
  sqlite3_bind_int(s.get(), 3, v1::Probe::RUNNING);
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "renewing lease");
  }
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat(
        "assignment '", assignment_id.substr(0, 64), "' is not running"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> SqliteStore::RequeueExpired(
    int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> requeued;
  {
    // Read first: the write transaction below runs only when a lease ran
    // out, not on every dispatcher pass.
    Statement s(db_,
                "SELECT 1 FROM probes WHERE state = ? AND lease_until_ms < ? "
                "LIMIT 1;");
    if (!s.ok()) return SqliteError(db_, "finding expired leases");
    sqlite3_bind_int(s.get(), 1, v1::Probe::RUNNING);
    sqlite3_bind_int64(s.get(), 2, now_ms);
    if (sqlite3_step(s.get()) != SQLITE_ROW) return requeued;
  }
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    {
      Statement s(db_,
                  "SELECT id FROM probes WHERE state = ? AND "
                  "lease_until_ms < ? ORDER BY seq LIMIT 1000;");
      if (!s.ok()) return SqliteError(db_, "finding expired leases");
      sqlite3_bind_int(s.get(), 1, v1::Probe::RUNNING);
      sqlite3_bind_int64(s.get(), 2, now_ms);
      while (sqlite3_step(s.get()) == SQLITE_ROW) {
        requeued.push_back(s.ColumnText(0));
      }
    }
    for (const std::string& id : requeued) {
      ASSIGN_OR_RETURN(v1::Probe probe, GetProbeLocked(id));
      MarkRequeued(&probe, now_ms);
      RETURN_IF_ERROR(UpdateProbeLocked(probe, 0));
    }
    return absl::OkStatus();
  }));
  return requeued;
}

absl::StatusOr<std::vector<v1::Probe>> SqliteStore::ListExpiredProbes(
    int64_t now_ms, int limit) {
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "SELECT body FROM probes WHERE expires_at_ms > 0 AND "
              "expires_at_ms <= ? AND state = ? ORDER BY expires_at_ms, seq "
              "LIMIT ?;");
  if (!s.ok()) return SqliteError(db_, "finding expired probes");
  sqlite3_bind_int64(s.get(), 1, now_ms);
  sqlite3_bind_int(s.get(), 2, v1::Probe::QUEUED);
  sqlite3_bind_int(s.get(), 3, limit);
  std::vector<v1::Probe> expired;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::Probe probe;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(0), "stored probe",
                              /*ignore_unknown=*/true, &probe));
    expired.push_back(std::move(probe));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "finding expired probes");
  return expired;
}

absl::StatusOr<v1::Probe> SqliteStore::ExpireProbe(const std::string& id,
                                                   int64_t now_ms,
                                                   const std::string& error) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(id));
    if (!MarkExpired(&probe, now_ms, error)) return absl::OkStatus();
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<bool> SqliteStore::RecordProbeResult(
    const std::string& probe_id, const std::string& assignment_id,
    const std::string& worker, const std::string& key,
    const v1::BatchResult& result, const std::optional<v1::MeasuredRun>& run) {
  absl::MutexLock lock(&mu_);
  bool inserted = false;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(v1::Probe probe, GetProbeLocked(probe_id));
    {
      // A key stored before is a duplicate even once the lease is gone: a
      // re-sent result whose acknowledgement was lost.
      Statement seen(db_, "SELECT 1 FROM probe_results WHERE key = ?;");
      if (!seen.ok()) return SqliteError(db_, "reading probe results");
      seen.BindText(1, key);
      const int rc = sqlite3_step(seen.get());
      if (rc == SQLITE_ROW) return absl::OkStatus();
      if (rc != SQLITE_DONE) return SqliteError(db_, "reading probe results");
    }
    RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
    if (HasResultFor(probe, result)) return absl::OkStatus();
    Statement s(db_,
                "INSERT OR IGNORE INTO probe_results (key, probe_id, body) "
                "VALUES (?, ?, ?);");
    if (!s.ok()) return SqliteError(db_, "storing probe result");
    s.BindText(1, key);
    s.BindText(2, probe_id);
    s.BindText(3, ToJson(result, /*pretty=*/false));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      return SqliteError(db_, "storing probe result");
    }
    inserted = sqlite3_changes(db_) == 1;
    if (!inserted) return absl::OkStatus();
    *probe.add_results() = result;
    Statement lease(db_, "SELECT lease_until_ms FROM probes WHERE id = ?;");
    if (!lease.ok()) return SqliteError(db_, "reading lease");
    lease.BindText(1, probe_id);
    if (sqlite3_step(lease.get()) != SQLITE_ROW) {
      return SqliteError(db_, "reading lease");
    }
    RETURN_IF_ERROR(
        UpdateProbeLocked(probe, sqlite3_column_int64(lease.get(), 0)));
    if (run.has_value()) RETURN_IF_ERROR(InsertRunLocked(*run));
    return absl::OkStatus();
  }));
  return inserted;
}

absl::StatusOr<v1::Probe> SqliteStore::FinishAssignment(
    const std::string& probe_id, const std::string& assignment_id,
    v1::Probe::State state, const std::string& error,
    const std::string& details_json, bool requeue) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(probe_id));
    if (!MarkFinished(&probe, assignment_id, state, error, details_json,
                      requeue)) {
      return absl::OkStatus();  // that assignment is no longer the probe's
    }
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqliteStore::HandBack(
    const std::string& probe_id, const std::string& assignment_id,
    const std::string& worker, uint32_t max_handbacks) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(probe_id));
    RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
    MarkHandedBack(&probe, max_handbacks);
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqliteStore::CancelProbe(const std::string& id) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(id));
    if (!MarkCancelled(&probe)) return absl::OkStatus();  // already final
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>>
SqliteStore::CountProbes() {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT state, COUNT(*) FROM probes GROUP BY state;");
  if (!s.ok()) return SqliteError(db_, "counting probes");
  std::vector<std::pair<v1::Probe::State, int64_t>> counts;
  while (sqlite3_step(s.get()) == SQLITE_ROW) {
    const int state = sqlite3_column_int(s.get(), 0);
    if (!v1::Probe::State_IsValid(state)) continue;
    counts.emplace_back(static_cast<v1::Probe::State>(state),
                        sqlite3_column_int64(s.get(), 1));
  }
  return counts;
}

absl::Status SqliteStore::PutWorker(const v1::WorkerStatus& worker) {
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "INSERT INTO workers (id, body) VALUES (?, ?) "
              "ON CONFLICT(id) DO UPDATE SET body = excluded.body;");
  if (!s.ok()) return SqliteError(db_, "storing worker");
  s.BindText(1, worker.hello().worker_id());
  s.BindText(2, ToJson(worker, /*pretty=*/false));
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "storing worker");
  }
  return absl::OkStatus();
}

absl::StatusOr<Page<v1::WorkerStatus>> SqliteStore::ListWorkers(
    const PageSpec& page) {
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "SELECT id, body FROM workers WHERE (?1 = 0 OR id > ?2) "
              "ORDER BY id LIMIT ?3;");
  if (!s.ok()) return SqliteError(db_, "listing workers");
  sqlite3_bind_int(s.get(), 1, page.after.empty() ? 0 : 1);
  s.BindText(2, page.after);
  sqlite3_bind_int64(s.get(), 3, int64_t{page.max_entries} + 1);
  std::vector<std::pair<std::string, v1::WorkerStatus>> rows;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::WorkerStatus worker;
    RETURN_IF_ERROR(ParseJson(s.ColumnText(1), "stored worker",
                              /*ignore_unknown=*/true, &worker));
    rows.emplace_back(s.ColumnText(0), std::move(worker));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing workers");
  return FillPage(std::move(rows), page);
}

absl::StatusOr<bool> SqliteStore::PutAutotuneRecord(
    const std::string& id, const std::string& key_bytes,
    const v1::AutotuneRecord& record) {
  absl::MutexLock lock(&mu_);
  bool replaced = false;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    {
      Statement s(db_, "DELETE FROM autotune_cache WHERE id = ?;");
      if (!s.ok()) return SqliteError(db_, "storing autotune record");
      s.BindText(1, id);
      if (sqlite3_step(s.get()) != SQLITE_DONE) {
        return SqliteError(db_, "storing autotune record");
      }
      replaced = sqlite3_changes(db_) > 0;
    }
    Statement s(db_,
                "INSERT INTO autotune_cache (id, key_bytes, created_unix, "
                "body) VALUES (?, ?, ?, ?);");
    if (!s.ok()) return SqliteError(db_, "storing autotune record");
    s.BindText(1, id);
    sqlite3_bind_blob(s.get(), 2, key_bytes.data(),
                      static_cast<int>(key_bytes.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(s.get(), 3, std::time(nullptr));
    s.BindText(4, ToJson(record, /*pretty=*/false));
    if (sqlite3_step(s.get()) != SQLITE_DONE) {
      return SqliteError(db_, "storing autotune record");
    }
    return absl::OkStatus();
  }));
  return replaced;
}

absl::StatusOr<std::optional<v1::AutotuneRecord>>
SqliteStore::FindAutotuneRecord(const std::string& id,
                                const std::string& key_bytes) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "SELECT key_bytes, body FROM autotune_cache WHERE id = ?;");
  if (!s.ok()) return SqliteError(db_, "reading autotune cache");
  s.BindText(1, id);
  if (sqlite3_step(s.get()) != SQLITE_ROW) {
    return std::optional<v1::AutotuneRecord>();
  }
  const void* blob = sqlite3_column_blob(s.get(), 0);
  const int size = sqlite3_column_bytes(s.get(), 0);
  const std::string stored(static_cast<const char*>(blob),
                           blob == nullptr ? 0 : static_cast<size_t>(size));
  // Same id but another key (a hash collision) is a miss.
  if (stored != key_bytes) return std::optional<v1::AutotuneRecord>();
  v1::AutotuneRecord record;
  RETURN_IF_ERROR(ParseJson(s.ColumnText(1), "stored autotune record",
                            /*ignore_unknown=*/true, &record));
  return std::optional<v1::AutotuneRecord>(std::move(record));
}

absl::StatusOr<Page<v1::AutotuneCacheEntry>> SqliteStore::ListAutotuneRecords(
    const PageSpec& page) {
  int64_t created = 0;
  std::string id;
  if (!page.after.empty()) {
    RETURN_IF_ERROR(ParseCreatedIdKey(page.after, &created, &id));
  }
  absl::MutexLock lock(&mu_);
  Statement s(db_,
              "SELECT id, created_unix, body FROM autotune_cache "
              "WHERE (?1 = 0 OR created_unix > ?2 OR "
              "(created_unix = ?2 AND id > ?3)) "
              "ORDER BY created_unix, id LIMIT ?4;");
  if (!s.ok()) return SqliteError(db_, "listing autotune cache");
  sqlite3_bind_int(s.get(), 1, page.after.empty() ? 0 : 1);
  sqlite3_bind_int64(s.get(), 2, created);
  s.BindText(3, id);
  sqlite3_bind_int64(s.get(), 4, int64_t{page.max_entries} + 1);
  std::vector<std::pair<std::string, v1::AutotuneCacheEntry>> rows;
  int rc;
  while ((rc = sqlite3_step(s.get())) == SQLITE_ROW) {
    v1::AutotuneCacheEntry entry;
    entry.set_id(s.ColumnText(0));
    entry.set_created_unix(sqlite3_column_int64(s.get(), 1));
    RETURN_IF_ERROR(ParseJson(s.ColumnText(2), "stored autotune record",
                              /*ignore_unknown=*/true, entry.mutable_record()));
    std::string key = CreatedIdKey(entry.created_unix(), entry.id());
    rows.emplace_back(std::move(key), std::move(entry));
  }
  if (rc != SQLITE_DONE) return SqliteError(db_, "listing autotune cache");
  return FillPage(std::move(rows), page);
}

absl::Status SqliteStore::DropAutotuneRecord(const std::string& id) {
  absl::MutexLock lock(&mu_);
  Statement s(db_, "DELETE FROM autotune_cache WHERE id = ?;");
  if (!s.ok()) return SqliteError(db_, "dropping autotune record");
  s.BindText(1, id);
  if (sqlite3_step(s.get()) != SQLITE_DONE) {
    return SqliteError(db_, "dropping autotune record");
  }
  if (sqlite3_changes(db_) == 0) {
    return absl::NotFoundError(absl::StrCat(
        "autotune cache entry '", id.substr(0, 64),
        "' is not stored; headroom microbatch cache list shows the ids"));
  }
  return absl::OkStatus();
}

}  // namespace headroom
