// Why our own seam rather than SOCI: SOCI 4.0 (Debian libsoci-dev) was
// tried first. Its installed headers require Boost (soci-config.h defines
// SOCI_HAVE_BOOST, so every user needs libboost-dev), its sqlite3 backend
// cannot write a blob (blob::write_from_start: "not implemented for this
// backend"), and it reports errors by exception, which every call would
// turn back into a Status (and SQLSTATE into UNAVAILABLE / ABORTED) here
// anyway. It abstracts neither FOR UPDATE SKIP LOCKED nor advisory locks.
// What the two backends really differ in is small (sql_dialect.h), and a
// connection is ~150 lines each over sqlite3 and libpq: so the SQL is
// written once here, over SqlConnection.

#include "server/store/sql_store.h"

#include <openssl/sha.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "base/deterministic_bytes.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "server/store/probe_transitions.h"

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

namespace {

using Tx = SqlStore::Tx;

// Bodies are DeterministicBytes: identical messages give identical bytes,
// so a hash of the body tells identical runs apart from new ones.
std::string BodyHash(const std::string& body) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(body.data()), body.size(),
         digest);
  return std::string(reinterpret_cast<const char*>(digest), sizeof(digest));
}

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
std::string Placeholders(size_t n) {
  if (n == 0) return "NULL";
  std::string list = "?";
  for (size_t i = 1; i < n; ++i) list += ", ?";
  return list;
}

absl::Status NotStored(const char* what, const std::string& name) {
  return absl::NotFoundError(
      absl::StrCat(what, " '", name.substr(0, 64), "' is not stored"));
}

// --- A batch result and the measured run it became, stored once ---

// Which of a batch result's fields its measured run holds (bit per field).
enum RunField : int64_t {
  kRunBatch = 1,
  kRunPeak = 2,
  kRunDevicePeak = 4,
  kRunStepSeconds = 8,
  kRunEnergy = 16,
};

// `result` without the numbers `run` holds as well; `fields` says which.
v1::BatchResult SplitResult(const v1::BatchResult& result,
                            const v1::MeasuredRun& run, int64_t* fields) {
  v1::BatchResult rest = result;
  *fields = 0;
  if (run.batch() == result.batch()) {
    rest.clear_batch();
    *fields |= kRunBatch;
  }
  const auto take = [&](bool has, double value, bool run_has, double run_value,
                        RunField field, void (v1::BatchResult::*clear)()) {
    if (has && run_has && value == run_value) {
      (rest.*clear)();
      *fields |= field;
    }
  };
  take(result.has_peak_allocated_gb(), result.peak_allocated_gb(),
       run.has_measured_peak_gb(), run.measured_peak_gb(), kRunPeak,
       &v1::BatchResult::clear_peak_allocated_gb);
  take(result.has_device_peak_gb(), result.device_peak_gb(),
       run.has_device_peak_gb(), run.device_peak_gb(), kRunDevicePeak,
       &v1::BatchResult::clear_device_peak_gb);
  take(result.has_step_seconds(), result.step_seconds(), run.has_step_seconds(),
       run.step_seconds(), kRunStepSeconds,
       &v1::BatchResult::clear_step_seconds);
  take(result.has_energy_j(), result.energy_j(), run.has_energy_j(),
       run.energy_j(), kRunEnergy, &v1::BatchResult::clear_energy_j);
  return rest;
}

// The inverse of SplitResult.
void JoinResult(const v1::MeasuredRun& run, int64_t fields,
                v1::BatchResult* result) {
  if (fields & kRunBatch) result->set_batch(static_cast<uint32_t>(run.batch()));
  if (fields & kRunPeak) result->set_peak_allocated_gb(run.measured_peak_gb());
  if (fields & kRunDevicePeak) result->set_device_peak_gb(run.device_peak_gb());
  if (fields & kRunStepSeconds) result->set_step_seconds(run.step_seconds());
  if (fields & kRunEnergy) result->set_energy_j(run.energy_j());
}

// --- Probes: a row for the probe, a row per result ---

// Fills in the results of `probes` (read without them) from their rows.
absl::Status AddResults(Tx& tx, std::vector<v1::Probe>& probes) {
  if (probes.empty()) return absl::OkStatus();
  std::map<std::string, v1::Probe*> by_id;
  SqlParams ids;
  for (v1::Probe& probe : probes) {
    by_id[probe.id()] = &probe;
    ids.Text(probe.id());
  }
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("reading probe results",
               absl::StrCat("SELECT r.probe_id, r.run_fields, r.body, m.body "
                            "FROM probe_results r LEFT JOIN measured_runs m "
                            "ON m.seq = r.run_seq WHERE r.probe_id IN (",
                            Placeholders(probes.size()), ") ORDER BY r.seq"),
               ids));
  for (int i = 0; i < rows.size(); ++i) {
    ASSIGN_OR_RETURN(v1::BatchResult result,
                     Parse<v1::BatchResult>(rows.Bytes(i, 2), "probe result"));
    if (const int64_t fields = rows.Int(i, 1); fields != 0) {
      if (rows.IsNull(i, 3)) {
        return absl::DataLossError(
            absl::StrCat("probe ", rows.Bytes(i, 0),
                         " has a result whose measured run is not stored"));
      }
      ASSIGN_OR_RETURN(v1::MeasuredRun run,
                       Parse<v1::MeasuredRun>(rows.Bytes(i, 3), "run"));
      JoinResult(run, fields, &result);
    }
    *by_id[rows.Bytes(i, 0)]->add_results() = std::move(result);
  }
  return absl::OkStatus();
}

// Probes from rows whose column `column` holds a probe's body, results
// added.
absl::StatusOr<std::vector<v1::Probe>> ProbesFromRows(Tx& tx,
                                                      const SqlRows& rows,
                                                      int column) {
  std::vector<v1::Probe> probes;
  for (int i = 0; i < rows.size(); ++i) {
    ASSIGN_OR_RETURN(probes.emplace_back(),
                     Parse<v1::Probe>(rows.Bytes(i, column), "probe"));
  }
  RETURN_IF_ERROR(AddResults(tx, probes));
  return probes;
}

// One probe with its results; locked until the commit when `lock`.
absl::StatusOr<v1::Probe> LoadProbe(Tx& tx, const std::string& id, bool lock) {
  ASSIGN_OR_RETURN(SqlRows rows,
                   tx.Query("reading probe",
                            absl::StrCat("SELECT body FROM probes WHERE id = ?",
                                         lock ? tx.dialect().for_update : ""),
                            SqlParams().Text(id)));
  if (rows.empty()) return NotStored("probe", id);
  ASSIGN_OR_RETURN(std::vector<v1::Probe> probes, ProbesFromRows(tx, rows, 0));
  return std::move(probes[0]);
}

