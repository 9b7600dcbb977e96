// Serve-while-train runs over SQL, by id.

#include <utility>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<Page<v1::DensityRawRun>> SqlStore::ListDensityRuns(
    const std::string& arch, const std::string& dtype, const std::string& mode,
    const PageSpec& page) {
  std::vector<std::pair<std::string, v1::DensityRawRun>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing density runs",
                 "SELECT id, body FROM density_runs WHERE (? = '' OR arch = ?) "
                 "AND (? = '' OR dtype = ?) AND (? = '' OR mode = ?) "
                 "AND (? = 0 OR id > ?) ORDER BY id LIMIT ?",
                 SqlParams()
                     .Text(arch)
                     .Text(arch)
                     .Text(dtype)
                     .Text(dtype)
                     .Text(mode)
                     .Text(mode)
                     .Int(page.after.empty() ? 0 : 1)
                     .Text(page.after)
                     .Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          v1::DensityRawRun run,
          Parse<v1::DensityRawRun>(rows.Bytes(i, 1), "density run"));
      entries.emplace_back(rows.Bytes(i, 0), std::move(run));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

}  // namespace headroom
