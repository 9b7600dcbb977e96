#ifndef HEADROOM_SERVER_STORE_STORE_H_
#define HEADROOM_SERVER_STORE_STORE_H_

// The seam between the stateless planner and its state. Everything stateful
// goes through these interfaces, one per kind of data; SqlStore implements
// them over SQLite (the embedded default) and PostgreSQL.
//
// Listing, one convention for every listing (page.h): the interface's
// virtual List method takes its filters and a PageSpec and returns one
// Page, in the order its comment states, keyset-paged (the entries after
// the key PageSpec::after, the previous page's Page::next_after), bounded
// by PageSpec::max_entries and ::max_bytes. The non-virtual overload of the
// same name, without the PageSpec, follows the pages (store.cc) for a
// caller that needs every entry; where it takes an `int limit`, it stops
// after that many (every one when negative). A backend implements only the
// paged method. A malformed key is INVALID_ARGUMENT.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/density.pb.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/fleet.pb.h"
#include "headroom/v1/microbatch.pb.h"
#include "server/store/page.h"

namespace headroom {

// Versioned factor sets and which one is current.
class FactorSetStore {
 public:
  virtual ~FactorSetStore() = default;

  // The factor set answers are given with; nullopt before the first fit.
  virtual absl::StatusOr<std::optional<v1::FactorSet>> CurrentFactorSet() = 0;

  // Stores `set` under the next version ("fs-N"), returning it with the
  // version filled in; makes it current when `make_current`.
  virtual absl::StatusOr<v1::FactorSet> AddFactorSet(v1::FactorSet set,
                                                     bool make_current) = 0;

  // Makes a stored factor set current and records the change in the
  // history rollback walks; NOT_FOUND names an unknown version.
  virtual absl::Status SetCurrentFactorSet(const std::string& version) = 0;

  // Versions that were current, oldest first (repeats allowed), one page.
  virtual absl::StatusOr<Page<std::string>> CurrentHistory(
      const PageSpec& page) = 0;
  // The whole history (follows the pages).
  absl::StatusOr<std::vector<std::string>> CurrentHistory();

  // One stored factor set; NOT_FOUND names the version.
  virtual absl::StatusOr<v1::FactorSet> GetFactorSet(
      const std::string& version) = 0;

  // Stored factor sets, oldest first, one page.
  virtual absl::StatusOr<Page<v1::FactorSet>> ListFactorSets(
      const PageSpec& page) = 0;
  // Every stored factor set, oldest first (follows the pages).
  absl::StatusOr<std::vector<v1::FactorSet>> ListFactorSets();
};

// Measured runs, each stored once.
class RunStore {
 public:
  virtual ~RunStore() = default;

  // Appends measured runs (one transaction: all or none), skipping any run
  // identical to one already stored; returns how many runs the store holds
  // afterwards.
  virtual absl::StatusOr<int64_t> AddRuns(
      const std::vector<v1::MeasuredRun>& runs) = 0;

  // Stored measured runs in insertion order, one page.
  virtual absl::StatusOr<Page<v1::MeasuredRun>> ListRuns(
      const PageSpec& page) = 0;
  // Every stored measured run in insertion order (follows the pages).
  absl::StatusOr<std::vector<v1::MeasuredRun>> ListRuns();
  // The runs stored after `*after` (a Page::last_key; empty: all of them),
  // in insertion order, following the pages; sets `*after` to the last
  // one's key (unchanged when none follow). A reader that keeps `*after`
  // reads each run once.
  absl::StatusOr<std::vector<v1::MeasuredRun>> ListRunsAfter(
      std::string* after);

  // How many measured runs are stored (a full count: linear in the runs
  // on both stores, 0.36 s at a million on SQLite).
  virtual absl::StatusOr<int64_t> CountRuns() = 0;
  // The key (Page::last_key) of the run stored last; empty when none is.
  // Cheap (the largest key of an index), for a poll asking whether
  // anything was stored since.
  virtual absl::StatusOr<std::string> LastRunKey() = 0;
};

// Versioned energy curve sets and which one is current.
class EnergyCurveStore {
 public:
  virtual ~EnergyCurveStore() = default;