// The probe row's body: the probe without its results (they have rows of
// their own).
std::string ProbeBody(const v1::Probe& probe) {
  v1::Probe body = probe;
  body.clear_results();
  return DeterministicBytes(body);
}

// Writes the probe's body and its queue columns.
absl::Status UpdateProbe(Tx& tx, const v1::Probe& probe,
                         int64_t lease_until_ms) {
  return tx.Exec(
      "updating probe",
      "UPDATE probes SET state = ?, assignment_id = ?, lease_until_ms = ?, "
      "body = ?, expires_at_ms = ? WHERE id = ?",
      SqlParams()
          .Int(probe.state())
          .Text(probe.state() == v1::Probe::RUNNING ? probe.assignment_id()
                                                    : std::string())
          .Int(lease_until_ms)
          .Bytes(ProbeBody(probe))
          .Int(ExpiryDeadlineMs(probe))
          .Text(probe.id()));
}

// --- Numbered rows ---

// The next seq of `table` ("p-N", "fs-N" numbering), serialized with other
// numberers of it until the transaction ends.
absl::StatusOr<int64_t> NextSeq(Tx& tx, const char* table) {
  if (tx.dialect().numbering_lock[0] != '\0') {
    RETURN_IF_ERROR(tx.Exec("locking numbering", tx.dialect().numbering_lock,
                            SqlParams().Text(table)));
  }
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("numbering",
               absl::StrCat("SELECT COALESCE(MAX(seq), 0) + 1 FROM ", table)));
  return rows.Int(0, 0);
}

// Inserts (seq, version, created_unix, body) into a versioned table; `body`
// gets the version and returns the row's body. Returns the version.
absl::StatusOr<std::string> InsertVersioned(
    Tx& tx, const char* table, const char* prefix, int64_t created_unix,
    const std::function<std::string(const std::string&)>& body) {
  ASSIGN_OR_RETURN(const int64_t next, NextSeq(tx, table));
  const std::string version = absl::StrCat(prefix, next);
  RETURN_IF_ERROR(tx.Exec(
      "storing a version",
      absl::StrCat("INSERT INTO ", table,
                   " (seq, version, created_unix, body) VALUES (?, ?, ?, ?)"),
      SqlParams()
          .Int(next)
          .Text(version)
          .Int(created_unix)
          .Bytes(body(version))));
  return version;
}

// Makes `version` current in `current_table` and appends it to
// `history_table`; NOT_FOUND when `versions_table` does not hold it.
absl::Status MakeCurrent(Tx& tx, const char* what, const char* versions_table,
                         const char* current_table, const char* history_table,
                         const std::string& version, bool check) {
  if (check) {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading a version",
                              absl::StrCat("SELECT 1 FROM ", versions_table,
                                           " WHERE version = ?"),
                              SqlParams().Text(version)));
    if (rows.empty()) return NotStored(what, version);
  }
  RETURN_IF_ERROR(tx.Exec(
      "making a version current",
      absl::StrCat("INSERT INTO ", current_table,
                   " (id, version) VALUES (1, ?) ON CONFLICT (id) DO UPDATE "
                   "SET version = excluded.version"),
      SqlParams().Text(version)));
  return tx.Exec("recording the current version",
                 absl::StrCat("INSERT INTO ", history_table,
                              " (version, changed_unix) VALUES (?, ?)"),
                 SqlParams().Text(version).Int(std::time(nullptr)));
}

absl::StatusOr<std::vector<std::string>> History(Tx& tx, const char* table) {
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("reading history",
               absl::StrCat("SELECT version FROM ", table, " ORDER BY seq")));
  std::vector<std::string> versions;
  for (int i = 0; i < rows.size(); ++i) versions.push_back(rows.Bytes(i, 0));
  return versions;
}

absl::StatusOr<int64_t> Count(Tx& tx, const char* table) {
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("counting", absl::StrCat("SELECT COUNT(*) FROM ", table)));
  return rows.Int(0, 0);
}

// Stores `run` unless an identical one is; returns the seq of the one
// stored.
absl::StatusOr<int64_t> InsertRun(Tx& tx, const v1::MeasuredRun& run) {
  const std::string body = DeterministicBytes(run);
  const std::string hash = BodyHash(body);
  RETURN_IF_ERROR(tx.Exec(
      "storing run",
      "INSERT INTO measured_runs (template, gpu, batch, body, body_hash) "
      "VALUES (?, ?, ?, ?, ?) ON CONFLICT (body_hash) DO NOTHING",
      SqlParams()
          .Text(run.template_())
          .Text(run.gpu())
          .Int(static_cast<int64_t>(run.batch()))
          .Bytes(body)
          .Bytes(hash)));
  ASSIGN_OR_RETURN(SqlRows rows,
                   tx.Query("finding run",
                            "SELECT seq FROM measured_runs WHERE body_hash = ?",
                            SqlParams().Bytes(hash)));
  if (rows.empty()) return absl::InternalError("a stored run went missing");
  return rows.Int(0, 0);
}

// --- SqlStore's migrations, the same for both backends ---

// Re-encodes a legacy JSON body column as deterministic binary.
// `key` is "seq" (an integer) or "id" (text).
template <typename Message>
absl::Status ReencodeJson(Tx& tx, const char* table, const char* key) {
  const bool integer_key = std::string(key) == "seq";
  ASSIGN_OR_RETURN(SqlRows rows, tx.Query("reading legacy bodies",
                                          absl::StrCat("SELECT ", key,
                                                       ", body FROM ", table)));
  const std::string update =
      absl::StrCat("UPDATE ", table, " SET body = ? WHERE ", key, " = ?");
  for (int i = 0; i < rows.size(); ++i) {
    Message message;
    absl::Status parsed = ParseJson(rows.Bytes(i, 1), table,
                                    /*ignore_unknown=*/true, &message);
    if (!parsed.ok()) return absl::DataLossError(parsed.message());
    SqlParams params;
    params.Bytes(DeterministicBytes(message));
    if (integer_key) {
      params.Int(rows.Int(i, 0));
    } else {
      params.Text(rows.Bytes(i, 0));
    }
    RETURN_IF_ERROR(tx.Exec("re-encoding a body", update, params));
  }
  return absl::OkStatus();
}

