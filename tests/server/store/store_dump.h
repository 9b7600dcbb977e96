#ifndef HEADROOM_TESTS_SERVER_STORE_STORE_DUMP_H_
#define HEADROOM_TESTS_SERVER_STORE_STORE_DUMP_H_

// Everything a store holds, as text through the Store interface only: what
// a migrated database must read back as its old build stored it. Used by
// the migration test and by tests/data/store/make_v9_sqlite.cc, which
// wrote the expected dump with the store of commit a72e992.

#include <string>

#include "absl/strings/str_cat.h"
#include "google/protobuf/text_format.h"
#include "server/store/store.h"

namespace headroom {
namespace testing {

inline std::string DumpStore(Store& store) {
  std::string dump;
  const auto add = [&dump](const char* what,
                           const google::protobuf::Message& message) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(message, &text);
    absl::StrAppend(&dump, "== ", what, "\n", text);
  };
  const auto status = [&dump](const char* what, const absl::Status& s) {
    if (!s.ok()) absl::StrAppend(&dump, "!! ", what, ": ", s.ToString(), "\n");
  };
  auto sets = store.ListFactorSets();
  status("factor sets", sets.status());
  if (sets.ok())
    for (const auto& set : *sets) add("factor set", set);
  auto current = store.CurrentFactorSet();
  status("current factor set", current.status());
  if (current.ok() && current->has_value()) add("current", **current);
  auto history = store.CurrentHistory();
  status("history", history.status());
  if (history.ok())
    for (const auto& v : *history) absl::StrAppend(&dump, "history ", v, "\n");
  auto runs = store.ListRuns();
  status("runs", runs.status());
  if (runs.ok())
    for (const auto& run : *runs) add("run", run);
  auto curves = store.ListEnergyCurveSets(1000);
  status("curves", curves.status());
  if (curves.ok())
    for (const auto& set : *curves) add("energy curve set", set);
  auto current_curves = store.CurrentEnergyCurveSet();
  status("current curves", current_curves.status());
  if (current_curves.ok() && current_curves->has_value()) {
    add("current curves", **current_curves);
  }
  auto curve_history = store.EnergyCurveHistory();
  status("curve history", curve_history.status());
  if (curve_history.ok()) {
    for (const auto& v : *curve_history)
      absl::StrAppend(&dump, "curve history ", v, "\n");
  }
  auto density = store.ListDensityRuns("", "", "");
  status("density", density.status());
  if (density.ok())
    for (const auto& run : *density) add("density run", run);
  auto probes = store.ListProbes(v1::Probe::STATE_UNSPECIFIED, -1);
  status("probes", probes.status());
  if (probes.ok())
    for (const auto& probe : *probes) add("probe", probe);
  auto counts = store.CountProbes();
  status("probe counts", counts.status());
  if (counts.ok()) {
    for (const auto& [state, n] : *counts)
      absl::StrAppend(&dump, "probes ", v1::Probe::State_Name(state), " ", n,
                      "\n");
  }
  auto autotune = store.ListAutotuneRecords();
  status("autotune", autotune.status());
  if (autotune.ok())
    for (const auto& entry : *autotune) add("autotune", entry);
  auto workers = store.ListWorkers();
  status("workers", workers.status());
  if (workers.ok())
    for (const auto& worker : *workers) add("worker", worker);
  return dump;
}

}  // namespace testing
}  // namespace headroom

#endif  // HEADROOM_TESTS_SERVER_STORE_STORE_DUMP_H_
