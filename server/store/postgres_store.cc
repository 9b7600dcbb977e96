#include "server/store/postgres_store.h"

#include <libpq-fe.h>

#include <cstring>
#include <ctime>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/core/common/status_macros.h"
#include "server/store/probe_transitions.h"

namespace headroom {
namespace {

// Migrations in order; migration i brings the schema to version i+1. Bodies
// are deterministically serialized protobufs; ids that order lists compare
// bytewise (COLLATE "C"), as SQLite's do.
const char* const kMigrations[] = {
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
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) ==
              kPostgresSchemaVersion);

// pg_advisory_xact_lock keys: one (64-bit) for migrations, and a class (the
// first of two 32-bit keys, a separate key space) for numbering a table.
constexpr int64_t kMigrationLock = 0x4865616472'6d31;  // "Headr" "m1"
constexpr int32_t kNumberingLockClass = 0x48656164;    // "Head"

std::string Serialize(const google::protobuf::MessageLite& message) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    // Identical runs must serialize identically to be stored once.
    out.SetSerializationDeterministic(true);
    message.SerializeToCodedStream(&out);
  }
  return bytes;
}

template <typename Message>
absl::StatusOr<Message> Parse(const std::string& bytes, const char* what) {
  Message message;
  if (!message.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("postgres: stored ", what,
                                            " does not parse (", bytes.size(),
                                            " bytes)"));
  }
  return message;
}

// A PostgreSQL text[] literal holding `items`.
std::string TextArray(const std::vector<std::string>& items) {
  std::string literal = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) literal += ',';
    literal += '"';
    for (const char c : items[i]) {
      if (c == '"' || c == '\\') literal += '\\';
      literal += c;
    }
    literal += '"';
  }
  return literal + "}";
}

// "host=.. port=.. dbname=.. user=.." from a URL or key=value string,
// never the password; "" when `url` does not parse.
std::string DescribeConnection(const std::string& url) {
  char* error = nullptr;
  PQconninfoOption* options = PQconninfoParse(url.c_str(), &error);
  PQfreemem(error);
  if (options == nullptr) return "";
  std::string host = "localhost", port = "5432", dbname, user;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (o->val == nullptr || o->val[0] == '\0') continue;
    const std::string keyword = o->keyword;
    if (keyword == "host") host = o->val;
    if (keyword == "hostaddr" && host == "localhost") host = o->val;
    if (keyword == "port") port = o->val;
    if (keyword == "dbname") dbname = o->val;
    if (keyword == "user") user = o->val;
  }
  PQconninfoFree(options);
  std::string where = absl::StrCat("host=", host, " port=", port);
  if (!dbname.empty()) absl::StrAppend(&where, " dbname=", dbname);
  if (!user.empty()) absl::StrAppend(&where, " user=", user);
  return where;
}

std::string TrimmedMessage(const char* message) {
  return std::string(absl::StripAsciiWhitespace(message ? message : ""));
}

// The error a failed statement stands for (`result` null: no reply at
// all): UNAVAILABLE when the connection is gone, ABORTED for a conflict
// with another transaction, INTERNAL otherwise.
absl::Status StatementError(PGconn* conn, const std::string& where,
                            const char* what, const PGresult* result) {
  std::string message =
      result
          ? TrimmedMessage(PQresultErrorField(result, PG_DIAG_MESSAGE_PRIMARY))
          : "";
  if (message.empty()) message = TrimmedMessage(PQerrorMessage(conn));
  const char* field =
      result ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  const std::string sqlstate = field ? field : "";
  const std::string text =
      absl::StrCat("postgres (", where, "): ", what, ": ", message);
  if (PQstatus(conn) != CONNECTION_OK || sqlstate.rfind("08", 0) == 0 ||
      sqlstate.rfind("57P", 0) == 0) {
    return absl::UnavailableError(text);
  }
  if (sqlstate == "40001" || sqlstate == "40P01") {
    return absl::AbortedError(text);
  }
  return absl::InternalError(text);
}

}  // namespace

namespace postgres_internal {

// Parameters of one statement: text unless Bytes (sent as binary).
class Params {
 public:
  Params& Text(std::string value) { return Add(std::move(value), 0); }
  Params& Int(int64_t value) { return Add(std::to_string(value), 0); }
  Params& Bytes(std::string value) { return Add(std::move(value), 1); }

  int size() const { return static_cast<int>(values_.size()); }
  // Arrays for PQexecParams, valid while this object lives unchanged.
  std::vector<const char*> Values() const {
    std::vector<const char*> values;
    for (const std::string& v : values_) values.push_back(v.c_str());
    return values;
  }
  std::vector<int> Lengths() const {
    std::vector<int> lengths;
    for (const std::string& v : values_)
      lengths.push_back(static_cast<int>(v.size()));
    return lengths;
  }
  const std::vector<int>& Formats() const { return formats_; }

 private:
  Params& Add(std::string value, int format) {
    values_.push_back(std::move(value));
    formats_.push_back(format);
    return *this;
  }
  std::deque<std::string> values_;
  std::vector<int> formats_;
};

// The rows a statement returned, in binary format; owns the PGresult.
class Rows {
 public:
  explicit Rows(PGresult* result) : result_(result, &PQclear) {}

