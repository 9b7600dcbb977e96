#ifndef HEADROOM_SERVER_STORE_PROBE_TRANSITIONS_H_
#define HEADROOM_SERVER_STORE_PROBE_TRANSITIONS_H_

// The probe queue's state machine, the same for every store: each function
// changes a probe read inside the store's transaction, which then writes it
// back. Only persistence differs between SQLite and PostgreSQL.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "headroom/v1/fleet.pb.h"

namespace headroom {

// QUEUED -> RUNNING for `worker`: one more attempt, a new assignment id
// ("<probe id>.<attempt>").
void MarkClaimed(v1::Probe* probe, const std::string& worker, int64_t now_ms);

// RUNNING -> QUEUED (its lease ran out): no assignment.
void MarkRequeued(v1::Probe* probe, int64_t now_ms);

// Ends the running assignment `assignment_id`: `state` (with `error` and
// `details_json` when given), or back to QUEUED when `requeue`. Returns
// false and changes nothing when that assignment is no longer the probe's.
bool MarkFinished(v1::Probe* probe, const std::string& assignment_id,
                  v1::Probe::State state, const std::string& error,
                  const std::string& details_json, bool requeue);

// OK when `probe` is RUNNING under `assignment_id`, claimed by `worker`;
// FAILED_PRECONDITION saying what it is instead.
absl::Status CheckLeased(const v1::Probe& probe,
                         const std::string& assignment_id,
                         const std::string& worker);

// OK when a batch result of `assignment_id` from `worker` may be stored:
// the probe runs under it (CheckLeased), or `worker` held the probe's last
// lease and outlived it (`assignment_id` one of the probe's attempts) while
// the probe waits in the queue again or runs on `worker` again. So a result
// journaled through a reconnect longer than the lease is kept and its batch
// is not measured again. Otherwise CheckLeased's FAILED_PRECONDITION.
absl::Status CheckResultLease(const v1::Probe& probe,
                              const std::string& assignment_id,
                              const std::string& worker);

// Whether `probe` holds a result for the batch, repetition and mode of
// `result` already.
bool HasResultFor(const v1::Probe& probe, const v1::BatchResult& result);

// A hand-back of the running assignment (CheckLeased first): one more
// hand-back, then QUEUED, or FAILED ("handed back N times") once the count
// reaches `max_handbacks`.
void MarkHandedBack(v1::Probe* probe, uint32_t max_handbacks);

// When a queued probe fails for waiting too long: created_unix_ms plus
// request.expires_s, for a QUEUED probe that has an expiry and that no
// worker has taken yet (attempts 0); 0 (never) otherwise. Stores keep it in
// a column so that the dispatcher finds expired probes without a scan.
int64_t ExpiryDeadlineMs(const v1::Probe& probe);

// QUEUED probe past its deadline (ExpiryDeadlineMs at or before `now_ms`)
// -> FAILED with `error`; returns false and changes nothing otherwise (a
// worker took it, it was cancelled, or it has time left).
bool MarkExpired(v1::Probe* probe, int64_t now_ms, const std::string& error);

// The GPUs of one node a probe needs at once: its setup's gpus (0 and 1
// alike: one). Stores keep it in a column, so a claim picks only probes
// the claiming worker has enough GPUs of the kind for.
uint32_t GpusNeeded(const v1::Probe& probe);

// QUEUED or RUNNING -> CANCELLED; returns false and changes nothing for a
// probe already in a final state.
bool MarkCancelled(v1::Probe* probe);

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_PROBE_TRANSITIONS_H_
