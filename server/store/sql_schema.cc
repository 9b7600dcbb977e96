// The schema over SQL: created whole for a new database, or migrated
// from the backend's legacy version, the same migrations for both backends.

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/deterministic_bytes.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::BodyHash;
using sql::Parse;
using sql::ProbeBody;

namespace {

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

// Legacy JSON bodies (SQLite before SqlStore) as deterministic binary.
absl::Status ReencodeLegacyBodies(Tx& tx) {
  RETURN_IF_ERROR(ReencodeJson<v1::FactorSet>(tx, "factor_sets", "seq"));
  RETURN_IF_ERROR(
      ReencodeJson<v1::EnergyCurveSet>(tx, "energy_curve_sets", "seq"));
  RETURN_IF_ERROR(ReencodeJson<v1::DensityRawRun>(tx, "density_runs", "id"));
  RETURN_IF_ERROR(ReencodeJson<v1::WorkerStatus>(tx, "workers", "id"));
  RETURN_IF_ERROR(ReencodeJson<v1::AutotuneRecord>(tx, "autotune_cache", "id"));
  RETURN_IF_ERROR(ReencodeJson<v1::Probe>(tx, "probes", "seq"));
  RETURN_IF_ERROR(ReencodeJson<v1::MeasuredRun>(tx, "measured_runs", "seq"));
  return absl::OkStatus();
}

// Measured runs unique by a hash of their body: the column, each run's
// hash, and runs that were one run in binary dropped.
absl::Status HashRuns(Tx& tx) {
  const SqlDialect& d = tx.dialect();
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
  return absl::OkStatus();
}

// A probe's results in rows of their own (probe_results_v2 renamed), each
// keeping its legacy key where a legacy row matches it; the probe bodies
// without them.
absl::Status MoveProbeResults(Tx& tx) {
  const SqlDialect& d = tx.dialect();
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

// Legacy + 1: binary bodies everywhere; measured runs unique by a hash of
// their body; a probe's results in rows of their own, a measured result
// referring to its measured run instead of repeating it. The same tables
// as CreateSchema's.
absl::Status SharedSchema(Tx& tx) {
  if (tx.dialect().legacy_json_bodies) {
    RETURN_IF_ERROR(ReencodeLegacyBodies(tx));
  }
  RETURN_IF_ERROR(HashRuns(tx));
  return MoveProbeResults(tx);
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

}  // namespace headroom
