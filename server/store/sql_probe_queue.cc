// The probe queue over SQL: a row per probe (its body without results,
// and the columns the claim reads), a row per batch result.

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/deterministic_bytes.h"
#include "base/status_macros.h"
#include "server/store/probe_transitions.h"
#include "server/store/sql_store.h"
#include "server/store/sql_tx.h"

namespace headroom {

using Tx = SqlStore::Tx;
using sql::InsertRun;
using sql::NextSeq;
using sql::NotStored;
using sql::Parse;
using sql::Placeholders;
using sql::ProbeBody;

namespace {

// --- A batch result and the measured run it became, stored once ---

// Which of a batch result's fields its measured run holds (bit per field).
enum RunField : int64_t {
  kRunBatch = 1,
  kRunPeak = 2,
  kRunDevicePeak = 4,
  kRunStepSeconds = 8,
  kRunEnergy = 16,
};

// `result` without the numbers `run` holds as well; `fields` says which.
v1::BatchResult SplitResult(const v1::BatchResult& result,
                            const v1::MeasuredRun& run, int64_t* fields) {
  v1::BatchResult rest = result;
  *fields = 0;
  if (run.batch() == result.batch()) {
    rest.clear_batch();
    *fields |= kRunBatch;
  }
  const auto take = [&](bool has, double value, bool run_has, double run_value,
                        RunField field, void (v1::BatchResult::*clear)()) {
    if (has && run_has && value == run_value) {
      (rest.*clear)();
      *fields |= field;
    }
  };
  take(result.has_peak_allocated_gb(), result.peak_allocated_gb(),
       run.has_measured_peak_gb(), run.measured_peak_gb(), kRunPeak,
       &v1::BatchResult::clear_peak_allocated_gb);
  take(result.has_device_peak_gb(), result.device_peak_gb(),
       run.has_device_peak_gb(), run.device_peak_gb(), kRunDevicePeak,
       &v1::BatchResult::clear_device_peak_gb);
  take(result.has_step_seconds(), result.step_seconds(), run.has_step_seconds(),
       run.step_seconds(), kRunStepSeconds,
       &v1::BatchResult::clear_step_seconds);
  take(result.has_energy_j(), result.energy_j(), run.has_energy_j(),
       run.energy_j(), kRunEnergy, &v1::BatchResult::clear_energy_j);
  return rest;
}

// The inverse of SplitResult.
void JoinResult(const v1::MeasuredRun& run, int64_t fields,
                v1::BatchResult* result) {
  if (fields & kRunBatch) result->set_batch(static_cast<uint32_t>(run.batch()));
  if (fields & kRunPeak) result->set_peak_allocated_gb(run.measured_peak_gb());
  if (fields & kRunDevicePeak) result->set_device_peak_gb(run.device_peak_gb());
  if (fields & kRunStepSeconds) result->set_step_seconds(run.step_seconds());
  if (fields & kRunEnergy) result->set_energy_j(run.energy_j());
}

// --- Probes: a row for the probe, a row per result ---

// Fills in the results of `probes` (read without them) from their rows.
absl::Status AddResults(Tx& tx, std::vector<v1::Probe>& probes) {
  if (probes.empty()) return absl::OkStatus();
  std::map<std::string, v1::Probe*> by_id;
  SqlParams ids;
  for (v1::Probe& probe : probes) {
    by_id[probe.id()] = &probe;
    ids.Text(probe.id());
  }
  ASSIGN_OR_RETURN(
      SqlRows rows,
      tx.Query("reading probe results",
               absl::StrCat("SELECT r.probe_id, r.run_fields, r.body, m.body "
                            "FROM probe_results r LEFT JOIN measured_runs m "
                            "ON m.seq = r.run_seq WHERE r.probe_id IN (",
                            Placeholders(probes.size()), ") ORDER BY r.seq"),
               ids));
  for (int i = 0; i < rows.size(); ++i) {
    ASSIGN_OR_RETURN(v1::BatchResult result,
                     Parse<v1::BatchResult>(rows.Bytes(i, 2), "probe result"));
    if (const int64_t fields = rows.Int(i, 1); fields != 0) {
      if (rows.IsNull(i, 3)) {
        return absl::DataLossError(
            absl::StrCat("probe ", rows.Bytes(i, 0),
                         " has a result whose measured run is not stored"));
      }
      ASSIGN_OR_RETURN(v1::MeasuredRun run,
                       Parse<v1::MeasuredRun>(rows.Bytes(i, 3), "run"));
      JoinResult(run, fields, &result);
    }
    *by_id[rows.Bytes(i, 0)]->add_results() = std::move(result);
  }
  return absl::OkStatus();
}

// Probes from rows whose column `column` holds a probe's body, results
// added.
absl::StatusOr<std::vector<v1::Probe>> ProbesFromRows(Tx& tx,
                                                      const SqlRows& rows,
                                                      int column) {
  std::vector<v1::Probe> probes;
  for (int i = 0; i < rows.size(); ++i) {
    ASSIGN_OR_RETURN(probes.emplace_back(),
                     Parse<v1::Probe>(rows.Bytes(i, column), "probe"));
  }
  RETURN_IF_ERROR(AddResults(tx, probes));
  return probes;
}

// One probe with its results; locked until the commit when `lock`.
absl::StatusOr<v1::Probe> LoadProbe(Tx& tx, const std::string& id, bool lock) {
  ASSIGN_OR_RETURN(SqlRows rows,
                   tx.Query("reading probe",
                            absl::StrCat("SELECT body FROM probes WHERE id = ?",
                                         lock ? tx.dialect().for_update : ""),
                            SqlParams().Text(id)));
  if (rows.empty()) return NotStored("probe", id);
  ASSIGN_OR_RETURN(std::vector<v1::Probe> probes, ProbesFromRows(tx, rows, 0));
  return std::move(probes[0]);
}

// Writes the probe's body and its queue columns.
absl::Status UpdateProbe(Tx& tx, const v1::Probe& probe,
                         int64_t lease_until_ms) {
  return tx.Exec(
      "updating probe",
      "UPDATE probes SET state = ?, assignment_id = ?, lease_until_ms = ?, "
      "body = ?, expires_at_ms = ? WHERE id = ?",
      SqlParams()
          .Int(probe.state())
          .Text(probe.state() == v1::Probe::RUNNING ? probe.assignment_id()
                                                    : std::string())
          .Int(lease_until_ms)
          .Bytes(ProbeBody(probe))
          .Int(ExpiryDeadlineMs(probe))
          .Text(probe.id()));
}

}  // namespace

absl::StatusOr<v1::Probe> SqlStore::AddProbe(v1::Probe probe) {
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(const int64_t seq, NextSeq(tx, "probes"));
    probe.set_id(absl::StrCat("p-", seq));
    probe.set_state(v1::Probe::QUEUED);
    return tx.Exec("storing probe",
                   "INSERT INTO probes (seq, id, state, gpu, worker_pin, "
                   "executor, body, background, expires_at_ms, gpus) VALUES "
                   "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   SqlParams()
                       .Int(seq)
                       .Text(probe.id())
                       .Int(probe.state())
                       .Text(probe.gpu())
                       .Text(probe.request().worker())
                       .Text(probe.request().executor())
                       .Bytes(ProbeBody(probe))
                       .Int(probe.request().learn_key().empty() ? 0 : 1)
                       .Int(ExpiryDeadlineMs(probe))
                       .Int(GpusNeeded(probe)));
  }));
  probe.clear_results();
  return probe;
}

