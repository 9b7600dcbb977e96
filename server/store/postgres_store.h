#ifndef HEADROOM_SERVER_STORE_POSTGRES_STORE_H_
#define HEADROOM_SERVER_STORE_POSTGRES_STORE_H_

// The shared store: one PostgreSQL database that several planner replicas
// use at once. Same semantics and version names as SqliteStore; schema
// migrations versioned in a schema_version table and applied at open under
// an advisory lock, so replicas starting together migrate once.

#include <functional>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/store/store.h"

struct pg_conn;

namespace headroom {
namespace postgres_internal {
class Params;  // one statement's parameters
class Rows;    // one statement's result rows
}  // namespace postgres_internal

// Schema version this build writes and understands (its own numbering,
// not SQLite's: version 1 holds everything SQLite's version 6 does).
inline constexpr int kPostgresSchemaVersion = 4;

class PostgresStore : public Store {
 public:
  // Connects to the database at `url` (a postgresql:// URL or a libpq
  // key=value string) and migrates it. UNAVAILABLE (naming host, port and
  // database, never the password) when the server cannot be reached;
  // FAILED_PRECONDITION, changing nothing, when the database's schema is
  // newer than this build knows.
  static absl::StatusOr<std::unique_ptr<PostgresStore>> Open(
      const std::string& url);

  ~PostgresStore() override;
  PostgresStore(const PostgresStore&) = delete;
  PostgresStore& operator=(const PostgresStore&) = delete;

  absl::StatusOr<std::optional<v1::FactorSet>> CurrentFactorSet() override;
  absl::StatusOr<v1::FactorSet> AddFactorSet(v1::FactorSet set,
                                             bool make_current) override;
  absl::Status SetCurrentFactorSet(const std::string& version) override;
  absl::StatusOr<std::vector<std::string>> CurrentHistory() override;
  absl::StatusOr<v1::FactorSet> GetFactorSet(
      const std::string& version) override;
  using Store::ListAutotuneRecords;
  using Store::ListFactorSets;
  using Store::ListProbes;
  using Store::ListWorkers;
  absl::StatusOr<Page<v1::FactorSet>> ListFactorSets(
      const PageSpec& page) override;
  absl::StatusOr<int64_t> AddRuns(
      const std::vector<v1::MeasuredRun>& runs) override;
  absl::StatusOr<std::vector<v1::MeasuredRun>> ListRuns() override;
  absl::StatusOr<int64_t> CountRuns() override;
  absl::StatusOr<int64_t> AddDensityRuns(
      const std::vector<v1::DensityRawRun>& runs) override;
  absl::StatusOr<std::vector<v1::DensityRawRun>> ListDensityRuns(
      const std::string& arch, const std::string& dtype,
      const std::string& mode) override;
  absl::StatusOr<v1::EnergyCurveSet> AddEnergyCurveSet(
      v1::EnergyCurveSet set, bool make_current) override;
  absl::StatusOr<std::optional<v1::EnergyCurveSet>> CurrentEnergyCurveSet()
      override;
  absl::Status SetCurrentEnergyCurveSet(const std::string& version) override;
  absl::StatusOr<std::vector<std::string>> EnergyCurveHistory() override;
  absl::StatusOr<v1::EnergyCurveSet> GetEnergyCurveSet(
      const std::string& version) override;
  absl::StatusOr<std::vector<v1::EnergyCurveSet>> ListEnergyCurveSets(
      const std::string& after_version, int limit) override;