  int size() const { return PQntuples(result_.get()); }
  bool empty() const { return size() == 0; }
  // Rows changed by an INSERT, UPDATE or DELETE.
  int64_t changed() const {
    const char* tuples = PQcmdTuples(result_.get());
    return tuples[0] == '\0' ? 0 : std::strtoll(tuples, nullptr, 10);
  }
  // A text or bytea value.
  std::string Bytes(int row, int column) const {
    return std::string(PQgetvalue(result_.get(), row, column),
                       PQgetlength(result_.get(), row, column));
  }
  // An integer value (smallint, integer or bigint; NULL is 0).
  int64_t Int(int row, int column) const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(
        PQgetvalue(result_.get(), row, column));
    const int length = PQgetlength(result_.get(), row, column);
    uint64_t value = 0;
    for (int i = 0; i < length; ++i) value = (value << 8) | bytes[i];
    // Sign-extend values narrower than 64 bits.
    if (length > 0 && length < 8 && (bytes[0] & 0x80)) {
      value |= ~uint64_t{0} << (8 * length);
    }
    return static_cast<int64_t>(value);
  }

 private:
  std::unique_ptr<PGresult, void (*)(PGresult*)> result_;
};

}  // namespace postgres_internal

absl::StatusOr<std::unique_ptr<PostgresStore>> PostgresStore::Open(
    const std::string& url) {
  const std::string where = DescribeConnection(url);
  if (where.empty()) {
    // The parse error may quote the URL, password included: not repeated.
    return absl::InvalidArgumentError(
        "PostgreSQL connection string does not parse; expected "
        "postgresql://user@host:port/dbname or host=.. dbname=..");
  }
  // Defaults first: the URL's own settings, expanded at "dbname", win.
  const char* const keywords[] = {"connect_timeout", "application_name",
                                  "dbname", nullptr};
  const char* const values[] = {"10", "headroom-planner", url.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) {
    return absl::ResourceExhaustedError("postgres: out of memory connecting");
  }
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = TrimmedMessage(PQerrorMessage(conn));
    PQfinish(conn);
    return absl::UnavailableError(
        absl::StrCat("cannot reach PostgreSQL at ", where, ": ", message));
  }
  // CREATE TABLE IF NOT EXISTS and friends would print notices to stderr.
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  std::unique_ptr<PostgresStore> store(new PostgresStore(conn, where));
  absl::MutexLock lock(&store->mu_);
  RETURN_IF_ERROR(store->Migrate());
  return store;
}

PostgresStore::~PostgresStore() {
  absl::MutexLock lock(&mu_);
  PQfinish(conn_);
}

absl::Status PostgresStore::RunLocked(
    const std::function<absl::Status()>& body) {
  for (int attempt = 0;; ++attempt) {
    if (PQstatus(conn_) != CONNECTION_OK) {
      PQreset(conn_);
      if (PQstatus(conn_) != CONNECTION_OK) {
        return absl::UnavailableError(absl::StrCat(
            "lost PostgreSQL at ", where_,
            " and cannot reconnect: ", TrimmedMessage(PQerrorMessage(conn_))));
      }
    }
    statements_answered_ = 0;
    const absl::Status status = body();
    // A connection found dead at the first statement (BEGIN for every
    // write) ran nothing: safe to reconnect and run the unit again, once.
    const bool dropped_before_start = !status.ok() &&
                                      PQstatus(conn_) != CONNECTION_OK &&
                                      statements_answered_ == 0;
    if (!dropped_before_start || attempt == 1) return status;
  }
}

absl::Status PostgresStore::InTransactionLocked(
    const std::function<absl::Status()>& body) {
  return RunLocked([&]() -> absl::Status {
    RETURN_IF_ERROR(ExecLocked("beginning a transaction", "BEGIN"));
    absl::Status status = body();
    if (status.ok()) status = ExecLocked("committing", "COMMIT");
    if (!status.ok() && PQstatus(conn_) == CONNECTION_OK) {
      (void)ExecLocked("rolling back", "ROLLBACK");
    }
    return status;
  });
}

absl::StatusOr<postgres_internal::Rows> PostgresStore::QueryLocked(
    const char* what, const char* sql, const Params& params) {
  const std::vector<const char*> values = params.Values();
  const std::vector<int> lengths = params.Lengths();
  PGresult* result =
      PQexecParams(conn_, sql, params.size(), /*paramTypes=*/nullptr,
                   values.data(), lengths.data(), params.Formats().data(),
                   /*resultFormat=*/1);
  const ExecStatusType status =
      result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    absl::Status error = StatementError(conn_, where_, what, result);
    PQclear(result);
    return error;
  }
  ++statements_answered_;
  return Rows(result);
}

absl::Status PostgresStore::ExecLocked(const char* what,
                                       const std::string& sql) {
  PGresult* result = PQexec(conn_, sql.c_str());
  const ExecStatusType status =
      result ? PQresultStatus(result) : PGRES_FATAL_ERROR;
  absl::Status error;
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    error = StatementError(conn_, where_, what, result);
  } else {
    ++statements_answered_;
  }
  PQclear(result);
  return error;
}