absl::StatusOr<v1::Probe> SqlStore::GetProbe(const std::string& id) {
  v1::Probe probe;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, id, /*lock=*/false));
    return absl::OkStatus();
  }));
  return probe;
}

absl::StatusOr<Page<v1::Probe>> SqlStore::ListProbes(v1::Probe::State state,
                                                     const PageSpec& page) {
  ASSIGN_OR_RETURN(const int64_t before, SeqAfter(page.after));
  std::vector<std::pair<std::string, v1::Probe>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    // Newest first: the next page holds the probes before the last one.
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("listing probes",
                 "SELECT seq, body FROM probes WHERE (? = 0 OR state = ?) "
                 "AND (? = 0 OR seq < ?) ORDER BY seq DESC LIMIT ?",
                 SqlParams().Int(state).Int(state).Int(before).Int(before).Int(
                     int64_t{page.max_entries} + 1)));
    ASSIGN_OR_RETURN(std::vector<v1::Probe> probes,
                     ProbesFromRows(tx, rows, 1));
    for (int i = 0; i < rows.size(); ++i) {
      entries.emplace_back(absl::StrCat(rows.Int(i, 0)), std::move(probes[i]));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

absl::StatusOr<std::optional<v1::Probe>> SqlStore::ClaimProbe(
    const std::string& worker, const std::vector<std::string>& gpus,
    const std::vector<std::string>& executors, int64_t now_ms,
    int64_t lease_ms) {
  std::optional<v1::Probe> claimed;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    claimed.reset();
    // The claim rule: the oldest queued probe this worker can run (pinned
    // to it with no more GPUs than its largest kind holds, or unpinned and
    // asking for one of its kinds with no more GPUs than it has of that
    // kind; any executor or one of its executors), learning probes only
    // behind every other. A worker runs one assignment at a time, so an
    // idle worker's GPUs are all free. No claimer holds it right now: its
    // row stays locked until the commit.
    std::map<std::string, int64_t> count;  // GPUs per kind, ordered
    int64_t largest = 1;                   // a pinned probe's bound
    for (const std::string& gpu : gpus) {
      largest = std::max(largest, ++count[gpu]);
    }
    SqlParams params;
    params.Int(v1::Probe::QUEUED).Text(worker).Int(largest);
    std::string kinds;
    for (const auto& [kind, n] : count) {
      absl::StrAppend(&kinds, kinds.empty() ? "" : " OR ",
                      "(gpu = ? AND gpus <= ?)");
      params.Text(kind).Int(n);
    }
    if (kinds.empty()) kinds = "1 = 0";
    for (const std::string& executor : executors) params.Text(executor);
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query(
            "claiming probe",
            absl::StrCat("SELECT id FROM probes WHERE state = ? AND "
                         "(CASE WHEN worker_pin <> '' THEN (worker_pin = "
                         "? AND gpus <= ?) ELSE (",
                         kinds, ") END) AND (executor = '' OR executor IN (",
                         Placeholders(executors.size()),
                         ")) ORDER BY background, seq LIMIT 1",
                         tx.dialect().skip_locked),
            params));
    if (rows.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(v1::Probe probe,
                     LoadProbe(tx, rows.Bytes(0, 0), /*lock=*/false));
    MarkClaimed(&probe, worker, now_ms);
    RETURN_IF_ERROR(UpdateProbe(tx, probe, now_ms + lease_ms));
    claimed = std::move(probe);
    return absl::OkStatus();
  }));
  return claimed;
}

