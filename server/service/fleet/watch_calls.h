#ifndef HEADROOM_SERVER_SERVICE_FLEET_WATCH_CALLS_H_
#define HEADROOM_SERVER_SERVICE_FLEET_WATCH_CALLS_H_

// The WatchProbe calls open on this planner: each call's reactor, what it
// was sent (probe_watches.h's cursor), and its first snapshot, read on the
// store executor. What the planner learns of a probe (its own stream
// handlers, the dispatcher, the replica sync) is published here and goes to
// the probe's watchers: the same snapshot published twice, or by two
// paths, is sent once.

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "headroom/v1/fleet.pb.h"
#include "server/service/background_worker.h"
#include "server/service/fleet/probe_watches.h"
#include "server/store/store.h"

namespace headroom {

class ProbeWatchers {
 public:
  // `store` and `executor` must outlive the watchers and every call they
  // start. A snapshot read waits behind at most `store_queue` store jobs;
  // past that the call ends RESOURCE_EXHAUSTED.
  ProbeWatchers(Store* store, BackgroundWorker* executor, size_t store_queue);
  ProbeWatchers(const ProbeWatchers&) = delete;
  ProbeWatchers& operator=(const ProbeWatchers&) = delete;

  // Starts a WatchProbe call of probe `id`. It ends at once with `allowed`
  // when that is not OK, INVALID_ARGUMENT for an id CheckFleetId refuses,
  // UNAVAILABLE after Close. Otherwise its first event is the probe as
  // stored now; without `follow` the call ends there, with it the call gets
  // what is published of the probe until it is final.
  grpc::ServerWriteReactor<v1::ProbeEvent>* Watch(const std::string& id,
                                                  bool follow,
                                                  const absl::Status& allowed);

  // Watchers of `samples.probe_id()` that were sent their snapshot get the
  // live samples (dropped when their queue is full).
  void PublishSamples(const v1::SampleBatch& samples);
  // Watchers of `probe` get what is new to each of them (NewEvents); a
  // probe in a final state ends them. One whose snapshot is being read has
  // it read again (SnapshotToSend).
  void PublishProbe(const v1::Probe& probe);
  // The ids of the probes followed now, each once.
  std::vector<std::string> Watched();

  // Ends every call (UNAVAILABLE: watch again) and refuses new ones.
  void Close();

 private:
  class Call;
  // What a call was sent. Nothing is published to it until its snapshot
  // is (cursor.synced). While its first snapshot is read on the store
  // executor the call may end (done): then SendSnapshot frees it. What is
  // published meanwhile is noted in `read`.
  struct WatchState {
    WatchCursor cursor;
    bool snapshot_pending = false;
    bool done = false;
    SnapshotRead read;
  };

  // Reads `call`'s probe on the store executor for SendSnapshot (at once,
  // with RESOURCE_EXHAUSTED, when store_queue jobs wait).
  void ReadSnapshot(Call* call, bool follow);
  // The call's first event: the probe as stored now; ends the call unless
  // it follows a probe not yet final; read again when a probe published
  // meanwhile may be newer (SnapshotToSend). On the store executor.
  void SendSnapshot(Call* call, absl::StatusOr<v1::Probe> probe, bool follow);
  // The call is over: it stops hearing of its probe, and is freed (now, or
  // by SendSnapshot when its snapshot is still being read).
  void Done(Call* call);

  WatchState& Of(Call* call) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store* store_;
  BackgroundWorker* executor_;
  const size_t store_queue_;
  absl::Mutex mu_;
  std::multimap<std::string, Call*> calls_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_WATCH_CALLS_H_
