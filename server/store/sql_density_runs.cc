// Serve-while-train runs over SQL, by id.

#include "base/deterministic_bytes.h"
#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::Count;
using sql::Parse;

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

}  // namespace headroom
