#include "server/service/fleet/replica_sync.h"

#include "absl/strings/str_cat.h"

namespace headroom {

std::string WithdrawalReason(const RunningAssignment& running,
                             const v1::Probe& stored) {
  if (stored.state() == v1::Probe::RUNNING &&
      stored.assignment_id() == running.assignment) {
    return "";
  }
  // Cancelled through another planner, or re-queued (its lease ran out)
  // and perhaps running elsewhere.
  return absl::StrCat(
      "probe ", running.probe, " is ", v1::Probe::State_Name(stored.state()),
      stored.state() == v1::Probe::RUNNING ? " under another assignment" : "",
      " in the store");
}

ReplicaSync::ReplicaSync(Store* store, ReplicaTarget* target)
    : store_(store), target_(target) {}

void ReplicaSync::Poll() {
  for (const std::string& id : target_->WatchedProbes()) {
    absl::StatusOr<v1::Probe> probe = store_->GetProbe(id);
    if (probe.ok()) target_->ProbeChanged(*probe);
  }
  for (const RunningAssignment& running : target_->RunningAssignments()) {
    absl::StatusOr<v1::Probe> probe = store_->GetProbe(running.probe);
    if (!probe.ok()) continue;
    const std::string reason = WithdrawalReason(running, *probe);
    if (!reason.empty()) target_->Withdraw(running, reason);
  }
}

}  // namespace headroom