absl::Status PostgresStore::Migrate() {
  return InTransactionLocked([&]() -> absl::Status {
    // Replicas starting together wait here; the first migrates, the others
    // then find the schema current.
    RETURN_IF_ERROR(QueryLocked("locking the schema for migration",
                                "SELECT pg_advisory_xact_lock($1::bigint)",
                                Params().Int(kMigrationLock))
                        .status());
    RETURN_IF_ERROR(ExecLocked("creating schema_version",
                               "CREATE TABLE IF NOT EXISTS schema_version ("
                               "version integer PRIMARY KEY, "
                               "applied_unix bigint NOT NULL)"));
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("reading schema version",
                                 "SELECT COALESCE(MAX(version), 0)::bigint "
                                 "FROM schema_version",
                                 Params()));
    const int64_t version = rows.Int(0, 0);
    if (version > kPostgresSchemaVersion) {
      // The caller's rollback leaves the database as it was.
      return absl::FailedPreconditionError(
          absl::StrCat("PostgreSQL database schema version ", version, " (",
                       where_, ") is newer than this planner's ",
                       kPostgresSchemaVersion, "; upgrade the planner"));
    }
    for (int64_t v = version; v < kPostgresSchemaVersion; ++v) {
      RETURN_IF_ERROR(ExecLocked("migrating the schema", kMigrations[v]));
      RETURN_IF_ERROR(QueryLocked("recording the schema version",
                                  "INSERT INTO schema_version "
                                  "(version, applied_unix) VALUES ($1, $2)",
                                  Params().Int(v + 1).Int(std::time(nullptr)))
                          .status());
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::optional<v1::FactorSet>> PostgresStore::CurrentFactorSet() {
  absl::MutexLock lock(&mu_);
  std::optional<v1::FactorSet> current;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("reading current factor set",
                                 "SELECT f.body FROM factor_sets f JOIN "
                                 "current_factor_set c ON c.version = "
                                 "f.version WHERE c.id = 1",
                                 Params()));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(current,
                     Parse<v1::FactorSet>(rows.Bytes(0, 0), "factor set"));
    return absl::OkStatus();
  }));
  return current;
}

absl::StatusOr<std::string> PostgresStore::InsertVersionedLocked(
    const char* table, const char* prefix, int64_t created_unix,
    const std::function<std::string(const std::string&)>& body) {
  // Numbering is serialized across processes until this transaction ends;
  // each statement after the lock sees the previous numberer's commit.
  RETURN_IF_ERROR(QueryLocked("locking numbering",
                              "SELECT pg_advisory_xact_lock($1::integer, "
                              "hashtext($2))",
                              Params().Int(kNumberingLockClass).Text(table))
                      .status());
  const std::string numbering = absl::StrCat("numbering ", table);
  const std::string next_sql =
      absl::StrCat("SELECT COALESCE(MAX(seq), 0) + 1 FROM ", table);
  ASSIGN_OR_RETURN(Rows rows,
                   QueryLocked(numbering.c_str(), next_sql.c_str(), Params()));
  const int64_t next = rows.Int(0, 0);
  const std::string version = absl::StrCat(prefix, next);
  const std::string storing = absl::StrCat("storing into ", table);
  const std::string insert_sql =
      absl::StrCat("INSERT INTO ", table,
                   " (seq, version, created_unix, body) "
                   "VALUES ($1, $2, $3, $4)");
  RETURN_IF_ERROR(QueryLocked(storing.c_str(), insert_sql.c_str(),
                              Params()
                                  .Int(next)
                                  .Text(version)
                                  .Int(created_unix)
                                  .Bytes(body(version)))
                      .status());
  return version;
}

absl::StatusOr<v1::FactorSet> PostgresStore::AddFactorSet(v1::FactorSet set,
                                                          bool make_current) {
  absl::MutexLock lock(&mu_);
  if (set.created_unix() == 0) set.set_created_unix(std::time(nullptr));
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        const std::string version,
        InsertVersionedLocked("factor_sets", "fs-", set.created_unix(),
                              [&](const std::string& v) {
                                set.set_version(v);
                                return Serialize(set);
                              }));
    if (make_current) RETURN_IF_ERROR(SetCurrentLocked(version));
    return absl::OkStatus();
  }));
  return set;
}

absl::Status PostgresStore::SetCurrentLocked(const std::string& version) {
  RETURN_IF_ERROR(QueryLocked("making factor set current",
                              "INSERT INTO current_factor_set (id, version) "
                              "VALUES (1, $1) ON CONFLICT (id) DO UPDATE "
                              "SET version = EXCLUDED.version",
                              Params().Text(version))
                      .status());
  return QueryLocked("recording current factor set",
                     "INSERT INTO current_history (version, changed_unix) "
                     "VALUES ($1, $2)",
                     Params().Text(version).Int(std::time(nullptr)))
      .status();
}

absl::Status PostgresStore::SetCurrentFactorSet(const std::string& version) {
  absl::MutexLock lock(&mu_);
  return InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("reading factor set",
                                 "SELECT 1 FROM factor_sets WHERE version = $1",
                                 Params().Text(version)));
    if (rows.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "factor set '", version.substr(0, 64), "' is not stored"));
    }
    return SetCurrentLocked(version);
  });
}

absl::StatusOr<std::vector<std::string>> PostgresStore::CurrentHistory() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> versions;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("reading current history",
                    "SELECT version FROM current_history ORDER BY seq",
                    Params()));
    versions.clear();
    for (int i = 0; i < rows.size(); ++i) versions.push_back(rows.Bytes(i, 0));
    return absl::OkStatus();
  }));
  return versions;
}

