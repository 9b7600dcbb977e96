#include "server/store/probe_transitions.h"

#include <ctime>

#include "absl/strings/str_cat.h"

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

bool MarkCancelled(v1::Probe* probe) {
  if (probe->state() != v1::Probe::QUEUED &&
      probe->state() != v1::Probe::RUNNING) {
    return false;
  }
  probe->set_state(v1::Probe::CANCELLED);
  probe->set_updated_unix_ms(WallClockMs());
  return true;
}

}  // namespace headroom