// Legacy + 1: binary bodies everywhere; measured runs unique by a hash of
// their body; a probe's results in rows of their own, a measured result
// referring to its measured run instead of repeating it. The same tables
// as CreateSchema's.
absl::Status SharedSchema(Tx& tx) {
  const SqlDialect& d = tx.dialect();
  if (d.legacy_json_bodies) {
    RETURN_IF_ERROR(ReencodeJson<v1::FactorSet>(tx, "factor_sets", "seq"));
    RETURN_IF_ERROR(
        ReencodeJson<v1::EnergyCurveSet>(tx, "energy_curve_sets", "seq"));
    RETURN_IF_ERROR(ReencodeJson<v1::DensityRawRun>(tx, "density_runs", "id"));
    RETURN_IF_ERROR(ReencodeJson<v1::WorkerStatus>(tx, "workers", "id"));
    RETURN_IF_ERROR(
        ReencodeJson<v1::AutotuneRecord>(tx, "autotune_cache", "id"));
    RETURN_IF_ERROR(ReencodeJson<v1::Probe>(tx, "probes", "seq"));
    RETURN_IF_ERROR(ReencodeJson<v1::MeasuredRun>(tx, "measured_runs", "seq"));
  }
  RETURN_IF_ERROR(tx.Script("migrating runs",
                            absl::StrCat("DROP INDEX measured_runs_body; "
                                         "ALTER TABLE measured_runs ADD COLUMN "
                                         "body_hash ",
                                         d.blob_type)));
  {
    ASSIGN_OR_RETURN(
        SqlRows runs,
        tx.Query("reading runs",
                 "SELECT seq, body FROM measured_runs ORDER BY seq"));
    std::set<std::string> seen;
    for (int i = 0; i < runs.size(); ++i) {
      const std::string hash = BodyHash(runs.Bytes(i, 1));
      // JSON that differed only in spelling is one run in binary.
      if (!seen.insert(hash).second) {
        RETURN_IF_ERROR(tx.Exec("dropping a repeated run",
                                "DELETE FROM measured_runs WHERE seq = ?",
                                SqlParams().Int(runs.Int(i, 0))));
        continue;
      }
      RETURN_IF_ERROR(tx.Exec("hashing a run",
                              "UPDATE measured_runs SET body_hash = ? "
                              "WHERE seq = ?",
                              SqlParams().Bytes(hash).Int(runs.Int(i, 0))));
    }
  }
  RETURN_IF_ERROR(
      tx.Script("migrating probe results",
                absl::StrCat("CREATE UNIQUE INDEX measured_runs_by_hash ON "
                             "measured_runs (body_hash); "
                             "CREATE TABLE probe_results_v2 (seq ",
                             d.serial_key, ", key ", d.sorted_text,
                             " NOT NULL UNIQUE, probe_id ", d.sorted_text,
                             " NOT NULL, run_seq ", d.bigint_type,
                             ", run_fields integer NOT NULL DEFAULT 0, body ",
                             d.blob_type, " NOT NULL)")));
  // The legacy result rows were written but never read: a probe's results
  // were its body's. Each result keeps its key where a row matches it.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>>
      keys;  // probe id -> (key, binary result)
  {
    ASSIGN_OR_RETURN(SqlRows old,
                     tx.Query("reading legacy results",
                              "SELECT probe_id, key, body FROM probe_results"));
    for (int i = 0; i < old.size(); ++i) {
      v1::BatchResult result;
      if (d.legacy_json_bodies) {
        if (!ParseJson(old.Bytes(i, 2), "result", true, &result).ok()) continue;
      } else if (!result.ParseFromString(old.Bytes(i, 2))) {
        continue;
      }
      keys[old.Bytes(i, 0)].emplace_back(old.Bytes(i, 1),
                                         DeterministicBytes(result));
    }
  }
  ASSIGN_OR_RETURN(
      SqlRows probes,
      tx.Query("reading probes", "SELECT id, body FROM probes ORDER BY seq"));
  for (int i = 0; i < probes.size(); ++i) {
    ASSIGN_OR_RETURN(v1::Probe probe,
                     Parse<v1::Probe>(probes.Bytes(i, 1), "probe"));
    auto& candidates = keys[probe.id()];
    for (int r = 0; r < probe.results_size(); ++r) {
      const std::string body = DeterministicBytes(probe.results(r));
      std::string key = absl::StrCat("migrated/", probe.id(), "/", r);
      for (auto& [candidate, bytes] : candidates) {
        if (!candidate.empty() && bytes == body) {
          key = std::move(candidate);
          candidate.clear();
          break;
        }
      }
      RETURN_IF_ERROR(
          tx.Exec("moving a result",
                  "INSERT INTO probe_results_v2 (key, probe_id, "
                  "body) VALUES (?, ?, ?)",
                  SqlParams().Text(key).Text(probe.id()).Bytes(body)));
    }
    if (probe.results_size() > 0) {
      RETURN_IF_ERROR(
          tx.Exec("moving results", "UPDATE probes SET body = ? WHERE id = ?",
                  SqlParams().Bytes(ProbeBody(probe)).Text(probe.id())));
    }
  }
  return tx.Script(
      "migrating probe results",
      "DROP TABLE probe_results; "
      "ALTER TABLE probe_results_v2 RENAME TO probe_results; "
      "CREATE INDEX probe_results_by_probe ON probe_results (probe_id, seq); "
      "CREATE INDEX IF NOT EXISTS probes_by_assignment ON probes "
      "(assignment_id)");
}

// Legacy + 2: measured energy runs (issue 21), a table of their own. Old
// databases gain it empty; nothing else changes, so they stay readable.
const char kEnergyRunsTable[] = R"sql(
CREATE TABLE energy_runs (
  seq $SERIAL,
  key $SORTED NOT NULL UNIQUE,
  gpu text NOT NULL,
  arch text NOT NULL,
  simulated integer NOT NULL,
  body $BLOB NOT NULL
);
CREATE INDEX energy_runs_by_simulated ON energy_runs (simulated, seq);
)sql";

std::string Substituted(const SqlDialect& d, const std::string& sql) {
  return absl::StrReplaceAll(sql, {{"$BIGINT", d.bigint_type},
                                   {"$BLOB", d.blob_type},
                                   {"$SERIAL", d.serial_key},
                                   {"$SORTED", d.sorted_text}});
}

absl::Status EnergyRunsSchema(Tx& tx) {
  return tx.Script("creating energy_runs",
                   Substituted(tx.dialect(), kEnergyRunsTable));
}

// Legacy + 3: the GPUs of one node a probe needs (GpusNeeded), a column the
// claim reads. Every probe stored before multi-GPU probes needs one.
absl::Status ProbeGpusSchema(Tx& tx) {
  return tx.Script("adding probes.gpus",
                   "ALTER TABLE probes ADD COLUMN gpus integer NOT NULL "
                   "DEFAULT 1");
}