absl::StatusOr<v1::FactorSet> PostgresStore::GetFactorSet(
    const std::string& version) {
  absl::MutexLock lock(&mu_);
  v1::FactorSet set;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("reading factor set",
                    "SELECT body FROM factor_sets WHERE version = $1",
                    Params().Text(version)));
    if (rows.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "factor set '", version.substr(0, 64), "' is not stored"));
    }
    ASSIGN_OR_RETURN(set, Parse<v1::FactorSet>(rows.Bytes(0, 0), "factor set"));
    return absl::OkStatus();
  }));
  return set;
}

absl::StatusOr<Page<v1::FactorSet>> PostgresStore::ListFactorSets(
    const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, v1::FactorSet>> rows;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows result,
        QueryLocked("listing factor sets",
                    "SELECT seq, body FROM factor_sets WHERE seq > $1 "
                    "ORDER BY seq LIMIT $2",
                    Params().Int(after).Int(int64_t{page.max_entries} + 1)));
    rows.clear();
    for (int i = 0; i < result.size(); ++i) {
      ASSIGN_OR_RETURN(v1::FactorSet set,
                       Parse<v1::FactorSet>(result.Bytes(i, 1), "factor set"));
      rows.emplace_back(absl::StrCat(result.Int(i, 0)), std::move(set));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(rows), page);
}

absl::StatusOr<int64_t> PostgresStore::CountLocked(const char* table) {
  const std::string sql = absl::StrCat("SELECT COUNT(*) FROM ", table);
  const std::string what = absl::StrCat("counting ", table);
  ASSIGN_OR_RETURN(Rows rows, QueryLocked(what.c_str(), sql.c_str(), Params()));
  return rows.Int(0, 0);
}

absl::Status PostgresStore::InsertRunLocked(const v1::MeasuredRun& run) {
  return QueryLocked("storing run",
                     "INSERT INTO measured_runs (template, gpu, batch, body) "
                     "VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                     Params()
                         .Text(run.template_())
                         .Text(run.gpu())
                         .Int(static_cast<int64_t>(run.batch()))
                         .Bytes(Serialize(run)))
      .status();
}

absl::StatusOr<int64_t> PostgresStore::AddRuns(
    const std::vector<v1::MeasuredRun>& runs) {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    for (const v1::MeasuredRun& run : runs)
      RETURN_IF_ERROR(InsertRunLocked(run));
    ASSIGN_OR_RETURN(count, CountLocked("measured_runs"));
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<int64_t> PostgresStore::CountRuns() {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(count, CountLocked("measured_runs"));
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<v1::MeasuredRun>> PostgresStore::ListRuns() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::MeasuredRun> runs;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("listing runs",
                    "SELECT body FROM measured_runs ORDER BY seq", Params()));
    runs.clear();
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::MeasuredRun run,
                       Parse<v1::MeasuredRun>(rows.Bytes(i, 0), "run"));
      runs.push_back(std::move(run));
    }
    return absl::OkStatus();
  }));
  return runs;
}

absl::StatusOr<v1::EnergyCurveSet> PostgresStore::AddEnergyCurveSet(
    v1::EnergyCurveSet set, bool make_current) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        const std::string version,
        InsertVersionedLocked("energy_curve_sets", "ec-", std::time(nullptr),
                              [&](const std::string& v) {
                                set.set_version(v);
                                return Serialize(set);
                              }));
    if (!make_current) return absl::OkStatus();
    return SetCurrentEnergyLocked(version);
  }));
  return set;
}

absl::Status PostgresStore::SetCurrentEnergyLocked(const std::string& version) {
  RETURN_IF_ERROR(QueryLocked("making curves current",
                              "INSERT INTO current_energy_curve_set (id, "
                              "version) VALUES (1, $1) ON CONFLICT (id) DO "
                              "UPDATE SET version = EXCLUDED.version",
                              Params().Text(version))
                      .status());
  return QueryLocked("recording current curves",
                     "INSERT INTO energy_current_history (version, "
                     "changed_unix) VALUES ($1, $2)",
                     Params().Text(version).Int(std::time(nullptr)))
      .status();
}

absl::Status PostgresStore::SetCurrentEnergyCurveSet(
    const std::string& version) {
  absl::MutexLock lock(&mu_);
  return InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("reading energy curves",
                    "SELECT 1 FROM energy_curve_sets WHERE version = $1",
                    Params().Text(version)));
    if (rows.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "energy curve set '", version.substr(0, 64), "' is not stored"));
    }
    return SetCurrentEnergyLocked(version);
  });
}

absl::StatusOr<std::vector<std::string>> PostgresStore::EnergyCurveHistory() {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> versions;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("reading energy curve history",
                    "SELECT version FROM energy_current_history ORDER BY seq",
                    Params()));
    versions.clear();
    for (int i = 0; i < rows.size(); ++i) versions.push_back(rows.Bytes(i, 0));
    return absl::OkStatus();
  }));
  return versions;
}