absl::Status SqlStore::RenewLease(const std::string& assignment_id,
                                  int64_t until_ms) {
  return Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("renewing lease",
                 "UPDATE probes SET lease_until_ms = CASE WHEN "
                 "lease_until_ms > ? THEN lease_until_ms ELSE ? END "
                 "WHERE assignment_id = ? AND state = ?",
                 SqlParams()
                     .Int(until_ms)
                     .Int(until_ms)
                     .Text(assignment_id)
                     .Int(v1::Probe::RUNNING)));
    if (rows.changed() == 0) {
      return absl::NotFoundError(absl::StrCat(
          "assignment '", assignment_id.substr(0, 64), "' is not running"));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::vector<std::string>> SqlStore::RequeueExpired(
    int64_t now_ms) {
  static constexpr char kExpired[] =
      "SELECT id FROM probes WHERE state = ? AND lease_until_ms < ? "
      "ORDER BY seq LIMIT 1000";
  std::vector<std::string> requeued;
  // Read first: the write transaction below runs only when a lease ran
  // out, not on every dispatcher pass.
  bool any = false;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("finding expired leases", kExpired,
                              SqlParams().Int(v1::Probe::RUNNING).Int(now_ms)));
    any = !rows.empty();
    return absl::OkStatus();
  }));
  if (!any) return requeued;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    requeued.clear();
    // A probe another planner is finishing right now is skipped, not
    // waited for; the lock re-checks the lease on the row as it is now.
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("finding expired leases",
                              absl::StrCat(kExpired, tx.dialect().skip_locked),
                              SqlParams().Int(v1::Probe::RUNNING).Int(now_ms)));
    for (int i = 0; i < rows.size(); ++i) {
      ASSIGN_OR_RETURN(v1::Probe probe,
                       LoadProbe(tx, rows.Bytes(i, 0), /*lock=*/false));
      MarkRequeued(&probe, now_ms);
      RETURN_IF_ERROR(UpdateProbe(tx, probe, 0));
      requeued.push_back(probe.id());
    }
    return absl::OkStatus();
  }));
  return requeued;
}

absl::StatusOr<Page<v1::Probe>> SqlStore::ListExpiredProbes(
    int64_t now_ms, const PageSpec& page) {
  // The key is (deadline, seq), written as CreatedIdKey writes
  // (created_unix, id).
  int64_t deadline = 0;
  int64_t seq = 0;
  if (!page.after.empty()) {
    std::string seq_text;
    RETURN_IF_ERROR(ParseCreatedIdKey(page.after, &deadline, &seq_text));
    ASSIGN_OR_RETURN(seq, SeqAfter(seq_text));
  }
  std::vector<std::pair<std::string, v1::Probe>> entries;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(
        SqlRows rows,
        tx.Query("finding expired probes",
                 "SELECT expires_at_ms, seq, body FROM probes WHERE "
                 "expires_at_ms > 0 AND expires_at_ms <= ? AND state = ? AND "
                 "(? = 0 OR expires_at_ms > ? OR (expires_at_ms = ? AND "
                 "seq > ?)) ORDER BY expires_at_ms, seq LIMIT ?",
                 SqlParams()
                     .Int(now_ms)
                     .Int(v1::Probe::QUEUED)
                     .Int(page.after.empty() ? 0 : 1)
                     .Int(deadline)
                     .Int(deadline)
                     .Int(seq)
                     .Int(int64_t{page.max_entries} + 1)));
    ASSIGN_OR_RETURN(std::vector<v1::Probe> probes,
                     ProbesFromRows(tx, rows, 2));
    for (int i = 0; i < rows.size(); ++i) {
      entries.emplace_back(
          CreatedIdKey(rows.Int(i, 0), absl::StrCat(rows.Int(i, 1))),
          std::move(probes[i]));
    }
    return absl::OkStatus();
  }));
  return FillPage(std::move(entries), page);
}