// The schema as this build's migrations leave it, for a new database.
absl::Status CreateSchemaBeforeEnergyRuns(Tx& tx) {
  const SqlDialect& d = tx.dialect();
  return tx.Script("creating the schema", absl::StrReplaceAll(
                                              R"sql(
CREATE TABLE factor_sets (
  seq $BIGINT PRIMARY KEY,
  version text NOT NULL UNIQUE,
  created_unix $BIGINT NOT NULL,
  body $BLOB NOT NULL
);
CREATE TABLE current_factor_set (
  id integer PRIMARY KEY CHECK (id = 1),
  version text NOT NULL REFERENCES factor_sets(version)
);
CREATE TABLE current_history (
  seq $SERIAL,
  version text NOT NULL REFERENCES factor_sets(version),
  changed_unix $BIGINT NOT NULL
);
CREATE TABLE measured_runs (
  seq $SERIAL,
  template text NOT NULL,
  gpu text NOT NULL,
  batch $BIGINT NOT NULL,
  body $BLOB NOT NULL,
  body_hash $BLOB NOT NULL
);
CREATE UNIQUE INDEX measured_runs_by_hash ON measured_runs (body_hash);
CREATE TABLE energy_curve_sets (
  seq $BIGINT PRIMARY KEY,
  version text NOT NULL UNIQUE,
  created_unix $BIGINT NOT NULL,
  body $BLOB NOT NULL
);
CREATE TABLE current_energy_curve_set (
  id integer PRIMARY KEY CHECK (id = 1),
  version text NOT NULL REFERENCES energy_curve_sets(version)
);
CREATE TABLE energy_current_history (
  seq $SERIAL,
  version text NOT NULL REFERENCES energy_curve_sets(version),
  changed_unix $BIGINT NOT NULL
);
CREATE TABLE density_runs (
  id $SORTED PRIMARY KEY,
  arch text NOT NULL,
  dtype text NOT NULL,
  mode text NOT NULL,
  body $BLOB NOT NULL
);
CREATE TABLE probes (
  seq $BIGINT PRIMARY KEY,
  id text NOT NULL UNIQUE,
  state integer NOT NULL,
  gpu text NOT NULL,
  worker_pin text NOT NULL,
  executor text NOT NULL,
  assignment_id text NOT NULL DEFAULT '',
  lease_until_ms $BIGINT NOT NULL DEFAULT 0,
  body $BLOB NOT NULL,
  background integer NOT NULL DEFAULT 0,
  expires_at_ms $BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX probes_by_state ON probes (state, seq);
CREATE INDEX probes_by_assignment ON probes (assignment_id);
CREATE INDEX probes_by_expiry ON probes (expires_at_ms)
  WHERE expires_at_ms > 0;
CREATE TABLE probe_results (
  seq $SERIAL,
  key $SORTED NOT NULL UNIQUE,
  probe_id $SORTED NOT NULL,
  run_seq $BIGINT,
  run_fields integer NOT NULL DEFAULT 0,
  body $BLOB NOT NULL
);
CREATE INDEX probe_results_by_probe ON probe_results (probe_id, seq);
CREATE TABLE workers (
  id $SORTED PRIMARY KEY,
  body $BLOB NOT NULL
);
CREATE TABLE autotune_cache (
  id $SORTED PRIMARY KEY,
  key_bytes $BLOB NOT NULL,
  created_unix $BIGINT NOT NULL,
  body $BLOB NOT NULL
);
)sql",
                                              {{"$BIGINT", d.bigint_type},
                                               {"$BLOB", d.blob_type},
                                               {"$SERIAL", d.serial_key},
                                               {"$SORTED", d.sorted_text}}));
}

absl::Status CreateSchema(Tx& tx) {
  RETURN_IF_ERROR(CreateSchemaBeforeEnergyRuns(tx));
  RETURN_IF_ERROR(EnergyRunsSchema(tx));
  return ProbeGpusSchema(tx);
}

// Migrations after the legacy version: migration i brings a database to
// legacy version + i + 1.
using Migration = absl::Status (*)(Tx&);
const Migration kMigrations[] = {&SharedSchema, &EnergyRunsSchema,
                                 &ProbeGpusSchema};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) ==
              kSqlStoreMigrations);

}  // namespace

SqlStore::SqlStore(const SqlDialect& dialect,
                   std::unique_ptr<ConnectionPool> writers,
                   std::unique_ptr<ConnectionPool> readers)
    : dialect_(dialect),
      writers_(std::move(writers)),
      readers_(std::move(readers)) {}

void SqlStore::SetReaders(std::unique_ptr<ConnectionPool> readers) {
  readers_ = std::move(readers);
}

absl::Status SqlStore::Run(ConnectionPool& pool, const char* begin,
                           const std::function<absl::Status(Tx&)>& body) {
  ASSIGN_OR_RETURN(ConnectionPool::Lease connection, pool.Acquire());
  for (int attempt = 0;; ++attempt) {
    if (connection->Lost()) RETURN_IF_ERROR(connection->Reconnect());
    connection->ResetAnswered();
    Tx tx(*connection, dialect_);
    absl::Status status = tx.Script("beginning a transaction", begin);
    if (status.ok()) status = body(tx);
    if (status.ok()) status = tx.Script("committing", "COMMIT");
    if (!status.ok() && !connection->Lost()) {
      (void)tx.Script("rolling back", "ROLLBACK");
    }
    // A connection found dead at the first statement ran nothing: safe to
    // reconnect and run the unit again, once.
    const bool dropped_before_start =
        !status.ok() && connection->Lost() && connection->answered() == 0;
    if (!dropped_before_start || attempt == 1) return status;
  }
}

absl::Status SqlStore::Write(const std::function<absl::Status(Tx&)>& body) {
  return Run(*writers_, dialect_.begin_write, body);
}

absl::Status SqlStore::Read(const std::function<absl::Status(Tx&)>& body) {
  return Run(readers_ ? *readers_ : *writers_, dialect_.begin_read, body);
}

absl::Status SqlStore::Migrate(const std::string& where) {
  const int known = dialect_.legacy_version + kSqlStoreMigrations;
  return Write([&](Tx& tx) -> absl::Status {
    // Replicas starting together wait here; the first migrates, the others
    // then find the schema current.
    if (dialect_.migration_lock[0] != '\0') {
      RETURN_IF_ERROR(
          tx.Exec("locking the schema for migration", dialect_.migration_lock));
    }
    if (dialect_.create_version_table[0] != '\0') {
      RETURN_IF_ERROR(
          tx.Script("creating schema_version", dialect_.create_version_table));
    }
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading schema version", dialect_.read_version));
    const int64_t version = rows.Int(0, 0);
    if (version > known) {
      // The rollback leaves the database as it was.
      return absl::FailedPreconditionError(absl::StrCat(
          "database schema version ", version, " (", where,
          ") is newer than this planner's ", known, "; upgrade the planner"));
    }
    if (version == 0) {
      // A new database: the schema as it is now, each version recorded.
      RETURN_IF_ERROR(CreateSchema(tx));
      for (int v = 1; v <= known; ++v) {
        RETURN_IF_ERROR(tx.Script("recording the schema version",
                                  dialect_.write_version(v)));
      }
      return absl::OkStatus();
    }
    if (version < dialect_.legacy_version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "database schema version ", version, " (", where,
          ") is older than the oldest this planner upgrades, ",
          dialect_.legacy_version,
          "; open it once with the planner of the previous release"));
    }
    for (int64_t v = version; v < known; ++v) {
      RETURN_IF_ERROR(kMigrations[v - dialect_.legacy_version](tx));
      RETURN_IF_ERROR(tx.Script("recording the schema version",
                                dialect_.write_version(v + 1)));
    }
    return absl::OkStatus();
  });
}

