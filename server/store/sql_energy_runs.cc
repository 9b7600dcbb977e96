// Measured energy runs over SQL, each stored once under a key.

#include <utility>

#include "base/deterministic_bytes.h"
#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::Parse;

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

}  // namespace headroom
