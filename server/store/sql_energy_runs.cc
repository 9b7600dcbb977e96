// Measured energy runs over SQL, each stored once under a key.

#include <utility>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<Page<v1::EnergyRun>> SqlStore::ListEnergyRuns(
    bool include_simulated, const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  std::vector<std::pair<std::string, v1::EnergyRun>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("listing energy runs",
                              "SELECT seq, body FROM energy_runs WHERE "
                              "simulated <= ? AND seq > ? ORDER BY seq LIMIT ?",
                              SqlParams()
                                  .Int(include_simulated ? 1 : 0)
                                  .Int(after)
                                  .Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::EnergyRun run,
                       Parse<v1::EnergyRun>(rows.Bytes(i, 1), "energy run"));
      entries.emplace_back(absl::StrCat(rows.Int(i, 0)), std::move(run));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
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