// --- Factor sets ---

absl::StatusOr<std::optional<v1::FactorSet>> SqlStore::CurrentFactorSet() {
  std::optional<v1::FactorSet> current;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading current factor set",
                              "SELECT f.body FROM factor_sets f JOIN "
                              "current_factor_set c ON c.version = f.version "
                              "WHERE c.id = 1"));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(current,
                     Parse<v1::FactorSet>(rows.Bytes(0, 0), "factor set"));
    return absl::OkStatus();
  }));
  return current;
}

absl::StatusOr<v1::FactorSet> SqlStore::AddFactorSet(v1::FactorSet set,
                                                     bool make_current) {
  if (set.created_unix() == 0) set.set_created_unix(std::time(nullptr));
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        const std::string version,
        InsertVersioned(tx, "factor_sets", "fs-", set.created_unix(),
                        [&](const std::string& v) {
                          set.set_version(v);
                          return DeterministicBytes(set);
                        }));
    if (!make_current) return absl::OkStatus();
    return MakeCurrent(tx, "factor set", "factor_sets", "current_factor_set",
                       "current_history", version, /*check=*/false);
  }));
  return set;
}

absl::Status SqlStore::SetCurrentFactorSet(const std::string& version) {
  return Write([&](Tx& tx) {
    return MakeCurrent(tx, "factor set", "factor_sets", "current_factor_set",
                       "current_history", version, /*check=*/true);
  });
}

absl::StatusOr<std::vector<std::string>> SqlStore::CurrentHistory() {
  std::vector<std::string> versions;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(versions, History(tx, "current_history"));
    return absl::OkStatus();
  }));
  return versions;
}

absl::StatusOr<v1::FactorSet> SqlStore::GetFactorSet(
    const std::string& version) {
  v1::FactorSet set;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading factor set",
                              "SELECT body FROM factor_sets WHERE version = ?",
                              SqlParams().Text(version)));
    if (rows.empty()) return NotStored("factor set", version);
    ASSIGN_OR_RETURN(set, Parse<v1::FactorSet>(rows.Bytes(0, 0), "factor set"));
    return absl::OkStatus();
  }));
  return set;
}

absl::StatusOr<Page<v1::FactorSet>> SqlStore::ListFactorSets(
    const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  std::vector<std::pair<std::string, v1::FactorSet>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing factor sets",
                 "SELECT seq, body FROM factor_sets WHERE seq > ? "
                 "ORDER BY seq LIMIT ?",
                 SqlParams().Int(after).Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::FactorSet set,
                       Parse<v1::FactorSet>(rows.Bytes(i, 1), "factor set"));
      entries.emplace_back(absl::StrCat(rows.Int(i, 0)), std::move(set));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

// --- Measured runs ---

absl::StatusOr<int64_t> SqlStore::AddRuns(
    const std::vector<v1::MeasuredRun>& runs) {
  int64_t count = 0;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    for (const v1::MeasuredRun& run : runs) {
      RETURN_IF_ERROR(InsertRun(tx, run).status());
    }
    ASSIGN_OR_RETURN(count, Count(tx, "measured_runs"));
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<int64_t> SqlStore::CountRuns() {
  int64_t count = 0;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(count, Count(tx, "measured_runs"));
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<v1::MeasuredRun>> SqlStore::ListRuns() {
  std::vector<v1::MeasuredRun> runs;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("listing runs",
                              "SELECT body FROM measured_runs ORDER BY seq"));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(runs.emplace_back(),
                       Parse<v1::MeasuredRun>(rows.Bytes(i, 0), "run"));
    }
    return absl::OkStatus();
  }));
  return runs;
}

// --- Energy runs ---

absl::StatusOr<bool> SqlStore::AddEnergyRun(const std::string& key,
                                            const v1::EnergyRun& run) {
  bool added = false;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("finding an energy run",
                              "SELECT 1 FROM energy_runs WHERE key = ?",
                              SqlParams().Text(key)));
    if (!rows.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(tx.Exec(
        "storing an energy run",
        "INSERT INTO energy_runs (key, gpu, arch, simulated, body) VALUES "
        "(?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
        SqlParams()
            .Text(key)
            .Text(run.gpu())
            .Text(run.arch())
            .Int(run.simulated() ? 1 : 0)
            .Bytes(DeterministicBytes(run))));
    added = true;
    return absl::OkStatus();
  }));
  return added;
}

absl::StatusOr<std::vector<v1::EnergyRun>> SqlStore::ListEnergyRuns(
    bool include_simulated, int limit) {
  std::vector<v1::EnergyRun> runs;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing energy runs",
                 "SELECT body FROM energy_runs WHERE simulated <= ? "
                 "ORDER BY seq LIMIT ?",
                 SqlParams().Int(include_simulated ? 1 : 0).Int(limit)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(runs.emplace_back(),
                       Parse<v1::EnergyRun>(rows.Bytes(i, 0), "energy run"));
    }
    return absl::OkStatus();
  }));
  return runs;
}

absl::StatusOr<std::pair<int64_t, int64_t>> SqlStore::CountEnergyRuns() {
  std::pair<int64_t, int64_t> counts;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("counting energy runs",
                 "SELECT COUNT(*), COALESCE(SUM(simulated), 0) FROM "
                 "energy_runs"));
    counts = {rows.Int(0, 0), rows.Int(0, 1)};
    return absl::OkStatus();
  }));
  return counts;
}

// --- Energy curve sets ---

absl::StatusOr<v1::EnergyCurveSet> SqlStore::AddEnergyCurveSet(
    v1::EnergyCurveSet set, bool make_current) {
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        const std::string version,
        InsertVersioned(tx, "energy_curve_sets", "ec-", std::time(nullptr),
                        [&](const std::string& v) {
                          set.set_version(v);
                          return DeterministicBytes(set);
                        }));
    if (!make_current) return absl::OkStatus();
    return MakeCurrent(tx, "energy curve set", "energy_curve_sets",
                       "current_energy_curve_set", "energy_current_history",
                       version, /*check=*/false);
  }));
  return set;
}

