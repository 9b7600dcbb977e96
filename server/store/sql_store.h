#ifndef HEADROOM_SERVER_STORE_SQL_STORE_H_
#define HEADROOM_SERVER_STORE_SQL_STORE_H_

// The store over SQL, written once for SQLite (SqliteStore, the embedded
// default) and PostgreSQL (PostgresStore, shared by replicas): every
// statement, the transactions, the body encoding (deterministic binary
// protobuf; measured runs unique by a content hash), the migrations and the
// probe-claim rule. What differs between the two is a SqlDialect and the
// connections (sql_connection.h). One file per interface of store.h
// (sql_factor_sets.cc, sql_runs.cc, sql_energy_curves.cc,
// sql_energy_runs.cc, sql_density_runs.cc, sql_probe_queue.cc,
// sql_autotune_cache.cc, sql_workers.cc); sql_schema.cc creates and
// migrates the schema; sql_tx.{h,cc} run the units of work and hold the
// helpers they share.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/store/connection_pool.h"
#include "server/store/sql_dialect.h"
#include "server/store/store.h"

namespace headroom {

// How many migrations SqlStore adds, the same for both backends, after
// each backend's legacy version (sql_dialect.h).
inline constexpr int kSqlStoreMigrations = 3;

class SqlStore : public Store {
 public:
  // A store over `writers` (write transactions) and `readers` (reads; the
  // writers again when null). Call Migrate() before anything else.
  SqlStore(const SqlDialect& dialect, std::unique_ptr<ConnectionPool> writers,
           std::unique_ptr<ConnectionPool> readers);
  SqlStore(const SqlStore&) = delete;
  SqlStore& operator=(const SqlStore&) = delete;

  // Creates the schema in a new database, or brings one at the backend's
  // legacy version or later to this build's, in one transaction.
  // FAILED_PRECONDITION, changing nothing, when the database's schema is
  // newer, or older than the legacy version; `where` names the database
  // in that message.
  absl::Status Migrate(const std::string& where);

  // Adds the read-only connections reads use from now on (SQLite opens
  // them once the schema is migrated).
  void SetReaders(std::unique_ptr<ConnectionPool> readers);

  absl::StatusOr<std::optional<v1::FactorSet>> CurrentFactorSet() override;
  absl::StatusOr<v1::FactorSet> AddFactorSet(v1::FactorSet set,
                                             bool make_current) override;
  absl::Status SetCurrentFactorSet(const std::string& version) override;
  absl::StatusOr<Page<std::string>> CurrentHistory(
      const PageSpec& page) override;
  absl::StatusOr<v1::FactorSet> GetFactorSet(
      const std::string& version) override;
  using Store::CurrentHistory;
  using Store::EnergyCurveHistory;
  using Store::ListAutotuneRecords;
  using Store::ListDensityRuns;
  using Store::ListEnergyCurveSets;
  using Store::ListEnergyRuns;
  using Store::ListExpiredProbes;
  using Store::ListFactorSets;
  using Store::ListProbes;
  using Store::ListRuns;
  using Store::ListWorkers;
  using Store::RecordProbeResult;
  absl::StatusOr<Page<v1::FactorSet>> ListFactorSets(
      const PageSpec& page) override;
  absl::StatusOr<int64_t> AddRuns(
      const std::vector<v1::MeasuredRun>& runs) override;
  absl::StatusOr<Page<v1::MeasuredRun>> ListRuns(const PageSpec& page) override;
  absl::StatusOr<int64_t> CountRuns() override;
  absl::StatusOr<std::string> LastRunKey() override;
  absl::StatusOr<int64_t> AddDensityRuns(
      const std::vector<v1::DensityRawRun>& runs) override;
  absl::StatusOr<Page<v1::DensityRawRun>> ListDensityRuns(
      const std::string& arch, const std::string& dtype,
      const std::string& mode, const PageSpec& page) override;
  absl::StatusOr<v1::EnergyCurveSet> AddEnergyCurveSet(
      v1::EnergyCurveSet set, bool make_current) override;
  absl::StatusOr<bool> AddEnergyRun(const std::string& key,
                                    const v1::EnergyRun& run) override;
  absl::StatusOr<Page<v1::EnergyRun>> ListEnergyRuns(
      bool include_simulated, const PageSpec& page) override;
  absl::StatusOr<std::pair<int64_t, int64_t>> CountEnergyRuns() override;
  absl::StatusOr<std::optional<v1::EnergyCurveSet>> CurrentEnergyCurveSet()
      override;
  absl::Status SetCurrentEnergyCurveSet(const std::string& version) override;
  absl::StatusOr<Page<std::string>> EnergyCurveHistory(
      const PageSpec& page) override;
  absl::StatusOr<v1::EnergyCurveSet> GetEnergyCurveSet(
      const std::string& version) override;
  absl::StatusOr<Page<v1::EnergyCurveSet>> ListEnergyCurveSets(
      const PageSpec& page) override;

  absl::StatusOr<v1::Probe> AddProbe(v1::Probe probe) override;
  absl::StatusOr<v1::Probe> GetProbe(const std::string& id) override;
  absl::StatusOr<Page<v1::Probe>> ListProbes(v1::Probe::State state,
                                             const PageSpec& page) override;
  absl::StatusOr<std::optional<v1::Probe>> ClaimProbe(
      const std::string& worker, const std::vector<std::string>& gpus,
      const std::vector<std::string>& executors, int64_t now_ms,
      int64_t lease_ms) override;
  absl::Status RenewLease(const std::string& assignment_id,
                          int64_t until_ms) override;
  absl::StatusOr<std::vector<std::string>> RequeueExpired(
      int64_t now_ms) override;
  absl::StatusOr<Page<v1::Probe>> ListExpiredProbes(
      int64_t now_ms, const PageSpec& page) override;
  absl::StatusOr<v1::Probe> ExpireProbe(const std::string& id, int64_t now_ms,
                                        const std::string& error) override;
  absl::StatusOr<bool> RecordProbeResult(
      const std::string& probe_id, const std::string& assignment_id,
      const std::string& worker, const std::string& key,
      const v1::BatchResult& result, const std::optional<v1::MeasuredRun>& run,
      v1::Probe* updated) override;
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
  absl::Status DropAutotuneRecord(const std::string& id,
                                  bool measured_too) override;
  absl::Status PutWorker(const v1::WorkerStatus& worker) override;
  absl::StatusOr<Page<v1::WorkerStatus>> ListWorkers(
      const PageSpec& page) override;

  // One unit of work on one leased connection: the statements a store
  // method runs, inside one transaction. Only Write and Read make one.
  class Tx;

 private:
  // Runs `body` in a write transaction (committed when it returns OK,
  // rolled back otherwise), or in a read-only snapshot. A unit that found
  // its connection dead before any statement ran reconnects and runs once
  // more.
  absl::Status Write(const std::function<absl::Status(Tx&)>& body);
  absl::Status Read(const std::function<absl::Status(Tx&)>& body);
  absl::Status Run(ConnectionPool& pool, const char* begin,
                   const std::function<absl::Status(Tx&)>& body);

  const SqlDialect& dialect_;
  std::unique_ptr<ConnectionPool> writers_;
  std::unique_ptr<ConnectionPool> readers_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_SQL_STORE_H_
