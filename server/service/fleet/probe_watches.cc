#include "server/service/fleet/probe_watches.h"

#include <algorithm>

namespace headroom {

bool IsFinal(v1::Probe::State state) {
  return state == v1::Probe::SUCCEEDED || state == v1::Probe::FAILED ||
         state == v1::Probe::CANCELLED;
}

v1::ProbeEvent SnapshotEvent(const v1::Probe& probe, WatchCursor* cursor) {
  cursor->synced = true;
  cursor->state = probe.state();
  cursor->assignment_id = probe.assignment_id();
  cursor->results = probe.results_size();
  v1::ProbeEvent snapshot;
  *snapshot.mutable_probe() = probe;
  return snapshot;
}

std::vector<v1::ProbeEvent> NewEvents(const v1::Probe& probe,
                                      WatchCursor* cursor) {
  std::vector<v1::ProbeEvent> events;
  if (!cursor->synced) return events;
  for (int i = cursor->results; i < probe.results_size(); ++i) {
    v1::ProbeEvent event;
    *event.mutable_result() = probe.results(i);
    events.push_back(std::move(event));
  }
  cursor->results = std::max(cursor->results, probe.results_size());
  if (probe.state() != cursor->state ||
      probe.assignment_id() != cursor->assignment_id) {
    cursor->state = probe.state();
    cursor->assignment_id = probe.assignment_id();
    v1::ProbeEvent event;
    *event.mutable_probe() = probe;
    events.push_back(std::move(event));
  }
  return events;
}

void PublishedWhileRead(const v1::Probe& probe, SnapshotRead* read) {
  read->published_while_read = true;
  if (IsFinal(probe.state())) read->final_published = probe;
}

bool SnapshotToSend(SnapshotRead* read, absl::StatusOr<v1::Probe>* stored) {
  if (read->final_published.has_value()) {
    *stored = *std::move(read->final_published);
    read->final_published.reset();
    return true;
  }
  if (!stored->ok() || IsFinal((*stored)->state()) ||
      !read->published_while_read || read->rereads >= kSnapshotRereads) {
    return true;
  }
  read->published_while_read = false;
  ++read->rereads;
  return false;
}

}  // namespace headroom
