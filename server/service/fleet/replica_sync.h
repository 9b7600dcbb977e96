#ifndef HEADROOM_SERVER_SERVICE_FLEET_REPLICA_SYNC_H_
#define HEADROOM_SERVER_SERVICE_FLEET_REPLICA_SYNC_H_

// Replicas over one store: what another planner did to a probe (stored a
// result, cancelled it, re-queued it when its lease ran out) is seen here
// only by reading the store back. One Poll reads every probe watched here
// (watchers get what changed) and every probe a worker connected here runs
// (a probe no longer RUNNING under that assignment is withdrawn from the
// worker). No gRPC here: the service is reached through ReplicaTarget.

#include <string>
#include <vector>

#include "headroom/v1/fleet.pb.h"
#include "server/store/store.h"

namespace headroom {

// A probe a worker connected here runs, as this planner assigned it.
struct RunningAssignment {
  std::string worker;
  std::string probe;
  std::string assignment;
};

class ReplicaTarget {
 public:
  virtual ~ReplicaTarget() = default;
  // Ids of the probes watched here, each once.
  virtual std::vector<std::string> WatchedProbes() = 0;
  // The assignments workers connected here run.
  virtual std::vector<RunningAssignment> RunningAssignments() = 0;
  // `probe` as stored now, for its watchers.
  virtual void ProbeChanged(const v1::Probe& probe) = 0;
  // `running` is no longer the probe's running assignment in the store:
  // the worker stops it (if it still runs it), told `reason`.
  virtual void Withdraw(const RunningAssignment& running,
                        const std::string& reason) = 0;
};

// Why `running` must stop given `stored`, the probe as stored now; empty
// when the store still has it RUNNING under that assignment.
std::string WithdrawalReason(const RunningAssignment& running,
                             const v1::Probe& stored);

class ReplicaSync {
 public:
  // `store` and `target` must outlive it.
  ReplicaSync(Store* store, ReplicaTarget* target);
  ReplicaSync(const ReplicaSync&) = delete;
  ReplicaSync& operator=(const ReplicaSync&) = delete;

  // One read-back of the watched and running probes; a probe the store
  // cannot read now is skipped until the next poll.
  void Poll();

 private:
  Store* store_;
  ReplicaTarget* target_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_REPLICA_SYNC_H_
