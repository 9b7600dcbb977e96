// What is known about each worker, over SQL.

#include <utility>

#include "base/deterministic_bytes.h"
#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::Parse;

absl::Status SqlStore::PutWorker(const v1::WorkerStatus& worker) {
  return Write([&](Tx& tx) {
    return tx.Exec("storing worker",
                   "INSERT INTO workers (id, body) VALUES (?, ?) ON CONFLICT "
                   "(id) DO UPDATE SET body = excluded.body",
                   SqlParams()
                       .Text(worker.hello().worker_id())
                       .Bytes(DeterministicBytes(worker)));
  });
}

absl::StatusOr<Page<v1::WorkerStatus>> SqlStore::ListWorkers(
    const PageSpec& page) {
  std::vector<std::pair<std::string, v1::WorkerStatus>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing workers",
                 "SELECT id, body FROM workers WHERE (? = 0 OR id > ?) "
                 "ORDER BY id LIMIT ?",
                 SqlParams()
                     .Int(page.after.empty() ? 0 : 1)
                     .Text(page.after)
                     .Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::WorkerStatus worker,
                       Parse<v1::WorkerStatus>(rows.Bytes(i, 1), "worker"));
      entries.emplace_back(rows.Bytes(i, 0), std::move(worker));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

}  // namespace headroom
