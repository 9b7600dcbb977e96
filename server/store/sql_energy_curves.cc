// Versioned energy curve sets over SQL.

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

absl::StatusOr<v1::EnergyCurveSet> SqlStore::AddEnergyCurveSet(
    v1::EnergyCurveSet set, bool make_current) {
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        const std::string version,
        InsertVersioned(tx, "energy_curve_sets", "ec-", std::time(nullptr),
                        [&](const std::string& v) {
                          set.set_version(v);
                          return DeterministicBytes(set);
                        }));
    if (!make_current) return absl::OkStatus();
    return MakeCurrent(tx, "energy curve set", "energy_curve_sets",
                       "current_energy_curve_set", "energy_current_history",
                       version, /*check=*/false);
  }));
  return set;
}

absl::Status SqlStore::SetCurrentEnergyCurveSet(const std::string& version) {
  return Write([&](Tx& tx) {
    return MakeCurrent(tx, "energy curve set", "energy_curve_sets",
                       "current_energy_curve_set", "energy_current_history",
                       version, /*check=*/true);
  });
}

absl::StatusOr<Page<std::string>> SqlStore::EnergyCurveHistory(
    const PageSpec& page) {
  Page<std::string> versions;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(versions, History(tx, "energy_current_history", page));
    return absl::OkStatus();
  }));
  return versions;
}

absl::StatusOr<v1::EnergyCurveSet> SqlStore::GetEnergyCurveSet(
    const std::string& version) {
  v1::EnergyCurveSet set;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("reading energy curves",
                 "SELECT body FROM energy_curve_sets WHERE version = ?",
                 SqlParams().Text(version)));
    if (rows.empty()) return NotStored("energy curve set", version);
    ASSIGN_OR_RETURN(
        set, Parse<v1::EnergyCurveSet>(rows.Bytes(0, 0), "energy curves"));
    return absl::OkStatus();
  }));
  return set;
}

absl::StatusOr<Page<v1::EnergyCurveSet>> SqlStore::ListEnergyCurveSets(
    const PageSpec& page) {
  std::vector<std::pair<std::string, v1::EnergyCurveSet>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    // The key is a version (the List RPC's page token names it): its seq.
    int64_t after_seq = 0;
    if (!page.after.empty()) {
      ASSIGN_OR_RETURN(
          SqlRows found,
          tx.Query("listing energy curves",
                   "SELECT seq FROM energy_curve_sets WHERE version = ?",
                   SqlParams().Text(page.after)));
      if (found.empty()) return NotStored("energy curve set", page.after);
      after_seq = found.Int(0, 0);
    }
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query(
            "listing energy curves",
            "SELECT version, body FROM energy_curve_sets WHERE seq > "
            "? ORDER BY seq LIMIT ?",
            SqlParams().Int(after_seq).Int(int64_t{page.max_entries} + 1)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          v1::EnergyCurveSet set,
          Parse<v1::EnergyCurveSet>(rows.Bytes(i, 1), "energy curves"));
      entries.emplace_back(rows.Bytes(i, 0), std::move(set));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

absl::StatusOr<std::optional<v1::EnergyCurveSet>>
SqlStore::CurrentEnergyCurveSet() {
  std::optional<v1::EnergyCurveSet> current;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("reading energy curves",
                              "SELECT e.body FROM energy_curve_sets e JOIN "
                              "current_energy_curve_set c ON c.version = "
                              "e.version"));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(
        current, Parse<v1::EnergyCurveSet>(rows.Bytes(0, 0), "energy curves"));
    return absl::OkStatus();
  }));
  return current;
}

}  // namespace headroom