absl::Status SqlStore::SetCurrentEnergyCurveSet(const std::string& version) {
  return Write([&](Tx& tx) {
    return MakeCurrent(tx, "energy curve set", "energy_curve_sets",
                       "current_energy_curve_set", "energy_current_history",
                       version, /*check=*/true);
  });
}

absl::StatusOr<std::vector<std::string>> SqlStore::EnergyCurveHistory() {
  std::vector<std::string> versions;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(versions, History(tx, "energy_current_history"));
    return absl::OkStatus();
  }));
  return versions;
}

absl::StatusOr<v1::EnergyCurveSet> SqlStore::GetEnergyCurveSet(
    const std::string& version) {
  v1::EnergyCurveSet set;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("reading energy curves",
                 "SELECT body FROM energy_curve_sets WHERE version = ?",
                 SqlParams().Text(version)));
    if (rows.empty()) return NotStored("energy curve set", version);
    ASSIGN_OR_RETURN(
        set, Parse<v1::EnergyCurveSet>(rows.Bytes(0, 0), "energy curves"));
    return absl::OkStatus();
  }));
  return set;
}

absl::StatusOr<std::vector<v1::EnergyCurveSet>> SqlStore::ListEnergyCurveSets(
    const std::string& after_version, int limit) {
  std::vector<v1::EnergyCurveSet> sets;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    int64_t after_seq = 0;
    if (!after_version.empty()) {
      ASSIGN_OR_RETURN(
          SqlRows found,
          tx.Query("listing energy curves",
                   "SELECT seq FROM energy_curve_sets WHERE version = ?",
                   SqlParams().Text(after_version)));
      if (found.empty()) return NotStored("energy curve set", after_version);
      after_seq = found.Int(0, 0);
    }
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("listing energy curves",
                              "SELECT body FROM energy_curve_sets WHERE seq > "
                              "? ORDER BY seq LIMIT ?",
                              SqlParams().Int(after_seq).Int(limit)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          sets.emplace_back(),
          Parse<v1::EnergyCurveSet>(rows.Bytes(i, 0), "energy curves"));
    }
    return absl::OkStatus();
  }));
  return sets;
}

absl::StatusOr<std::optional<v1::EnergyCurveSet>>
SqlStore::CurrentEnergyCurveSet() {
  std::optional<v1::EnergyCurveSet> current;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading energy curves",
                              "SELECT e.body FROM energy_curve_sets e JOIN "
                              "current_energy_curve_set c ON c.version = "
                              "e.version"));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        current, Parse<v1::EnergyCurveSet>(rows.Bytes(0, 0), "energy curves"));
    return absl::OkStatus();
  }));
  return current;
}

// --- Density runs ---

absl::StatusOr<int64_t> SqlStore::AddDensityRuns(
    const std::vector<v1::DensityRawRun>& runs) {
  int64_t count = 0;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    for (const v1::DensityRawRun& run : runs) {
      RETURN_IF_ERROR(tx.Exec(
          "storing density run",
          "INSERT INTO density_runs (id, arch, dtype, mode, body) VALUES "
          "(?, ?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET arch = "
          "excluded.arch, dtype = excluded.dtype, mode = excluded.mode, "
          "body = excluded.body",
          SqlParams()
              .Text(run.id())
              .Text(run.arch())
              .Text(run.dtype())
              .Text(run.mode())
              .Bytes(DeterministicBytes(run))));
    }
    ASSIGN_OR_RETURN(count, Count(tx, "density_runs"));
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<v1::DensityRawRun>> SqlStore::ListDensityRuns(
    const std::string& arch, const std::string& dtype,
    const std::string& mode) {
  std::vector<v1::DensityRawRun> runs;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing density runs",
                 "SELECT body FROM density_runs WHERE (? = '' OR arch = ?) "
                 "AND (? = '' OR dtype = ?) AND (? = '' OR mode = ?) "
                 "ORDER BY id",
                 SqlParams()
                     .Text(arch)
                     .Text(arch)
                     .Text(dtype)
                     .Text(dtype)
                     .Text(mode)
                     .Text(mode)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          runs.emplace_back(),
          Parse<v1::DensityRawRun>(rows.Bytes(i, 0), "density run"));
    }
    return absl::OkStatus();
  }));
  return runs;
}

// --- Probe queue ---

absl::StatusOr<v1::Probe> SqlStore::AddProbe(v1::Probe probe) {
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t seq, NextSeq(tx, "probes"));
    probe.set_id(absl::StrCat("p-", seq));
    probe.set_state(v1::Probe::QUEUED);
    return tx.Exec("storing probe",
                   "INSERT INTO probes (seq, id, state, gpu, worker_pin, "
                   "executor, body, background, expires_at_ms, gpus) VALUES "
                   "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   SqlParams()
                       .Int(seq)
                       .Text(probe.id())
                       .Int(probe.state())
                       .Text(probe.gpu())
                       .Text(probe.request().worker())
                       .Text(probe.request().executor())
                       .Bytes(ProbeBody(probe))
                       .Int(probe.request().learn_key().empty() ? 0 : 1)
                       .Int(ExpiryDeadlineMs(probe))
                       .Int(GpusNeeded(probe)));
  }));
  probe.clear_results();
  return probe;
}

absl::StatusOr<v1::Probe> SqlStore::GetProbe(const std::string& id) {
  v1::Probe probe;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, id, /*lock=*/false));
    return absl::OkStatus();
  }));
  return probe;
}

