#ifndef HEADROOM_SERVER_SERVICE_FLEET_PROBE_WATCHES_H_
#define HEADROOM_SERVER_SERVICE_FLEET_PROBE_WATCHES_H_

// What a WatchProbe watcher is sent of its probe: the snapshot first, then
// only what is new to it in each later snapshot (results it has not seen,
// a change of state or assignment), so a snapshot published twice, or by
// two paths (this planner and the replica sync), is sent once. No gRPC:
// the service's watch reactor keeps a cursor and sends the events.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/fleet.pb.h"

namespace headroom {

// SUCCEEDED, FAILED or CANCELLED: nothing follows.
bool IsFinal(v1::Probe::State state);

// What one watcher was sent of its probe. Nothing is new to a cursor until
// its snapshot was sent (synced).
struct WatchCursor {
  bool synced = false;
  v1::Probe::State state = v1::Probe::STATE_UNSPECIFIED;
  std::string assignment_id;
  int results = 0;
};

// The watch's first event, `probe` as stored now; `cursor` is synced at it.
v1::ProbeEvent SnapshotEvent(const v1::Probe& probe, WatchCursor* cursor);

// The events `probe` holds that `cursor` was not sent, in order (each new
// result, then the probe when its state or assignment changed); `cursor`
// advances past them. None before the cursor is synced.
std::vector<v1::ProbeEvent> NewEvents(const v1::Probe& probe,
                                      WatchCursor* cursor);

// A watch's first snapshot while it is read from the store. A probe
// published meanwhile (the watcher is not synced, so it is not sent) may be
// newer than what is read, which may predate that write: the snapshot is
// read again after it, at most kSnapshotRereads times, and a final one
// published is the snapshot itself, as nothing follows it.
inline constexpr int kSnapshotRereads = 8;
struct SnapshotRead {
  bool published_while_read = false;
  int rereads = 0;
  std::optional<v1::Probe> final_published;
};

// `probe` was published while `read` was pending.
void PublishedWhileRead(const v1::Probe& probe, SnapshotRead* read);

// Given what the store returned, the snapshot to send (true) or false:
// read again (`read` counts it). `stored` becomes the final probe published
// while it was read, if one was.
bool SnapshotToSend(SnapshotRead* read, absl::StatusOr<v1::Probe>* stored);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_PROBE_WATCHES_H_
