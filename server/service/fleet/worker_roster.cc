#include "server/service/fleet/worker_roster.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace headroom {

WorkerRoster::WorkerRoster(PlannerMetrics* metrics) : metrics_(metrics) {}

std::optional<HelloRefusal> WorkerRoster::Register(
    WorkerStream* stream, const v1::WorkerHello& hello,
    std::vector<std::string> gpu_kinds, int64_t now_ms, int64_t heartbeat_ms) {
  const std::string& id = hello.worker_id();
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(id);
  std::optional<HeldConnection> held;
  if (it != workers_.end()) {
    held = HeldConnection{it->second->identity, it->second->peer(),
                          now_ms - it->second->last_heard_ms()};
  }
  if (std::optional<HelloRefusal> refused =
          RefuseHello(id, stream->identity, closed_, Of(stream).registered,
                      held, heartbeat_ms)) {
    return refused;
  }
  if (held.has_value()) {
    WorkerStream& old = *it->second;
    // Ended under mu_, so its OnDone cannot run (and free it) first.
    Of(&old).replaced = true;
    old.End(grpc::Status(grpc::StatusCode::ABORTED,
                         "replaced by a newer connection of the worker"));
    spdlog::warn(
        "event=worker_replaced worker={} old_peer={} new_peer={} "
        "silent_ms={}",
        id, old.peer(), stream->peer(), held->silent_ms);
  }
  workers_[id] = stream;
  ++generation_;
  WorkerStream::Registration& registration = Of(stream);
  registration.registered = true;
  registration.hello = hello;
  registration.gpu_kinds = std::move(gpu_kinds);
  registration.executors.assign(hello.executors().begin(),
                                hello.executors().end());
  registration.running_assignment = hello.running_assignment_id();
  registration.last_seen_written_ms = now_ms;
  for (const v1::GpuDevice& gpu : hello.gpus()) {
    registration.gauges.push_back(metrics_->GpuSeries(
        absl::StrCat(gpu.index()), gpu.uuid(), gpu.name(),
        hello.hostname().empty() ? hello.worker_id() : hello.hostname(),
        gpu.simulated()));
  }
  metrics_->WorkersConnected(static_cast<int64_t>(workers_.size()));
  return std::nullopt;
}

std::optional<v1::WorkerHello> WorkerRoster::HelloOf(
    const WorkerStream* stream) {
  absl::MutexLock lock(&mu_);
  if (!Of(stream).registered) return std::nullopt;
  return Of(stream).hello;
}

std::optional<WorkerRoster::Heard> WorkerRoster::Heartbeat(
    WorkerStream* stream, bool draining, int64_t now_ms,
    int64_t last_seen_write_ms) {
  absl::MutexLock lock(&mu_);
  WorkerStream::Registration& registration = Of(stream);
  if (!registration.registered) return std::nullopt;
  if (draining) registration.draining = true;
  Heard heard;
  heard.worker = registration.hello.worker_id();
  if (now_ms - registration.last_seen_written_ms >= last_seen_write_ms) {
    registration.last_seen_written_ms = now_ms;
    heard.refresh.emplace();
    *heard.refresh->mutable_hello() = registration.hello;
    heard.refresh->set_connected(true);
    heard.refresh->set_last_seen_unix_ms(now_ms);
  }
  return heard;
}

bool WorkerRoster::Samples(WorkerStream* stream, const v1::SampleBatch& samples,
                           int64_t heartbeat_ms) {
  std::vector<PlannerMetrics::GpuGauges> gauges;
  {
    absl::MutexLock lock(&mu_);
    if (!Of(stream).registered) return false;
    Of(stream).samples_received += samples.samples_size();
    gauges = Of(stream).gauges;
  }
  metrics_->SamplesReceived(samples.samples_size());
  // Each GPU's latest reading in the batch. Until a GPU's second batch
  // says its period, its series lives two heartbeats.
  std::vector<const v1::Sample*> latest(gauges.size(), nullptr);
  for (const v1::Sample& sample : samples.samples()) {
    if (sample.gpu_index() < gauges.size()) {
      latest[sample.gpu_index()] = &sample;
    }
  }
  for (size_t i = 0; i < latest.size(); ++i) {
    const v1::Sample* last = latest[i];
    if (last == nullptr) continue;
    metrics_->GpuSample(gauges[i], last->fb_used_mib(),
                        last->has_power_w()
                            ? std::optional<double>(last->power_w())
                            : std::nullopt,
                        last->has_total_energy_mj()
                            ? std::optional<double>(last->total_energy_mj())
                            : std::nullopt,
                        heartbeat_ms);
  }
  return true;
}