absl::StatusOr<Page<v1::Probe>> SqlStore::ListProbes(v1::Probe::State state,
                                                     const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t before, SeqAfter(page.after));
  std::vector<std::pair<std::string, v1::Probe>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    // Newest first: the next page holds the probes before the last one.
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing probes",
                 "SELECT seq, body FROM probes WHERE (? = 0 OR state = ?) "
                 "AND (? = 0 OR seq < ?) ORDER BY seq DESC LIMIT ?",
                 SqlParams().Int(state).Int(state).Int(before).Int(before).Int(
                     int64_t{page.max_entries} + 1)));
    ASSIGN_OR_RETURN(std::vector<v1::Probe> probes,
                     ProbesFromRows(tx, rows, 1));
    for (int i = 0; i < rows.size(); ++i) {
      entries.emplace_back(absl::StrCat(rows.Int(i, 0)), std::move(probes[i]));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

absl::StatusOr<std::optional<v1::Probe>> SqlStore::ClaimProbe(
    const std::string& worker, const std::vector<std::string>& gpus,
    const std::vector<std::string>& executors, int64_t now_ms,
    int64_t lease_ms) {
  std::optional<v1::Probe> claimed;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    claimed.reset();
    // The claim rule: the oldest queued probe this worker can run (pinned
    // to it with no more GPUs than its largest kind holds, or unpinned and
    // asking for one of its kinds with no more GPUs than it has of that
    // kind; any executor or one of its executors), learning probes only
    // behind every other. A worker runs one assignment at a time, so an
    // idle worker's GPUs are all free. No claimer holds it right now: its
    // row stays locked until the commit.
    std::map<std::string, int64_t> count;  // GPUs per kind, ordered
    int64_t largest = 1;                   // a pinned probe's bound
    for (const std::string& gpu : gpus) {
      largest = std::max(largest, ++count[gpu]);
    }
    SqlParams params;
    params.Int(v1::Probe::QUEUED).Text(worker).Int(largest);
    std::string kinds;
    for (const auto& [kind, n] : count) {
      absl::StrAppend(&kinds, kinds.empty() ? "" : " OR ",
                      "(gpu = ? AND gpus <= ?)");
      params.Text(kind).Int(n);
    }
    if (kinds.empty()) kinds = "1 = 0";
    for (const std::string& executor : executors) params.Text(executor);
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query(
            "claiming probe",
            absl::StrCat("SELECT id FROM probes WHERE state = ? AND "
                         "(CASE WHEN worker_pin <> '' THEN (worker_pin = "
                         "? AND gpus <= ?) ELSE (",
                         kinds, ") END) AND (executor = '' OR executor IN (",
                         Placeholders(executors.size()),
                         ")) ORDER BY background, seq LIMIT 1",
                         tx.dialect().skip_locked),
            params));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(v1::Probe probe,
                     LoadProbe(tx, rows.Bytes(0, 0), /*lock=*/false));
    MarkClaimed(&probe, worker, now_ms);
    RETURN_IF_ERROR(UpdateProbe(tx, probe, now_ms + lease_ms));
    claimed = std::move(probe);
    return absl::OkStatus();
  }));
  return claimed;
}

absl::Status SqlStore::RenewLease(const std::string& assignment_id,
                                  int64_t until_ms) {
  return Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("renewing lease",
                 "UPDATE probes SET lease_until_ms = CASE WHEN "
                 "lease_until_ms > ? THEN lease_until_ms ELSE ? END "
                 "WHERE assignment_id = ? AND state = ?",
                 SqlParams()
                     .Int(until_ms)
                     .Int(until_ms)
                     .Text(assignment_id)
                     .Int(v1::Probe::RUNNING)));
    if (rows.changed() == 0) {
      return absl::NotFoundError(absl::StrCat(
          "assignment '", assignment_id.substr(0, 64), "' is not running"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::string>> SqlStore::RequeueExpired(
    int64_t now_ms) {
  static constexpr char kExpired[] =
      "SELECT id FROM probes WHERE state = ? AND lease_until_ms < ? "
      "ORDER BY seq LIMIT 1000";
  std::vector<std::string> requeued;
  // Read first: the write transaction below runs only when a lease ran
  // out, not on every dispatcher pass.
  bool any = false;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("finding expired leases", kExpired,
                              SqlParams().Int(v1::Probe::RUNNING).Int(now_ms)));
    any = !rows.empty();
    return absl::OkStatus();
  }));
  if (!any) return requeued;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    requeued.clear();
    // A probe another planner is finishing right now is skipped, not
    // waited for; the lock re-checks the lease on the row as it is now.
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("finding expired leases",
                              absl::StrCat(kExpired, tx.dialect().skip_locked),
                              SqlParams().Int(v1::Probe::RUNNING).Int(now_ms)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::Probe probe,
                       LoadProbe(tx, rows.Bytes(i, 0), /*lock=*/false));
      MarkRequeued(&probe, now_ms);
      RETURN_IF_ERROR(UpdateProbe(tx, probe, 0));
      requeued.push_back(probe.id());
    }
    return absl::OkStatus();
  }));
  return requeued;
}

absl::StatusOr<std::vector<v1::Probe>> SqlStore::ListExpiredProbes(
    int64_t now_ms, int limit) {
  std::vector<v1::Probe> expired;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("finding expired probes",
                 "SELECT body FROM probes WHERE expires_at_ms > 0 AND "
                 "expires_at_ms <= ? AND state = ? ORDER BY expires_at_ms, "
                 "seq LIMIT ?",
                 SqlParams().Int(now_ms).Int(v1::Probe::QUEUED).Int(limit)));
    ASSIGN_OR_RETURN(expired, ProbesFromRows(tx, rows, 0));
    return absl::OkStatus();
  }));
  return expired;
}

absl::StatusOr<v1::Probe> SqlStore::ExpireProbe(const std::string& id,
                                                int64_t now_ms,
                                                const std::string& error) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    // Locked: a claim by another planner came first (the probe is RUNNING
    // and stays so) or skips this row and then finds it FAILED.
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, id, /*lock=*/true));
    if (!MarkExpired(&probe, now_ms, error)) return absl::OkStatus();
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<bool> SqlStore::RecordProbeResult(
    const std::string& probe_id, const std::string& assignment_id,
    const std::string& worker, const std::string& key,
    const v1::BatchResult& result, const std::optional<v1::MeasuredRun>& run,
    v1::Probe* updated) {
  bool inserted = false;
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    inserted = false;
    // The probe's row is locked first, so results another planner stores
    // for the same probe at the same time are appended, not lost.
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, probe_id, /*lock=*/true));
    // A key stored before is a duplicate even once the lease is gone: a
    // re-sent result whose acknowledgement was lost.
    ASSIGN_OR_RETURN(SqlRows seen,
                     tx.Query("reading probe results",
                              "SELECT 1 FROM probe_results WHERE key = ?",
                              SqlParams().Text(key)));
    if (!seen.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(CheckResultLease(probe, assignment_id, worker));
    if (HasResultFor(probe, result)) return absl::OkStatus();
    SqlParams params;
    params.Text(key).Text(probe_id);
    if (run.has_value()) {
      ASSIGN_OR_RETURN(const int64_t run_seq, InsertRun(tx, *run));
      int64_t fields = 0;
      const v1::BatchResult rest = SplitResult(result, *run, &fields);
      params.Int(run_seq).Int(fields).Bytes(DeterministicBytes(rest));
    } else {
      params.Null().Int(0).Bytes(DeterministicBytes(result));
    }
    ASSIGN_OR_RETURN(SqlRows stored,
                     tx.Query("storing probe result",
                              "INSERT INTO probe_results (key, probe_id, "
                              "run_seq, run_fields, body) VALUES "
                              "(?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                              params));
    inserted = stored.changed() == 1;
    if (inserted) *probe.add_results() = result;
    return absl::OkStatus();
  }));
  if (updated != nullptr) *updated = std::move(probe);
  return inserted;
}

