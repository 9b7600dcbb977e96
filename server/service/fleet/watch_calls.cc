#include "server/service/fleet/watch_calls.h"

#include <utility>

#include "server/service/fleet/worker_reports.h"
#include "server/service/grpc_status.h"
#include "server/service/queued_writer.h"

namespace headroom {

// One WatchProbe call.
class ProbeWatchers::Call
    : public QueuedWriter<grpc::ServerWriteReactor<v1::ProbeEvent>,
                          v1::ProbeEvent> {
 public:
  Call(ProbeWatchers* watchers, std::string probe_id)
      : watchers_(watchers), probe_id(std::move(probe_id)) {}

  void OnCancel() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override { watchers_->Done(this); }

 private:
  friend class ProbeWatchers;
  ProbeWatchers* const watchers_;
  const std::string probe_id;
  // Reached only through watchers_->Of(this), under its mu_.
  WatchState state;
};

ProbeWatchers::ProbeWatchers(Store* store, BackgroundWorker* executor,
                             size_t store_queue)
    : store_(store), executor_(executor), store_queue_(store_queue) {}

ProbeWatchers::WatchState& ProbeWatchers::Of(Call* call) { return call->state; }

grpc::ServerWriteReactor<v1::ProbeEvent>* ProbeWatchers::Watch(
    const std::string& id, bool follow, const absl::Status& allowed) {
  auto* call = new Call(this, id);
  if (!allowed.ok()) {
    call->End(ToGrpcStatus(allowed));
    return call;
  }
  if (absl::Status valid = CheckFleetId(id, "id"); !valid.ok()) {
    call->End(ToGrpcStatus(valid));
    return call;
  }
  {
    // Registered before the snapshot is read, and sent nothing until the
    // snapshot is (a publish meanwhile has it read again, SnapshotToSend):
    // no event falls between, none comes twice.
    absl::MutexLock lock(&mu_);
    if (closed_) {
      call->End(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "planner shutting down"));
      return call;
    }
    if (follow) calls_.emplace(id, call);
    // The snapshot is read on the store executor, which sends it; the
    // call is not freed before.
    Of(call).snapshot_pending = true;
  }
  ReadSnapshot(call, follow);
  return call;
}

void ProbeWatchers::Done(Call* call) {
  {
    absl::MutexLock lock(&mu_);
    auto [begin, end] = calls_.equal_range(call->probe_id);
    for (auto it = begin; it != end; ++it) {
      if (it->second == call) {
        calls_.erase(it);
        break;
      }
    }
    // SendSnapshot frees it once the snapshot is read.
    if (Of(call).snapshot_pending) {
      Of(call).done = true;
      return;
    }
  }
  delete call;
}

void ProbeWatchers::ReadSnapshot(Call* call, bool follow) {
  const std::string id = call->probe_id;
  if (!executor_->Post(
          [this, call, id, follow] {
            SendSnapshot(call, store_->GetProbe(id), follow);
          },
          store_queue_)) {
    SendSnapshot(call,
                 absl::ResourceExhaustedError(
                     "the store queue is full (--store_queue); watch again "
                     "later"),
                 follow);
  }
}

void ProbeWatchers::SendSnapshot(Call* call, absl::StatusOr<v1::Probe> probe,
                                 bool follow) {
  {
    absl::MutexLock lock(&mu_);
    WatchState& state = Of(call);
    if (state.done) {
      // The call ended before its snapshot was read (cancelled, shutdown).
      delete call;
      return;
    }
    if (SnapshotToSend(&state.read, &probe)) {
      state.snapshot_pending = false;
      if (!probe.ok()) {
        call->End(ToGrpcStatus(probe.status()));
        return;
      }
      call->Enqueue(SnapshotEvent(*probe, &state.cursor));
      if (!follow || IsFinal(probe->state())) {
        call->End(grpc::Status::OK);
      }
      return;
    }
  }
  // Still pending: the call is not freed before it is read again.
  ReadSnapshot(call, follow);
}

void ProbeWatchers::PublishSamples(const v1::SampleBatch& samples) {
  v1::ProbeEvent event;
  *event.mutable_samples() = samples;
  absl::MutexLock lock(&mu_);
  auto [begin, end] = calls_.equal_range(samples.probe_id());
  for (auto it = begin; it != end; ++it) {
    if (Of(it->second).cursor.synced) {
      it->second->Enqueue(event, /*droppable=*/true);
    }
  }
}

void ProbeWatchers::PublishProbe(const v1::Probe& probe) {
  absl::MutexLock lock(&mu_);
  auto [begin, end] = calls_.equal_range(probe.id());
  for (auto it = begin; it != end; ++it) {
    Call& call = *it->second;
    WatchState& state = Of(&call);
    if (!state.cursor.synced) {
      if (state.snapshot_pending) PublishedWhileRead(probe, &state.read);
      continue;
    }
    for (v1::ProbeEvent& event : NewEvents(probe, &state.cursor)) {
      call.Enqueue(std::move(event));
    }
    if (IsFinal(probe.state())) call.End(grpc::Status::OK);
  }
}

std::vector<std::string> ProbeWatchers::Watched() {
  std::vector<std::string> watched;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, call] : calls_) {
    if (watched.empty() || watched.back() != id) watched.push_back(id);
  }
  return watched;
}

void ProbeWatchers::Close() {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  // Ended under mu_: a call's OnDone (which frees it) waits for mu_.
  for (auto& [id, call] : calls_) {
    call->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                           "planner shutting down; watch again"));
  }
}

}  // namespace headroom