absl::StatusOr<v1::EnergyCurveSet> PostgresStore::GetEnergyCurveSet(
    const std::string& version) {
  absl::MutexLock lock(&mu_);
  v1::EnergyCurveSet set;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("reading energy curves",
                    "SELECT body FROM energy_curve_sets WHERE version = $1",
                    Params().Text(version)));
    if (rows.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "energy curve set '", version.substr(0, 64), "' is not stored"));
    }
    ASSIGN_OR_RETURN(
        set, Parse<v1::EnergyCurveSet>(rows.Bytes(0, 0), "energy curves"));
    return absl::OkStatus();
  }));
  return set;
}

absl::StatusOr<std::vector<v1::EnergyCurveSet>>
PostgresStore::ListEnergyCurveSets(const std::string& after_version,
                                   int limit) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::EnergyCurveSet> sets;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    int64_t after_seq = 0;
    if (!after_version.empty()) {
      ASSIGN_OR_RETURN(
          Rows found,
          QueryLocked("listing energy curves",
                      "SELECT seq FROM energy_curve_sets WHERE version = $1",
                      Params().Text(after_version)));
      if (found.empty()) {
        return absl::NotFoundError(absl::StrCat("energy curve set '",
                                                after_version.substr(0, 64),
                                                "' is not stored"));
      }
      after_seq = found.Int(0, 0);
    }
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("listing energy curves",
                    "SELECT body FROM energy_curve_sets WHERE seq > $1 "
                    "ORDER BY seq LIMIT $2",
                    Params().Int(after_seq).Int(limit)));
    sets.clear();
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          v1::EnergyCurveSet set,
          Parse<v1::EnergyCurveSet>(rows.Bytes(i, 0), "energy curves"));
      sets.push_back(std::move(set));
    }
    return absl::OkStatus();
  }));
  return sets;
}

absl::StatusOr<std::optional<v1::EnergyCurveSet>>
PostgresStore::CurrentEnergyCurveSet() {
  absl::MutexLock lock(&mu_);
  std::optional<v1::EnergyCurveSet> current;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("reading energy curves",
                                 "SELECT e.body FROM energy_curve_sets e JOIN "
                                 "current_energy_curve_set c ON c.version = "
                                 "e.version",
                                 Params()));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        current, Parse<v1::EnergyCurveSet>(rows.Bytes(0, 0), "energy curves"));
    return absl::OkStatus();
  }));
  return current;
}

absl::StatusOr<int64_t> PostgresStore::AddDensityRuns(
    const std::vector<v1::DensityRawRun>& runs) {
  absl::MutexLock lock(&mu_);
  int64_t count = 0;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    for (const v1::DensityRawRun& run : runs) {
      RETURN_IF_ERROR(
          QueryLocked("storing density run",
                      "INSERT INTO density_runs (id, arch, dtype, mode, body) "
                      "VALUES ($1, $2, $3, $4, $5) ON CONFLICT (id) DO UPDATE "
                      "SET arch = EXCLUDED.arch, dtype = EXCLUDED.dtype, "
                      "mode = EXCLUDED.mode, body = EXCLUDED.body",
                      Params()
                          .Text(run.id())
                          .Text(run.arch())
                          .Text(run.dtype())
                          .Text(run.mode())
                          .Bytes(Serialize(run)))
              .status());
    }
    ASSIGN_OR_RETURN(count, CountLocked("density_runs"));
    return absl::OkStatus();
  }));
  return count;
}

absl::StatusOr<std::vector<v1::DensityRawRun>> PostgresStore::ListDensityRuns(
    const std::string& arch, const std::string& dtype,
    const std::string& mode) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::DensityRawRun> runs;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("listing density runs",
                    "SELECT body FROM density_runs WHERE ($1 = '' OR arch = "
                    "$1) AND ($2 = '' OR dtype = $2) AND ($3 = '' OR mode = "
                    "$3) ORDER BY id",
                    Params().Text(arch).Text(dtype).Text(mode)));
    runs.clear();
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          v1::DensityRawRun run,
          Parse<v1::DensityRawRun>(rows.Bytes(i, 0), "density run"));
      runs.push_back(std::move(run));
    }
    return absl::OkStatus();
  }));
  return runs;
}

absl::StatusOr<v1::Probe> PostgresStore::AddProbe(v1::Probe probe) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    RETURN_IF_ERROR(QueryLocked("locking numbering",
                                "SELECT pg_advisory_xact_lock($1::integer, "
                                "hashtext('probes'))",
                                Params().Int(kNumberingLockClass))
                        .status());
    ASSIGN_OR_RETURN(
        Rows next,
        QueryLocked("numbering probes",
                    "SELECT COALESCE(MAX(seq), 0) + 1 FROM probes", Params()));
    const int64_t seq = next.Int(0, 0);
    probe.set_id(absl::StrCat("p-", seq));
    probe.set_state(v1::Probe::QUEUED);
    return QueryLocked("storing probe",
                       "INSERT INTO probes (seq, id, state, gpu, worker_pin, "
                       "executor, body, background, expires_at_ms) VALUES "
                       "($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                       Params()
                           .Int(seq)
                           .Text(probe.id())
                           .Int(probe.state())
                           .Text(probe.gpu())
                           .Text(probe.request().worker())
                           .Text(probe.request().executor())
                           .Bytes(Serialize(probe))
                           .Int(probe.request().learn_key().empty() ? 0 : 1)
                           .Int(ExpiryDeadlineMs(probe)))
        .status();
  }));
  return probe;
}

