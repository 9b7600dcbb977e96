// Measured runs over SQL, each stored once (unique by a hash of its body).

#include <utility>

#include "absl/strings/str_cat.h"
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

absl::StatusOr<std::string> SqlStore::LastRunKey() {
  int64_t last = 0;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("finding the last run",
                 "SELECT COALESCE(MAX(seq), 0) FROM measured_runs"));
    last = rows.Int(0, 0);
    return absl::OkStatus();
  }));
  return last == 0 ? std::string() : absl::StrCat(last);
}

absl::StatusOr<Page<v1::MeasuredRun>> SqlStore::ListRuns(const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  std::vector<std::pair<std::string, v1::MeasuredRun>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing runs",
                 "SELECT seq, body FROM measured_runs WHERE seq > ? "
                 "ORDER BY seq LIMIT ?",
                 SqlParams().Int(after).Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::MeasuredRun run,
                       Parse<v1::MeasuredRun>(rows.Bytes(i, 1), "run"));
      entries.emplace_back(absl::StrCat(rows.Int(i, 0)), std::move(run));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

}  // namespace headroom
