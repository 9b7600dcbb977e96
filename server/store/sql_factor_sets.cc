// Versioned factor sets over SQL.

#include <ctime>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/deterministic_bytes.h"
#include "base/status_macros.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::History;
using sql::InsertVersioned;
using sql::MakeCurrent;
using sql::NotStored;
using sql::Parse;

absl::StatusOr<std::optional<v1::FactorSet>> SqlStore::CurrentFactorSet() {
  std::optional<v1::FactorSet> current;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading current factor set",
                              "SELECT f.body FROM factor_sets f JOIN "
                              "current_factor_set c ON c.version = f.version "
                              "WHERE c.id = 1"));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(current,
                     Parse<v1::FactorSet>(rows.Bytes(0, 0), "factor set"));
    return absl::OkStatus();
  }));
  return current;
}

absl::StatusOr<v1::FactorSet> SqlStore::AddFactorSet(v1::FactorSet set,
                                                     bool make_current) {
  if (set.created_unix() == 0) set.set_created_unix(std::time(nullptr));
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        const std::string version,
        InsertVersioned(tx, "factor_sets", "fs-", set.created_unix(),
                        [&](const std::string& v) {
                          set.set_version(v);
                          return DeterministicBytes(set);
                        }));
    if (!make_current) return absl::OkStatus();
    return MakeCurrent(tx, "factor set", "factor_sets", "current_factor_set",
                       "current_history", version, /*check=*/false);
  }));
  return set;
}

absl::Status SqlStore::SetCurrentFactorSet(const std::string& version) {
  return Write([&](Tx& tx) {
    return MakeCurrent(tx, "factor set", "factor_sets", "current_factor_set",
                       "current_history", version, /*check=*/true);
  });
}

absl::StatusOr<Page<std::string>> SqlStore::CurrentHistory(
    const PageSpec& page) {
  Page<std::string> versions;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(versions, History(tx, "current_history", page));
    return absl::OkStatus();
  }));
  return versions;
}

absl::StatusOr<v1::FactorSet> SqlStore::GetFactorSet(
    const std::string& version) {
  v1::FactorSet set;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading factor set",
                              "SELECT body FROM factor_sets WHERE version = ?",
                              SqlParams().Text(version)));
    if (rows.empty()) return NotStored("factor set", version);
    ASSIGN_OR_RETURN(set, Parse<v1::FactorSet>(rows.Bytes(0, 0), "factor set"));
    return absl::OkStatus();
  }));
  return set;
}

absl::StatusOr<Page<v1::FactorSet>> SqlStore::ListFactorSets(
    const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t after, SeqAfter(page.after));
  std::vector<std::pair<std::string, v1::FactorSet>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing factor sets",
                 "SELECT seq, body FROM factor_sets WHERE seq > ? "
                 "ORDER BY seq LIMIT ?",
                 SqlParams().Int(after).Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::FactorSet set,
                       Parse<v1::FactorSet>(rows.Bytes(i, 1), "factor set"));
      entries.emplace_back(absl::StrCat(rows.Int(i, 0)), std::move(set));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

}  // namespace headroom