  // Stores an energy curve set under the next version ("ec-N") and makes it
  // current when `make_current`; returns it with the version filled in.
  virtual absl::StatusOr<v1::EnergyCurveSet> AddEnergyCurveSet(
      v1::EnergyCurveSet set, bool make_current) = 0;

  // The energy curves answers use; nullopt before the first is stored.
  virtual absl::StatusOr<std::optional<v1::EnergyCurveSet>>
  CurrentEnergyCurveSet() = 0;

  // Makes a stored energy curve set current and records the change in the
  // history rollback walks (as for factor sets); NOT_FOUND names an unknown
  // version.
  virtual absl::Status SetCurrentEnergyCurveSet(const std::string& version) = 0;

  // Energy curve set versions that were current, oldest first (repeats
  // allowed), one page.
  virtual absl::StatusOr<Page<std::string>> EnergyCurveHistory(
      const PageSpec& page) = 0;
  // The whole history (follows the pages).
  absl::StatusOr<std::vector<std::string>> EnergyCurveHistory();

  // One stored energy curve set; NOT_FOUND names the version.
  virtual absl::StatusOr<v1::EnergyCurveSet> GetEnergyCurveSet(
      const std::string& version) = 0;

  // Stored energy curve sets oldest first, one page. The page key is a
  // set's version: the page holds the sets stored after the set
  // `page.after` names ("" starts at the first); NOT_FOUND when that
  // version is not stored.
  virtual absl::StatusOr<Page<v1::EnergyCurveSet>> ListEnergyCurveSets(
      const PageSpec& page) = 0;
  // The oldest `limit` stored sets (every one when negative; follows the
  // pages).
  absl::StatusOr<std::vector<v1::EnergyCurveSet>> ListEnergyCurveSets(
      int limit);
};

// Measured energy runs (from energy probes), each stored once under a key.
class EnergyRunStore {
 public:
  virtual ~EnergyRunStore() = default;

  // Stores `run` under `key` (the probe result's stored key); a key stored
  // already keeps its run (a re-sent result is one run). Returns whether it
  // was new.
  virtual absl::StatusOr<bool> AddEnergyRun(const std::string& key,
                                            const v1::EnergyRun& run) = 0;

  // Stored energy runs in the order they were stored; simulated ones only
  // with `include_simulated`. One page.
  virtual absl::StatusOr<Page<v1::EnergyRun>> ListEnergyRuns(
      bool include_simulated, const PageSpec& page) = 0;
  // The oldest `limit` such runs (every one when negative; follows the
  // pages).
  absl::StatusOr<std::vector<v1::EnergyRun>> ListEnergyRuns(
      bool include_simulated, int limit);

  // How many are stored, and how many of those are simulated.
  virtual absl::StatusOr<std::pair<int64_t, int64_t>> CountEnergyRuns() = 0;
};

// Serve-while-train runs for density rankings.
class DensityRunStore {
 public:
  virtual ~DensityRunStore() = default;

  // Stores density runs in one transaction; a run whose id is stored
  // already replaces it. Returns how many are stored afterwards.
  virtual absl::StatusOr<int64_t> AddDensityRuns(
      const std::vector<v1::DensityRawRun>& runs) = 0;

  // Stored density runs in id order, only those matching every non-empty
  // filter, one page.
  virtual absl::StatusOr<Page<v1::DensityRawRun>> ListDensityRuns(
      const std::string& arch, const std::string& dtype,
      const std::string& mode, const PageSpec& page) = 0;
  // Every such run (follows the pages).
  absl::StatusOr<std::vector<v1::DensityRawRun>> ListDensityRuns(
      const std::string& arch, const std::string& dtype,
      const std::string& mode);
};

// The probe queue (README.md, "Workers and probes").
class ProbeQueue {
 public:
  virtual ~ProbeQueue() = default;