absl::StatusOr<v1::Probe> SqlStore::ExpireProbe(const std::string& id,
                                                int64_t now_ms,
                                                const std::string& error) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    // Locked: a claim by another planner came first (the probe is RUNNING
    // and stays so) or skips this row and then finds it FAILED.
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, id, /*lock=*/true));
    if (!MarkExpired(&probe, now_ms, error)) return absl::OkStatus();
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<bool> SqlStore::RecordProbeResult(
    const std::string& probe_id, const std::string& assignment_id,
    const std::string& worker, const std::string& key,
    const v1::BatchResult& result, const std::optional<v1::MeasuredRun>& run,
    v1::Probe* updated) {
  bool inserted = false;
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    inserted = false;
    // The probe's row is locked first, so results another planner stores
    // for the same probe at the same time are appended, not lost.
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, probe_id, /*lock=*/true));
    // A key stored before is a duplicate even once the lease is gone: a
    // re-sent result whose acknowledgement was lost.
    ASSIGN_OR_RETURN(SqlRows seen,
                     tx.Query("reading probe results",
                              "SELECT 1 FROM probe_results WHERE key = ?",
                              SqlParams().Text(key)));
    if (!seen.empty()) return absl::OkStatus();
    RETURN_IF_ERROR(CheckResultLease(probe, assignment_id, worker));
    if (HasResultFor(probe, result)) return absl::OkStatus();
    SqlParams params;
    params.Text(key).Text(probe_id);
    if (run.has_value()) {
      ASSIGN_OR_RETURN(const int64_t run_seq, InsertRun(tx, *run));
      int64_t fields = 0;
      const v1::BatchResult rest = SplitResult(result, *run, &fields);
      params.Int(run_seq).Int(fields).Bytes(DeterministicBytes(rest));
    } else {
      params.Null().Int(0).Bytes(DeterministicBytes(result));
    }
    ASSIGN_OR_RETURN(SqlRows stored,
                     tx.Query("storing probe result",
                              "INSERT INTO probe_results (key, probe_id, "
                              "run_seq, run_fields, body) VALUES "
                              "(?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                              params));
    inserted = stored.changed() == 1;
    if (inserted) *probe.add_results() = result;
    return absl::OkStatus();
  }));
  if (updated != nullptr) *updated = std::move(probe);
  return inserted;
}

absl::StatusOr<v1::Probe> SqlStore::FinishAssignment(
    const std::string& probe_id, const std::string& assignment_id,
    v1::Probe::State state, const std::string& error,
    const std::string& details_json, bool requeue) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, probe_id, /*lock=*/true));
    if (!MarkFinished(&probe, assignment_id, state, error, details_json,
                      requeue)) {
      return absl::OkStatus();  // that assignment is no longer the probe's
    }
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqlStore::HandBack(const std::string& probe_id,
                                             const std::string& assignment_id,
                                             const std::string& worker,
                                             uint32_t max_handbacks) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, probe_id, /*lock=*/true));
    RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
    MarkHandedBack(&probe, max_handbacks);
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<v1::Probe> SqlStore::CancelProbe(const std::string& id) {
  v1::Probe probe;
  RETURN_IF_ERROR(Write([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(probe, LoadProbe(tx, id, /*lock=*/true));
    if (!MarkCancelled(&probe)) return absl::OkStatus();  // already final
    return UpdateProbe(tx, probe, 0);
  }));
  return probe;
}

absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>>
SqlStore::CountProbes() {
  std::vector<std::pair<v1::Probe::State, int64_t>> counts;
  RETURN_IF_ERROR(Read([&](Tx& tx) -> absl::Status {
    ASSIGN_OR_RETURN(SqlRows rows,
                     tx.Query("counting probes",
                              "SELECT state, COUNT(*) FROM probes GROUP BY "
                              "state ORDER BY state"));
    for (int i = 0; i < rows.size(); ++i) {
      const int64_t state = rows.Int(i, 0);
      if (!v1::Probe::State_IsValid(static_cast<int>(state))) continue;
      counts.emplace_back(static_cast<v1::Probe::State>(state), rows.Int(i, 1));
    }
    return absl::OkStatus();
  }));
  return counts;
}

}  // namespace headroom