absl::StatusOr<v1::Probe> SqlStore::FinishAssignment(
    const std::string& probe_id, const std::string& assignment_id,
    v1::Probe::State state, const std::string& error,
    const std::string& details_json, bool requeue) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, probe_id, /*lock=*/true));
    if (!MarkFinished(&probe, assignment_id, state, error, details_json,
                      requeue)) {
      return absl::OkStatus();  // that assignment is no longer the probe's
    }
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqlStore::HandBack(const std::string& probe_id,
                                             const std::string& assignment_id,
                                             const std::string& worker,
                                             uint32_t max_handbacks) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, probe_id, /*lock=*/true));
    RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
    MarkHandedBack(&probe, max_handbacks);
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqlStore::CancelProbe(const std::string& id) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, id, /*lock=*/true));
    if (!MarkCancelled(&probe)) return absl::OkStatus();  // already final
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>>
SqlStore::CountProbes() {
  std::vector<std::pair<v1::Probe::State, int64_t>> counts;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("counting probes",
                              "SELECT state, COUNT(*) FROM probes GROUP BY "
                              "state ORDER BY state"));
    for (int i = 0; i < rows.size(); ++i) {
      const int64_t state = rows.Int(i, 0);
      if (!v1::Probe::State_IsValid(static_cast<int>(state))) continue;
      counts.emplace_back(static_cast<v1::Probe::State>(state), rows.Int(i, 1));
    }
    return absl::OkStatus();
  }));
  return counts;
}

// --- Workers ---

absl::Status SqlStore::PutWorker(const v1::WorkerStatus& worker) {
  return Write([&](Tx& tx) {
    return tx.Exec("storing worker",
                   "INSERT INTO workers (id, body) VALUES (?, ?) ON CONFLICT "
                   "(id) DO UPDATE SET body = excluded.body",
                   SqlParams()
                       .Text(worker.hello().worker_id())
                       .Bytes(DeterministicBytes(worker)));
  });
}

absl::StatusOr<Page<v1::WorkerStatus>> SqlStore::ListWorkers(
    const PageSpec& page) {
  std::vector<std::pair<std::string, v1::WorkerStatus>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing workers",
                 "SELECT id, body FROM workers WHERE (? = 0 OR id > ?) "
                 "ORDER BY id LIMIT ?",
                 SqlParams()
                     .Int(page.after.empty() ? 0 : 1)
                     .Text(page.after)
                     .Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::WorkerStatus worker,
                       Parse<v1::WorkerStatus>(rows.Bytes(i, 1), "worker"));
      entries.emplace_back(rows.Bytes(i, 0), std::move(worker));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

// --- Autotune cache ---

absl::StatusOr<bool> SqlStore::PutAutotuneRecord(
    const std::string& id, const std::string& key_bytes,
    const v1::AutotuneRecord& record) {
  bool replaced = false;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows deleted,
                     tx.Query("storing autotune record",
                              "DELETE FROM autotune_cache WHERE id = ?",
                              SqlParams().Text(id)));
    replaced = deleted.changed() > 0;
    // ON CONFLICT: another planner may store the same id concurrently.
    return tx.Exec("storing autotune record",
                   "INSERT INTO autotune_cache (id, key_bytes, created_unix, "
                   "body) VALUES (?, ?, ?, ?) ON CONFLICT (id) DO UPDATE SET "
                   "key_bytes = excluded.key_bytes, created_unix = "
                   "excluded.created_unix, body = excluded.body",
                   SqlParams()
                       .Text(id)
                       .Bytes(key_bytes)
                       .Int(std::time(nullptr))
                       .Bytes(DeterministicBytes(record)));
  }));
  return replaced;
}

absl::StatusOr<std::optional<v1::AutotuneRecord>> SqlStore::FindAutotuneRecord(
    const std::string& id, const std::string& key_bytes) {
  std::optional<v1::AutotuneRecord> found;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("reading autotune cache",
                 "SELECT key_bytes, body FROM autotune_cache WHERE id = ?",
                 SqlParams().Text(id)));
    // Same id but another key (a hash collision) is a miss.
    if (rows.empty() || rows.Bytes(0, 0) != key_bytes) {
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(
        found, Parse<v1::AutotuneRecord>(rows.Bytes(0, 1), "autotune record"));
    return absl::OkStatus();
  }));
  return found;
}

absl::StatusOr<Page<v1::AutotuneCacheEntry>> SqlStore::ListAutotuneRecords(
    const PageSpec& page) {
  int64_t created = 0;
  std::string id;
  if (!page.after.empty()) {
    RETURN_IF_ERROR(ParseCreatedIdKey(page.after, &created, &id));
  }
  std::vector<std::pair<std::string, v1::AutotuneCacheEntry>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing autotune cache",
                 "SELECT id, created_unix, body FROM autotune_cache WHERE "
                 "(? = 0 OR created_unix > ? OR (created_unix = ? AND id > ?)) "
                 "ORDER BY created_unix, id LIMIT ?",
                 SqlParams()
                     .Int(page.after.empty() ? 0 : 1)
                     .Int(created)
                     .Int(created)
                     .Text(id)
                     .Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      v1::AutotuneCacheEntry entry;
      entry.set_id(rows.Bytes(i, 0));
      entry.set_created_unix(rows.Int(i, 1));
      ASSIGN_OR_RETURN(
          *entry.mutable_record(),
          Parse<v1::AutotuneRecord>(rows.Bytes(i, 2), "autotune record"));
      std::string key = CreatedIdKey(entry.created_unix(), entry.id());
      entries.emplace_back(std::move(key), std::move(entry));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

absl::Status SqlStore::DropAutotuneRecord(const std::string& id,
                                          bool measured_too) {
  return Write([&](Tx& tx) -> absl::Status {
    const auto not_stored = [&] {
      return absl::NotFoundError(absl::StrCat(
          "autotune cache entry '", id.substr(0, 64),
          "' is not stored; headroom microbatch cache list shows the ids"));
    };
    if (!measured_too) {
      ASSIGN_OR_RETURN(SqlRows found,
                       tx.Query("reading autotune cache",
                                "SELECT body FROM autotune_cache WHERE id = ?",
                                SqlParams().Text(id)));
      if (found.empty()) return not_stored();
      ASSIGN_OR_RETURN(
          v1::AutotuneRecord record,
          Parse<v1::AutotuneRecord>(found.Bytes(0, 0), "autotune record"));
      if (!record.measured_by_probe().empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat("autotune cache entry '", id.substr(0, 64),
                         "' was measured by probe ", record.measured_by_probe(),
                         " on a worker; only an admin may drop it"));
      }
    }
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("dropping autotune record",
                              "DELETE FROM autotune_cache WHERE id = ?",
                              SqlParams().Text(id)));
    if (rows.changed() == 0) return not_stored();
    return absl::OkStatus();
  });
}

}  // namespace headroom
