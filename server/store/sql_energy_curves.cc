// Versioned energy curve sets over SQL.

#include <ctime>

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

absl::StatusOr<std::vector<std::string>> SqlStore::EnergyCurveHistory() {
  std::vector<std::string> versions;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(versions, History(tx, "energy_current_history"));
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

absl::StatusOr<std::vector<v1::EnergyCurveSet>> SqlStore::ListEnergyCurveSets(
    const std::string& after_version, int limit) {
  std::vector<v1::EnergyCurveSet> sets;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    int64_t after_seq = 0;
    if (!after_version.empty()) {
      ASSIGN_OR_RETURN(
          SqlRows found,
          tx.Query("listing energy curves",
                   "SELECT seq FROM energy_curve_sets WHERE version = ?",
                   SqlParams().Text(after_version)));
      if (found.empty()) return NotStored("energy curve set", after_version);
      after_seq = found.Int(0, 0);
    }
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("listing energy curves",
                              "SELECT body FROM energy_curve_sets WHERE seq > "
                              "? ORDER BY seq LIMIT ?",
                              SqlParams().Int(after_seq).Int(limit)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(
          sets.emplace_back(),
          Parse<v1::EnergyCurveSet>(rows.Bytes(i, 0), "energy curves"));
    }
    return absl::OkStatus();
  }));
  return sets;
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