  absl::StatusOr<v1::Probe> AddProbe(v1::Probe probe) override;
  absl::StatusOr<v1::Probe> GetProbe(const std::string& id) override;
  absl::StatusOr<Page<v1::Probe>> ListProbes(v1::Probe::State state,
                                             const PageSpec& page) override;
  // Row leases: the claim locks the probe it takes with FOR UPDATE SKIP
  // LOCKED, so claimers in other processes never get the same probe.
  absl::StatusOr<std::optional<v1::Probe>> ClaimProbe(
      const std::string& worker, const std::vector<std::string>& gpus,
      const std::vector<std::string>& executors, int64_t now_ms,
      int64_t lease_ms) override;
  absl::Status RenewLease(const std::string& assignment_id,
                          int64_t until_ms) override;
  absl::StatusOr<std::vector<std::string>> RequeueExpired(
      int64_t now_ms) override;
  absl::StatusOr<std::vector<v1::Probe>> ListExpiredProbes(int64_t now_ms,
                                                           int limit) override;
  absl::StatusOr<v1::Probe> ExpireProbe(const std::string& id, int64_t now_ms,
                                        const std::string& error) override;
  absl::StatusOr<bool> RecordProbeResult(
      const std::string& probe_id, const std::string& assignment_id,
      const std::string& worker, const std::string& key,
      const v1::BatchResult& result,
      const std::optional<v1::MeasuredRun>& run) override;
  absl::StatusOr<v1::Probe> HandBack(const std::string& probe_id,
                                     const std::string& assignment_id,
                                     const std::string& worker,
                                     uint32_t max_handbacks) override;
  absl::StatusOr<v1::Probe> FinishAssignment(const std::string& probe_id,
                                             const std::string& assignment_id,
                                             v1::Probe::State state,
                                             const std::string& error,
                                             const std::string& details_json,
                                             bool requeue) override;
  absl::StatusOr<v1::Probe> CancelProbe(const std::string& id) override;
  absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>>
  CountProbes() override;
  absl::StatusOr<bool> PutAutotuneRecord(
      const std::string& id, const std::string& key_bytes,
      const v1::AutotuneRecord& record) override;
  absl::StatusOr<std::optional<v1::AutotuneRecord>> FindAutotuneRecord(
      const std::string& id, const std::string& key_bytes) override;
  absl::StatusOr<Page<v1::AutotuneCacheEntry>> ListAutotuneRecords(
      const PageSpec& page) override;
  absl::Status DropAutotuneRecord(const std::string& id) override;
  absl::Status PutWorker(const v1::WorkerStatus& worker) override;
  absl::StatusOr<Page<v1::WorkerStatus>> ListWorkers(
      const PageSpec& page) override;

 private:
  using Params = postgres_internal::Params;
  using Rows = postgres_internal::Rows;

  PostgresStore(pg_conn* conn, std::string where)
      : where_(std::move(where)), conn_(conn) {}

  // Runs `body` as one unit of work on the connection: reconnects first
  // when the connection is down, and once more (running `body` again) when
  // the connection turns out dead at the unit's first statement, which the
  // server therefore never ran.
  absl::Status RunLocked(const std::function<absl::Status()>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RunLocked around BEGIN .. COMMIT, rolling back when `body` fails.
  absl::Status InTransactionLocked(const std::function<absl::Status()>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One parameterized statement; `what` names it in errors.
  absl::StatusOr<Rows> QueryLocked(const char* what, const char* sql,
                                   const Params& params)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // SQL without parameters, possibly several statements.
  absl::Status ExecLocked(const char* what, const std::string& sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Migrate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The probe's body; locks its row until the transaction ends when
  // `for_update`. NOT_FOUND names an unknown id.
  absl::StatusOr<v1::Probe> GetProbeLocked(const std::string& id,
                                           bool for_update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the probe's body and its queue columns.
  absl::Status UpdateProbeLocked(const v1::Probe& probe, int64_t lease_until_ms)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status InsertRunLocked(const v1::MeasuredRun& run)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `version` the current energy curve set and appends it to the
  // history; the caller checked that it is stored.
  absl::Status SetCurrentEnergyLocked(const std::string& version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetCurrentLocked(const std::string& version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Inserts a row (seq, version, created_unix, body) into `table` inside the
  // caller's transaction, the version being `prefix` + the next seq (the
  // table locked against other numberers until the transaction ends);
  // `body` gets that version and returns the row's bytes.
  absl::StatusOr<std::string> InsertVersionedLocked(
      const char* table, const char* prefix, int64_t created_unix,
      const std::function<std::string(const std::string&)>& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<int64_t> CountLocked(const char* table)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // "host=.. port=.. dbname=..", for errors; never the password.
  const std::string where_;
  absl::Mutex mu_;
  pg_conn* conn_ ABSL_GUARDED_BY(mu_);
  // Statements sent in the current RunLocked unit that came back.
  int statements_answered_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_POSTGRES_STORE_H_