absl::StatusOr<v1::Probe> PostgresStore::GetProbeLocked(const std::string& id,
                                                        bool for_update) {
  ASSIGN_OR_RETURN(
      Rows rows,
      QueryLocked("reading probe",
                  for_update ? "SELECT body FROM probes WHERE id = $1 "
                               "FOR UPDATE"
                             : "SELECT body FROM probes WHERE id = $1",
                  Params().Text(id)));
  if (rows.empty()) {
    return absl::NotFoundError(
        absl::StrCat("probe '", id.substr(0, 64), "' is not stored"));
  }
  return Parse<v1::Probe>(rows.Bytes(0, 0), "probe");
}

absl::StatusOr<v1::Probe> PostgresStore::GetProbe(const std::string& id) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(id, /*for_update=*/false));
    return absl::OkStatus();
  }));
  return probe;
}

absl::Status PostgresStore::UpdateProbeLocked(const v1::Probe& probe,
                                              int64_t lease_until_ms) {
  return QueryLocked("updating probe",
                     "UPDATE probes SET state = $1, assignment_id = $2, "
                     "lease_until_ms = $3, body = $4, expires_at_ms = $5 "
                     "WHERE id = $6",
                     Params()
                         .Int(probe.state())
                         .Text(probe.state() == v1::Probe::RUNNING
                                   ? probe.assignment_id()
                                   : std::string())
                         .Int(lease_until_ms)
                         .Bytes(Serialize(probe))
                         .Int(ExpiryDeadlineMs(probe))
                         .Text(probe.id()))
      .status();
}

absl::StatusOr<Page<v1::Probe>> PostgresStore::ListProbes(
    v1::Probe::State state, const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t before, SeqAfter(page.after));
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, v1::Probe>> rows;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    // Newest first: the next page holds the probes before the last one.
    ASSIGN_OR_RETURN(
        Rows result,
        QueryLocked(
            "listing probes",
            "SELECT seq, body FROM probes WHERE ($1 = 0 OR state = $1) "
            "AND ($2::bigint = 0 OR seq < $2::bigint) ORDER BY seq DESC "
            "LIMIT $3::bigint",
            Params().Int(state).Int(before).Int(int64_t{page.max_entries} +
                                                1)));
    rows.clear();
    for (int i = 0; i < result.size(); ++i) {
      ASSIGN_OR_RETURN(v1::Probe probe,
                       Parse<v1::Probe>(result.Bytes(i, 1), "probe"));
      rows.emplace_back(absl::StrCat(result.Int(i, 0)), std::move(probe));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(rows), page);
}

absl::StatusOr<std::optional<v1::Probe>> PostgresStore::ClaimProbe(
    const std::string& worker, const std::vector<std::string>& gpus,
    const std::vector<std::string>& executors, int64_t now_ms,
    int64_t lease_ms) {
  absl::MutexLock lock(&mu_);
  std::optional<v1::Probe> claimed;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    claimed.reset();
    // The oldest queued probe this worker can run that no other claimer
    // holds right now; its row stays locked until the commit.
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("claiming probe",
                    "SELECT body FROM probes WHERE state = $1 AND "
                    "(CASE WHEN worker_pin = '' THEN gpu = ANY($2::text[]) "
                    "ELSE worker_pin = $3 END) AND "
                    "(executor = '' OR executor = ANY($4::text[])) "
                    "ORDER BY background, seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                    Params()
                        .Int(v1::Probe::QUEUED)
                        .Text(TextArray(gpus))
                        .Text(worker)
                        .Text(TextArray(executors))));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(v1::Probe probe,
                     Parse<v1::Probe>(rows.Bytes(0, 0), "probe"));
    MarkClaimed(&probe, worker, now_ms);
    RETURN_IF_ERROR(UpdateProbeLocked(probe, now_ms + lease_ms));
    claimed = std::move(probe);
    return absl::OkStatus();
  }));
  return claimed;
}

absl::Status PostgresStore::RenewLease(const std::string& assignment_id,
                                       int64_t until_ms) {
  absl::MutexLock lock(&mu_);
  return InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("renewing lease",
                    "UPDATE probes SET lease_until_ms = "
                    "GREATEST(lease_until_ms, $1) WHERE assignment_id = $2 "
                    "AND state = $3",
                    Params()
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

absl::StatusOr<std::vector<std::string>> PostgresStore::RequeueExpired(
    int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> requeued;
  // Read first: the write transaction below runs only when a lease ran
  // out, not on every dispatcher pass.
  bool any = false;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("finding expired leases",
                                 "SELECT 1 FROM probes WHERE "
                                 "state = $1 AND lease_until_ms < "
                                 "$2 LIMIT 1",
                                 Params().Int(v1::Probe::RUNNING).Int(now_ms)));
    any = !rows.empty();
    return absl::OkStatus();
  }));
  if (!any) return requeued;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    requeued.clear();
    // A probe another planner is finishing right now is skipped, not
    // waited for; the lock re-checks the lease on the row as it is now.
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("finding expired leases",
                                 "SELECT body FROM probes WHERE state = $1 AND "
                                 "lease_until_ms < $2 ORDER BY seq LIMIT 1000 "
                                 "FOR UPDATE SKIP LOCKED",
                                 Params().Int(v1::Probe::RUNNING).Int(now_ms)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::Probe probe,
                       Parse<v1::Probe>(rows.Bytes(i, 0), "probe"));
      MarkRequeued(&probe, now_ms);
      RETURN_IF_ERROR(UpdateProbeLocked(probe, 0));
      requeued.push_back(probe.id());
    }
    return absl::OkStatus();
  }));
  return requeued;
}

