// Measured runs over SQL, each stored once (unique by a hash of its body).

#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::Count;
using sql::InsertRun;
using sql::Parse;

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

}  // namespace headroom
