#include "server/store/probe_transitions.h"

#include <algorithm>
#include <ctime>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace headroom {
namespace {

int64_t WallClockMs() {
  return static_cast<int64_t>(std::time(nullptr)) * 1000;
}

}  // namespace

void MarkClaimed(v1::Probe* probe, const std::string& worker, int64_t now_ms) {
  probe->set_state(v1::Probe::RUNNING);
  probe->set_attempts(probe->attempts() + 1);
  probe->set_assignment_id(absl::StrCat(probe->id(), ".", probe->attempts()));
  probe->set_worker(worker);
  probe->set_updated_unix_ms(now_ms);
}

void MarkRequeued(v1::Probe* probe, int64_t now_ms) {
  probe->set_state(v1::Probe::QUEUED);
  probe->set_assignment_id("");
  probe->set_updated_unix_ms(now_ms);
}

bool MarkFinished(v1::Probe* probe, const std::string& assignment_id,
                  v1::Probe::State state, const std::string& error,
                  const std::string& details_json, bool requeue) {
  if (probe->state() != v1::Probe::RUNNING ||
      probe->assignment_id() != assignment_id) {
    return false;
  }
  probe->set_state(requeue ? v1::Probe::QUEUED : state);
  if (requeue) probe->set_assignment_id("");
  if (!error.empty()) probe->set_error(error);
  if (!details_json.empty()) probe->set_details_json(details_json);
  probe->set_updated_unix_ms(WallClockMs());
  return true;
}

absl::Status CheckLeased(const v1::Probe& probe,
                         const std::string& assignment_id,
                         const std::string& worker) {
  if (probe.state() == v1::Probe::RUNNING &&
      probe.assignment_id() == assignment_id && probe.worker() == worker) {
    return absl::OkStatus();
  }
  if (probe.state() != v1::Probe::RUNNING) {
    return absl::FailedPreconditionError(
        absl::StrCat("probe ", probe.id(), " is ",
                     v1::Probe::State_Name(probe.state()), ", not running"));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "probe ", probe.id(), " runs as assignment ", probe.assignment_id(),
      " on worker ", probe.worker(), ", not as ", assignment_id.substr(0, 64),
      " on ", worker.substr(0, 128)));
}

absl::Status CheckResultLease(const v1::Probe& probe,
                              const std::string& assignment_id,
                              const std::string& worker) {
  absl::Status leased = CheckLeased(probe, assignment_id, worker);
  if (leased.ok() || probe.worker() != worker) return leased;
  // Attempt k's assignment is "<probe id>.<k>" (MarkClaimed).
  absl::string_view attempt = assignment_id;
  uint32_t k = 0;
  if (!absl::ConsumePrefix(&attempt, absl::StrCat(probe.id(), ".")) ||
      !absl::SimpleAtoi(attempt, &k) || k == 0 || k > probe.attempts()) {
    return leased;
  }
  // Queued again: `worker` held its last attempt. Running on `worker`
  // again: it may store results for this probe already.
  if ((probe.state() == v1::Probe::QUEUED && k == probe.attempts()) ||
      probe.state() == v1::Probe::RUNNING) {
    return absl::OkStatus();
  }
  return leased;
}

bool HasResultFor(const v1::Probe& probe, const v1::BatchResult& result) {
  for (const v1::BatchResult& stored : probe.results()) {
    if (stored.batch() == result.batch() &&
        stored.repetition() == result.repetition() &&
        stored.mode() == result.mode()) {
      return true;
    }
  }
  return false;
}

void MarkHandedBack(v1::Probe* probe, uint32_t max_handbacks) {
  probe->set_handbacks(probe->handbacks() + 1);
  if (probe->handbacks() >= max_handbacks) {
    probe->set_state(v1::Probe::FAILED);
    probe->set_error(absl::StrCat("handed back ", probe->handbacks(),
                                  " times (the limit is ", max_handbacks,
                                  "); not queued again"));
  } else {
    probe->set_state(v1::Probe::QUEUED);
    probe->set_assignment_id("");
  }
  probe->set_updated_unix_ms(WallClockMs());
}

int64_t ExpiryDeadlineMs(const v1::Probe& probe) {
  if (probe.state() != v1::Probe::QUEUED || probe.attempts() != 0 ||
      probe.request().expires_s() == 0) {
    return 0;
  }
  return probe.created_unix_ms() + int64_t{probe.request().expires_s()} * 1000;
}

bool MarkExpired(v1::Probe* probe, int64_t now_ms, const std::string& error) {
  const int64_t deadline = ExpiryDeadlineMs(*probe);
  if (deadline == 0 || deadline > now_ms) return false;
  probe->set_state(v1::Probe::FAILED);
  probe->set_error(error);
  probe->set_updated_unix_ms(now_ms);
  return true;
}

bool MarkCancelled(v1::Probe* probe) {
  if (probe->state() != v1::Probe::QUEUED &&
      probe->state() != v1::Probe::RUNNING) {
    return false;
  }
  probe->set_state(v1::Probe::CANCELLED);
  probe->set_updated_unix_ms(WallClockMs());
  return true;
}

uint32_t GpusNeeded(const v1::Probe& probe) {
  return std::max(1u, probe.request().setup().gpus());
}

}  // namespace headroom
