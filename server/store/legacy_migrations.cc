#include "server/store/legacy_migrations.h"

namespace headroom {

// SQLite's schema history up to version 9, as shipped (JSON text bodies).
const char* const kLegacySqliteMigrations[] = {
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
static_assert(sizeof(kLegacySqliteMigrations) /
                  sizeof(kLegacySqliteMigrations[0]) ==
              kLegacySqliteVersion);

// PostgreSQL's schema history up to version 4, as shipped (binary bodies,
// measured runs unique by sha256(body)).
const char* const kLegacyPostgresMigrations[] = {
    R"sql(
CREATE TABLE factor_sets (
  seq bigint PRIMARY KEY,
  version text NOT NULL UNIQUE,
  created_unix bigint NOT NULL,
  body bytea NOT NULL
);
CREATE TABLE current_factor_set (
  id integer PRIMARY KEY CHECK (id = 1),
  version text NOT NULL REFERENCES factor_sets(version)
);
CREATE TABLE current_history (
  seq bigserial PRIMARY KEY,
  version text NOT NULL REFERENCES factor_sets(version),
  changed_unix bigint NOT NULL
);
CREATE TABLE measured_runs (
  seq bigserial PRIMARY KEY,
  template text NOT NULL,
  gpu text NOT NULL,
  batch bigint NOT NULL,
  body bytea NOT NULL
);
-- An identical run is stored once; the hash keeps index entries small.
CREATE UNIQUE INDEX measured_runs_body ON measured_runs (sha256(body));
CREATE TABLE energy_curve_sets (
  seq bigint PRIMARY KEY,
  version text NOT NULL UNIQUE,
  created_unix bigint NOT NULL,
  body bytea NOT NULL
);
CREATE TABLE current_energy_curve_set (
  id integer PRIMARY KEY CHECK (id = 1),
  version text NOT NULL REFERENCES energy_curve_sets(version)
);
CREATE TABLE density_runs (
  id text COLLATE "C" PRIMARY KEY,
  arch text NOT NULL,
  dtype text NOT NULL,
  mode text NOT NULL,
  body bytea NOT NULL
);
CREATE TABLE probes (
  seq bigint PRIMARY KEY,
  id text NOT NULL UNIQUE,
  state integer NOT NULL,
  gpu text NOT NULL,
  worker_pin text NOT NULL,
  executor text NOT NULL,
  assignment_id text NOT NULL DEFAULT '',
  lease_until_ms bigint NOT NULL DEFAULT 0,
  body bytea NOT NULL
);
CREATE INDEX probes_by_state ON probes (state, seq);
CREATE INDEX probes_by_assignment ON probes (assignment_id);
CREATE TABLE probe_results (
  key text PRIMARY KEY,
  probe_id text NOT NULL REFERENCES probes(id),
  body bytea NOT NULL
);
CREATE TABLE workers (
  id text COLLATE "C" PRIMARY KEY,
  body bytea NOT NULL
);
CREATE TABLE autotune_cache (
  id text COLLATE "C" PRIMARY KEY,
  key_bytes bytea NOT NULL,
  created_unix bigint NOT NULL,
  body bytea NOT NULL
);
)sql",
    // 2: learning probes (request.learn_key) wait behind operator probes.
    R"sql(
ALTER TABLE probes ADD COLUMN background integer NOT NULL DEFAULT 0;
)sql",
    // 3: every change of the current energy curve set, for rollback.
    R"sql(
CREATE TABLE energy_current_history (
  seq bigserial PRIMARY KEY,
  version text NOT NULL REFERENCES energy_curve_sets(version),
  changed_unix bigint NOT NULL
);
INSERT INTO energy_current_history (version, changed_unix)
  SELECT version, extract(epoch from now())::bigint
  FROM current_energy_curve_set;
)sql",
    // 4: queued probes fail once their expiry (request.expires_s) passes.
    R"sql(
ALTER TABLE probes ADD COLUMN expires_at_ms bigint NOT NULL DEFAULT 0;
CREATE INDEX probes_by_expiry ON probes (expires_at_ms)
  WHERE expires_at_ms > 0;
)sql",
};
static_assert(sizeof(kLegacyPostgresMigrations) /
                  sizeof(kLegacyPostgresMigrations[0]) ==
              kLegacyPostgresVersion);

}  // namespace headroom