absl::StatusOr<std::vector<v1::Probe>> PostgresStore::ListExpiredProbes(
    int64_t now_ms, int limit) {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Probe> expired;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    expired.clear();
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("finding expired probes",
                    "SELECT body FROM probes WHERE expires_at_ms > 0 AND "
                    "expires_at_ms <= $1 AND state = $2 "
                    "ORDER BY expires_at_ms, seq LIMIT $3::bigint",
                    Params().Int(now_ms).Int(v1::Probe::QUEUED).Int(limit)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::Probe probe,
                       Parse<v1::Probe>(rows.Bytes(i, 0), "probe"));
      expired.push_back(std::move(probe));
    }
    return absl::OkStatus();
  }));
  return expired;
}

absl::StatusOr<v1::Probe> PostgresStore::ExpireProbe(const std::string& id,
                                                     int64_t now_ms,
                                                     const std::string& error) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    // Locked: a claim by another planner came first (the probe is RUNNING
    // and stays so) or skips this row and then finds it FAILED.
    ASSIGN_OR_RETURN(probe, GetProbeLocked(id, /*for_update=*/true));
    if (!MarkExpired(&probe, now_ms, error)) return absl::OkStatus();
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<bool> PostgresStore::RecordProbeResult(
    const std::string& probe_id, const std::string& assignment_id,
    const std::string& worker, const std::string& key,
    const v1::BatchResult& result, const std::optional<v1::MeasuredRun>& run) {
  absl::MutexLock lock(&mu_);
  bool inserted = false;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    // The probe's row is locked first, so results another planner stores
    // for the same probe at the same time are appended, not lost.
    ASSIGN_OR_RETURN(Rows probe_row,
                     QueryLocked("reading probe",
                                 "SELECT body, lease_until_ms FROM probes "
                                 "WHERE id = $1 FOR UPDATE",
                                 Params().Text(probe_id)));
    if (probe_row.empty()) {
      return absl::NotFoundError(
          absl::StrCat("probe '", probe_id.substr(0, 64), "' is not stored"));
    }
    ASSIGN_OR_RETURN(v1::Probe probe,
                     Parse<v1::Probe>(probe_row.Bytes(0, 0), "probe"));
    // A key stored before is a duplicate even once the lease is gone: a
    // re-sent result whose acknowledgement was lost.
    ASSIGN_OR_RETURN(Rows seen, QueryLocked("reading probe results",
                                            "SELECT 1 FROM probe_results "
                                            "WHERE key = $1",
                                            Params().Text(key)));
    if (!seen.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
    if (HasResultFor(probe, result)) return absl::OkStatus();
    ASSIGN_OR_RETURN(Rows stored,
                     QueryLocked("storing probe result",
                                 "INSERT INTO probe_results (key, probe_id, "
                                 "body) VALUES ($1, $2, $3) "
                                 "ON CONFLICT (key) DO NOTHING",
                                 Params().Text(key).Text(probe_id).Bytes(
                                     Serialize(result))));
    inserted = stored.changed() == 1;
    if (!inserted) return absl::OkStatus();
    *probe.add_results() = result;
    RETURN_IF_ERROR(UpdateProbeLocked(probe, probe_row.Int(0, 1)));
    if (run.has_value()) RETURN_IF_ERROR(InsertRunLocked(*run));
    return absl::OkStatus();
  }));
  return inserted;
}

absl::StatusOr<v1::Probe> PostgresStore::FinishAssignment(
    const std::string& probe_id, const std::string& assignment_id,
    v1::Probe::State state, const std::string& error,
    const std::string& details_json, bool requeue) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(probe_id, /*for_update=*/true));
    if (!MarkFinished(&probe, assignment_id, state, error, details_json,
                      requeue)) {
      return absl::OkStatus();  // that assignment is no longer the probe's
    }
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> PostgresStore::HandBack(
    const std::string& probe_id, const std::string& assignment_id,
    const std::string& worker, uint32_t max_handbacks) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(probe_id, /*for_update=*/true));
    RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
    MarkHandedBack(&probe, max_handbacks);
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> PostgresStore::CancelProbe(const std::string& id) {
  absl::MutexLock lock(&mu_);
  v1::Probe probe;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(probe, GetProbeLocked(id, /*for_update=*/true));
    if (!MarkCancelled(&probe)) return absl::OkStatus();  // already final
    return UpdateProbeLocked(probe, 0);
  }));
  return probe;
}

absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>>
PostgresStore::CountProbes() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<v1::Probe::State, int64_t>> counts;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("counting probes",
                    "SELECT state, COUNT(*) FROM probes GROUP BY state "
                    "ORDER BY state",
                    Params()));
    counts.clear();
    for (int i = 0; i < rows.size(); ++i) {
      const int64_t state = rows.Int(i, 0);
      if (!v1::Probe::State_IsValid(static_cast<int>(state))) continue;
      counts.emplace_back(static_cast<v1::Probe::State>(state), rows.Int(i, 1));
    }
    return absl::OkStatus();
  }));
  return counts;
}