  // Stores a new probe under the next id ("p-N"), QUEUED; returns it.
  virtual absl::StatusOr<v1::Probe> AddProbe(v1::Probe probe) = 0;

  // One probe; NOT_FOUND names the id.
  virtual absl::StatusOr<v1::Probe> GetProbe(const std::string& id) = 0;

  // Probes newest first, only those in `state` unless STATE_UNSPECIFIED,
  // one page.
  virtual absl::StatusOr<Page<v1::Probe>> ListProbes(v1::Probe::State state,
                                                     const PageSpec& page) = 0;
  // The newest `limit` such probes (every one when negative).
  absl::StatusOr<std::vector<v1::Probe>> ListProbes(v1::Probe::State state,
                                                    int limit);

  // Atomically hands the oldest queued probe `worker` can run to the
  // worker: RUNNING, a new assignment id, a lease until now + lease_ms.
  // `gpus` is the catalog kind of each of the worker's GPUs, one entry per
  // GPU ("" for a card the catalog does not know): a kind listed N times is
  // N GPUs of it. The worker can run a probe pinned to it that needs no
  // more GPUs (GpusNeeded) than its most numerous kind has (at least one),
  // or an unpinned probe asking for a kind it holds at least GpusNeeded of,
  // with an executor among `executors` (or none asked); learning probes,
  // request.learn_key set, only when no other waits. A probe it cannot hold
  // does not block the ones behind it. nullopt when none waits. Exactly one
  // caller gets each probe.
  virtual absl::StatusOr<std::optional<v1::Probe>> ClaimProbe(
      const std::string& worker, const std::vector<std::string>& gpus,
      const std::vector<std::string>& executors, int64_t now_ms,
      int64_t lease_ms) = 0;

  // Extends the lease of a running assignment; NOT_FOUND when the
  // assignment is no longer the probe's (it was re-queued or ended).
  virtual absl::Status RenewLease(const std::string& assignment_id,
                                  int64_t until_ms) = 0;

  // Puts every RUNNING probe whose lease ended before `now_ms` back in the
  // queue; returns their ids.
  virtual absl::StatusOr<std::vector<std::string>> RequeueExpired(
      int64_t now_ms) = 0;

  // QUEUED probes past their expiry (request.expires_s after submission,
  // never taken by a worker: ExpiryDeadlineMs at or before `now_ms`),
  // soonest deadline first, one page. A read: nothing changes.
  virtual absl::StatusOr<Page<v1::Probe>> ListExpiredProbes(
      int64_t now_ms, const PageSpec& page) = 0;
  // The `limit` soonest such probes (every one when negative; follows the
  // pages).
  absl::StatusOr<std::vector<v1::Probe>> ListExpiredProbes(int64_t now_ms,
                                                           int limit);

  // Fails the probe `id` with `error` when it is still QUEUED past its
  // expiry (MarkExpired); otherwise (a worker took it, it was cancelled
  // meanwhile) returns it unchanged.
  virtual absl::StatusOr<v1::Probe> ExpireProbe(const std::string& id,
                                                int64_t now_ms,
                                                const std::string& error) = 0;

  // Stores one batch result of the probe's running assignment
  // `assignment_id`, leased to `worker`, under `key` (the planner derives it
  // from the probe, assignment, batch, repetition and mode), once. A key
  // seen before, or a batch, repetition and mode the probe holds a result
  // for already (measured under an earlier assignment), is a duplicate:
  // nothing changes and it returns false. FAILED_PRECONDITION (nothing
  // stored) unless the probe runs under `assignment_id` for `worker`, or
  // `worker` outlived its lease of it (CheckResultLease: a result journaled
  // through a long reconnect is kept). `run`, when given, is stored with the
  // result as a measured run in the same transaction (the result then refers to
  // it rather than holding its numbers twice). `updated`, when not null,
  // receives the probe as it is afterwards (also for a duplicate), so that the
  // caller needn't read it again.
  virtual absl::StatusOr<bool> RecordProbeResult(
      const std::string& probe_id, const std::string& assignment_id,
      const std::string& worker, const std::string& key,
      const v1::BatchResult& result, const std::optional<v1::MeasuredRun>& run,
      v1::Probe* updated) = 0;
  absl::StatusOr<bool> RecordProbeResult(
      const std::string& probe_id, const std::string& assignment_id,
      const std::string& worker, const std::string& key,
      const v1::BatchResult& result,
      const std::optional<v1::MeasuredRun>& run) {
    return RecordProbeResult(probe_id, assignment_id, worker, key, result, run,
                             nullptr);
  }

