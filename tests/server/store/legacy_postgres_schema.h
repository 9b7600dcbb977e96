#ifndef HEADROOM_TESTS_SERVER_STORE_LEGACY_POSTGRES_SCHEMA_H_
#define HEADROOM_TESTS_SERVER_STORE_LEGACY_POSTGRES_SCHEMA_H_

// The PostgreSQL store's migrations as a72e992 shipped them (schema
// version 4, before SqlStore), kept verbatim so that a test can make a
// database as that build did and check that today's store upgrades it.
// Migration i brought the schema to version i+1.

namespace headroom {
namespace testing {

inline const char* const kLegacyPostgresMigrations[] = {
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

}  // namespace testing
}  // namespace headroom

#endif  // HEADROOM_TESTS_SERVER_STORE_LEGACY_POSTGRES_SCHEMA_H_