absl::Status PostgresStore::PutWorker(const v1::WorkerStatus& worker) {
  absl::MutexLock lock(&mu_);
  return InTransactionLocked([&]() -> absl::Status {
    return QueryLocked("storing worker",
                       "INSERT INTO workers (id, body) VALUES ($1, $2) "
                       "ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body",
                       Params()
                           .Text(worker.hello().worker_id())
                           .Bytes(Serialize(worker)))
        .status();
  });
}

absl::StatusOr<Page<v1::WorkerStatus>> PostgresStore::ListWorkers(
    const PageSpec& page) {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, v1::WorkerStatus>> rows;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows result,
        QueryLocked("listing workers",
                    "SELECT id, body FROM workers WHERE ($1 = 0 OR id > $2) "
                    "ORDER BY id LIMIT $3",
                    Params()
                        .Int(page.after.empty() ? 0 : 1)
                        .Text(page.after)
                        .Int(int64_t{page.max_entries} + 1)));
    rows.clear();
    for (int i = 0; i < result.size(); ++i) {
      ASSIGN_OR_RETURN(v1::WorkerStatus worker,
                       Parse<v1::WorkerStatus>(result.Bytes(i, 1), "worker"));
      rows.emplace_back(result.Bytes(i, 0), std::move(worker));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(rows), page);
}

absl::StatusOr<bool> PostgresStore::PutAutotuneRecord(
    const std::string& id, const std::string& key_bytes,
    const v1::AutotuneRecord& record) {
  absl::MutexLock lock(&mu_);
  bool replaced = false;
  RETURN_IF_ERROR(InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Rows deleted,
                     QueryLocked("storing autotune record",
                                 "DELETE FROM autotune_cache WHERE id = $1",
                                 Params().Text(id)));
    replaced = deleted.changed() > 0;
    // ON CONFLICT: another planner may store the same id concurrently.
    return QueryLocked("storing autotune record",
                       "INSERT INTO autotune_cache (id, key_bytes, "
                       "created_unix, body) VALUES ($1, $2, $3, $4) "
                       "ON CONFLICT (id) DO UPDATE SET key_bytes = "
                       "EXCLUDED.key_bytes, created_unix = "
                       "EXCLUDED.created_unix, body = EXCLUDED.body",
                       Params()
                           .Text(id)
                           .Bytes(key_bytes)
                           .Int(std::time(nullptr))
                           .Bytes(Serialize(record)))
        .status();
  }));
  return replaced;
}

absl::StatusOr<std::optional<v1::AutotuneRecord>>
PostgresStore::FindAutotuneRecord(const std::string& id,
                                  const std::string& key_bytes) {
  absl::MutexLock lock(&mu_);
  std::optional<v1::AutotuneRecord> found;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows rows,
        QueryLocked("reading autotune cache",
                    "SELECT key_bytes, body FROM autotune_cache WHERE id = $1",
                    Params().Text(id)));
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

absl::StatusOr<Page<v1::AutotuneCacheEntry>> PostgresStore::ListAutotuneRecords(
    const PageSpec& page) {
  int64_t created = 0;
  std::string id;
  if (!page.after.empty()) {
    RETURN_IF_ERROR(ParseCreatedIdKey(page.after, &created, &id));
  }
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<std::string, v1::AutotuneCacheEntry>> rows;
  RETURN_IF_ERROR(RunLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(
        Rows result,
        QueryLocked(
            "listing autotune cache",
            "SELECT id, created_unix, body FROM autotune_cache "
            "WHERE ($1 = 0 OR (created_unix, id) > ($2::bigint, $3::text)) "
            "ORDER BY created_unix, id LIMIT $4",
            Params()
                .Int(page.after.empty() ? 0 : 1)
                .Int(created)
                .Text(id)
                .Int(int64_t{page.max_entries} + 1)));
    rows.clear();
    for (int i = 0; i < result.size(); ++i) {
      v1::AutotuneCacheEntry entry;
      entry.set_id(result.Bytes(i, 0));
      entry.set_created_unix(result.Int(i, 1));
      ASSIGN_OR_RETURN(
          *entry.mutable_record(),
          Parse<v1::AutotuneRecord>(result.Bytes(i, 2), "autotune record"));
      std::string key = CreatedIdKey(entry.created_unix(), entry.id());
      rows.emplace_back(std::move(key), std::move(entry));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(rows), page);
}

absl::Status PostgresStore::DropAutotuneRecord(const std::string& id) {
  absl::MutexLock lock(&mu_);
  return InTransactionLocked([&]() -> absl::Status {
    ASSIGN_OR_RETURN(Rows rows,
                     QueryLocked("dropping autotune record",
                                 "DELETE FROM autotune_cache WHERE id = $1",
                                 Params().Text(id)));
    if (rows.changed() == 0) {
      return absl::NotFoundError(absl::StrCat(
          "autotune cache entry '", id.substr(0, 64),
          "' is not stored; headroom microbatch cache list shows the ids"));
    }
    return absl::OkStatus();
  });
}

}  // namespace headroom