  // `worker` hands back its running assignment `assignment_id`: the probe
  // goes back to the queue with one more hand-back counted, or, when it has
  // been handed back `max_handbacks` times with this one, FAILS saying so.
  // FAILED_PRECONDITION (nothing changed) when the probe is not RUNNING
  // under `assignment_id` for `worker`.
  virtual absl::StatusOr<v1::Probe> HandBack(const std::string& probe_id,
                                             const std::string& assignment_id,
                                             const std::string& worker,
                                             uint32_t max_handbacks) = 0;

  // Ends the probe's current assignment: SUCCEEDED or FAILED (with
  // `error`), or back to QUEUED when `requeue`. Ignored (returns the probe
  // unchanged) when `assignment_id` is no longer the probe's.
  virtual absl::StatusOr<v1::Probe> FinishAssignment(
      const std::string& probe_id, const std::string& assignment_id,
      v1::Probe::State state, const std::string& error,
      const std::string& details_json, bool requeue) = 0;

  // QUEUED or RUNNING -> CANCELLED; a finished probe stays as it is.
  virtual absl::StatusOr<v1::Probe> CancelProbe(const std::string& id) = 0;

  // Probes per state.
  virtual absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>>
  CountProbes() = 0;
};

// The autotune cache (issue 7), by key id with the key's bytes.
class AutotuneCache {
 public:
  virtual ~AutotuneCache() = default;

  // Stores `record` under `id`, replacing an entry with the same id;
  // returns whether one was replaced.
  virtual absl::StatusOr<bool> PutAutotuneRecord(
      const std::string& id, const std::string& key_bytes,
      const v1::AutotuneRecord& record) = 0;
  // The record stored under `id` whose key bytes equal `key_bytes`.
  virtual absl::StatusOr<std::optional<v1::AutotuneRecord>> FindAutotuneRecord(
      const std::string& id, const std::string& key_bytes) = 0;
  // Entries oldest first (created_unix, then id), one page.
  virtual absl::StatusOr<Page<v1::AutotuneCacheEntry>> ListAutotuneRecords(
      const PageSpec& page) = 0;
  // Every entry (follows the pages).
  absl::StatusOr<std::vector<v1::AutotuneCacheEntry>> ListAutotuneRecords();
  // NOT_FOUND names an unknown id. A record a worker measured
  // (measured_by_probe set) is dropped only with `measured_too`, else
  // FAILED_PRECONDITION naming its probe; checked in the same transaction.
  virtual absl::Status DropAutotuneRecord(const std::string& id,
                                          bool measured_too) = 0;
};

// What is known about each worker.
class WorkerStore {
 public:
  virtual ~WorkerStore() = default;

  // Stores (or replaces) what is known about one worker.
  virtual absl::Status PutWorker(const v1::WorkerStatus& worker) = 0;
  // Workers by id, one page.
  virtual absl::StatusOr<Page<v1::WorkerStatus>> ListWorkers(
      const PageSpec& page) = 0;
  // Every worker by id (follows the pages).
  absl::StatusOr<std::vector<v1::WorkerStatus>> ListWorkers();
};

// Everything stateful, one interface per kind of data; a backend
// implements them all.
class Store : public FactorSetStore,
              public RunStore,
              public EnergyCurveStore,
              public EnergyRunStore,
              public DensityRunStore,
              public ProbeQueue,
              public AutotuneCache,
              public WorkerStore {
 public:
  ~Store() override = default;
};

}  // namespace headroom
#endif  // HEADROOM_SERVER_STORE_STORE_H_