void WorkerRoster::AssignmentDone(WorkerStream* stream,
                                  const std::string& assignment_id) {
  absl::MutexLock lock(&mu_);
  if (Of(stream).running_assignment == assignment_id) {
    Of(stream).running_assignment.clear();
    Of(stream).running_probe.clear();
  }
}

std::optional<v1::WorkerStatus> WorkerRoster::Remove(WorkerStream* stream,
                                                     int64_t now_ms) {
  absl::MutexLock lock(&mu_);
  WorkerStream::Registration& registration = Of(stream);
  if (!registration.registered) return std::nullopt;
  // Its GPUs' series go unless a newer connection of it uses them.
  for (const PlannerMetrics::GpuGauges& gauges : registration.gauges) {
    metrics_->ReleaseGpuSeries(gauges);
  }
  registration.gauges.clear();
  auto it = workers_.find(registration.hello.worker_id());
  if (it != workers_.end() && it->second == stream) {
    workers_.erase(it);
    ++generation_;
  }
  metrics_->WorkersConnected(static_cast<int64_t>(workers_.size()));
  if (registration.replaced) return std::nullopt;
  v1::WorkerStatus gone;
  *gone.mutable_hello() = registration.hello;
  gone.set_connected(false);
  gone.set_last_seen_unix_ms(now_ms);
  return gone;
}

void WorkerRoster::MarkLive(std::vector<v1::WorkerStatus>* workers,
                            int64_t now_ms, int64_t last_seen_write_ms) {
  absl::MutexLock lock(&mu_);
  for (v1::WorkerStatus& worker : *workers) {
    if (worker.connected() &&
        now_ms - worker.last_seen_unix_ms() > 2 * last_seen_write_ms) {
      worker.set_connected(false);
    }
    auto it = workers_.find(worker.hello().worker_id());
    if (it == workers_.end()) continue;
    worker.set_connected(true);
    worker.set_samples_received(Of(it->second).samples_received);
    worker.set_running_probe(Of(it->second).running_probe);
    worker.set_last_seen_unix_ms(now_ms);
  }
}

std::vector<v1::WorkerHello> WorkerRoster::Hellos() {
  std::vector<v1::WorkerHello> hellos;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    if (Of(stream).registered) hellos.push_back(Of(stream).hello);
  }
  return hellos;
}

uint64_t WorkerRoster::generation() {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::vector<ConnectedWorker> WorkerRoster::Connected() {
  std::vector<ConnectedWorker> connected;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    const WorkerStream::Registration& registration = Of(stream);
    if (!registration.registered) continue;
    connected.push_back(
        {id,
         {registration.hello.gpus().begin(), registration.hello.gpus().end()},
         registration.executors,
         registration.draining});
  }
  return connected;
}

std::vector<IdleWorker> WorkerRoster::Idle() {
  std::vector<IdleWorker> idle;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    const WorkerStream::Registration& registration = Of(stream);
    if (!registration.running_assignment.empty() || registration.draining) {
      continue;
    }
    idle.push_back(
        {id,
         registration.gpu_kinds,
         registration.executors,
         {registration.hello.gpus().begin(), registration.hello.gpus().end()}});
  }
  return idle;
}

std::vector<RunningAssignment> WorkerRoster::Running() {
  std::vector<RunningAssignment> running;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    if (!Of(stream).running_assignment.empty()) {
      running.push_back(
          {id, Of(stream).running_probe, Of(stream).running_assignment});
    }
  }
  return running;
}

bool WorkerRoster::Assign(const std::string& worker, const v1::Probe& probe,
                          const v1::Assignment& assignment) {
  v1::PlannerMessage message;
  *message.mutable_assignment() = assignment;
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end() || !Of(it->second).running_assignment.empty() ||
      Of(it->second).draining) {
    return false;
  }
  Of(it->second).running_assignment = probe.assignment_id();
  Of(it->second).running_probe = probe.id();
  return it->second->Enqueue(std::move(message));
}

bool WorkerRoster::Withdraw(const std::string& worker,
                            const std::string& assignment,
                            const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end() || Of(it->second).running_assignment != assignment) {
    return false;
  }
  it->second->Enqueue(CancelMessage(assignment, reason));
  Of(it->second).running_assignment.clear();
  Of(it->second).running_probe.clear();
  return true;
}

void WorkerRoster::Cancel(const std::string& worker,
                          const std::string& assignment,
                          const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker);
  if (it == workers_.end()) return;
  it->second->Enqueue(CancelMessage(assignment, reason));
  Of(it->second).running_assignment.clear();
  Of(it->second).running_probe.clear();
}

void WorkerRoster::Close(const grpc::Status& status) {
  absl::MutexLock lock(&mu_);
  closed_ = true;
  // Ended under mu_: a stream's OnStreamDone (Remove, before it is freed)
  // waits for mu_.
  for (auto& [id, stream] : workers_) stream->End(status);
}

}  // namespace headroom
