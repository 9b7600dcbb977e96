#include "server/service/fleet_service.h"

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/microbatch/cache_key.h"
#include "core/planner/fit_planner.h"
#include "server/service/fleet/measured_runs.h"
#include "server/service/fleet/probe_requests.h"
#include "server/service/fleet/probe_watches.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/fleet_autotune.h"
#include "server/service/paging.h"
#include "server/service/queued_writer.h"
#include "server/service/reply.h"
#include "server/service/serial_queue.h"
#include "server/service/store_executor.h"
#include "server/store/probe_transitions.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// What SubmitProbeResponse.warning adds to NoWorkerFor's reason.
constexpr char kStaysQueued[] = "; the probe stays queued until one connects";

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// One WatchProbe call.
class FleetService::ProbeWatch
    : public QueuedWriter<grpc::ServerWriteReactor<v1::ProbeEvent>,
                          v1::ProbeEvent> {
 public:
  ProbeWatch(FleetService* service, std::string probe_id)
      : service_(service), probe_id_(std::move(probe_id)) {}

  void OnCancel() override {
    End(grpc::Status(grpc::StatusCode::CANCELLED, "watch cancelled"));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&service_->mu_);
      auto [begin, end] = service_->watches_.equal_range(probe_id_);
      for (auto it = begin; it != end; ++it) {
        if (it->second == this) {
          service_->watches_.erase(it);
          break;
        }
      }
      // SendSnapshot frees it once the snapshot is read.
      if (service_->Of(this).snapshot_pending) {
        service_->Of(this).done = true;
        return;
      }
    }
    delete this;
  }

 private:
  friend class FleetService;
  FleetService* const service_;
  // Reached only through service_->Of(this), under its mu_.
  WatchState state_;
  std::string probe_id_;
};

FleetService::WatchState& FleetService::Of(ProbeWatch* watch) {
  return watch->state_;
}

FleetService::FleetService(std::shared_ptr<const ModelCatalog> catalog,
                           Store* store, PlannerMetrics* metrics,
                           BackgroundWorker* executor, Options options)
    : catalog_(std::move(catalog)),
      store_(store),
      metrics_(metrics),
      executor_(executor),
      options_(std::move(options)),
      dispatch_(store, this, options_.policy, NowMs),
      replica_sync_(store, this) {
  dispatcher_ = std::thread([this] { DispatchLoop(); });
}

FleetService::~FleetService() { Shutdown(); }

void FleetService::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    // Ended under mu_: a reactor's OnDone (which frees it) waits for mu_.
    for (auto& [id, stream] : workers_) {
      stream->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "planner shutting down; reconnect"));
    }
    for (auto& [id, watch] : watches_) {
      watch->End(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "planner shutting down; watch again"));
    }
  }
  if (dispatcher_.joinable()) dispatcher_.join();
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::PlannerMessage>*
FleetService::Connect(grpc::CallbackServerContext* context) {
  Caller caller;
  absl::Status allowed = absl::OkStatus();
  if (options_.access != nullptr) {
    allowed =
        options_.access->Check(*context, "/headroom.v1.Fleet/Connect", &caller);
  }
  // The worker credential ("cert:<CN>" of a worker certificate,
  // "token:<name>" of a worker token) decides which hello the stream may
  // send; empty when the planner runs open.
  auto* stream =
      new WorkerStream(this, executor_, context->peer(),
                       caller.WorkerIdentity(), policy_.max_unhandled_messages);
  if (!allowed.ok()) stream->End(ToGrpcStatus(allowed));
  return stream;
}

void FleetService::Reject(WorkerStream* stream, const std::string& worker,
                          WorkerRejection reason, const std::string& key,
                          const std::string& detail,
                          std::optional<grpc::StatusCode> end) {
  metrics_->WorkerMessageRejected(reason);
  // Per reason and caller: one worker's flood hides no other's rejections.
  const std::string kind =
      absl::StrCat(WorkerRejectionName(reason), " ", Cut(stream->identity));
  if (int64_t suppressed = 0; reject_log_.Admit(kind, &suppressed)) {
    if (suppressed > 0) {
      spdlog::warn(
          "event=log_suppressed kind=worker_message_rejected reason={} "
          "identity={} count={} message=\"suppressed {} similar\"",
          WorkerRejectionName(reason), Cut(stream->identity), suppressed,
          suppressed);
    }
    spdlog::warn(
        "event=worker_message_rejected worker={} identity={} peer={} "
        "reason={} key={} detail=\"{}\"",
        Cut(worker), Cut(stream->identity), stream->peer(),
        WorkerRejectionName(reason), Cut(key), Cut(detail, 400));
  }
  if (end.has_value()) {
    stream->End(grpc::Status(*end, detail));
    return;
  }
  v1::PlannerMessage message;
  v1::Rejected& rejected = *message.mutable_rejected();
  rejected.set_key(key.substr(0, kMaxResultKeyLength));
  rejected.set_reason(WorkerRejectionName(reason));
  rejected.set_detail(detail);
  stream->Enqueue(std::move(message));
}

void FleetService::OnHello(WorkerStream* stream, const v1::WorkerHello& in) {
  v1::WorkerHello hello = in;
  const std::string& id = hello.worker_id();
  if (std::optional<Rejection> bad = CheckHello(hello, stream->identity)) {
    Reject(stream, id, bad->reason, "", bad->detail,
           bad->reason == WorkerRejection::kIdentityMismatch
               ? grpc::StatusCode::PERMISSION_DENIED
               : grpc::StatusCode::INVALID_ARGUMENT);
    return;
  }
  std::vector<std::string> kinds;
  for (v1::GpuDevice& gpu : *hello.mutable_gpus()) {
    gpu.set_catalog_gpu(CatalogGpuForDriverName(gpu.name()));
    // One entry per GPU, "" for a card the catalog does not know: the
    // claim counts GPUs per kind (Store::ClaimProbe).
    kinds.push_back(gpu.catalog_gpu());
  }
  // Why the hello is refused: a rejection reason and the status that ends
  // the stream.
  struct Refusal {
    WorkerRejection reason;
    grpc::StatusCode code;
    std::string detail;
  };
  std::optional<Refusal> refused;
  {
    absl::MutexLock lock(&mu_);
    const int64_t now = NowMs();
    if (stopping_) {
      refused =
          Refusal{WorkerRejection::kMalformed, grpc::StatusCode::UNAVAILABLE,
                  "hello refused: the planner is shutting down"};
    } else if (Of(stream).registered) {
      refused = Refusal{WorkerRejection::kDuplicateHello,
                        grpc::StatusCode::FAILED_PRECONDITION,
                        "hello refused: sent twice on one stream"};
    } else if (auto it = workers_.find(id); it != workers_.end()) {
      WorkerStream& old = *it->second;
      const int64_t silent_ms = now - old.last_heard_ms();
      if (!old.identity.empty() && !stream->identity.empty()) {
        // Both proved who they are: only the same identity replaces.
        if (old.identity != stream->identity) {
          refused = Refusal{
              WorkerRejection::kIdentityMismatch,
              grpc::StatusCode::PERMISSION_DENIED,
              absl::StrCat("worker ", id, " is connected as '",
                           Cut(old.identity), "'; '", Cut(stream->identity),
                           "' may not replace it")};
        }
      } else if (silent_ms <= 2 * policy_.heartbeat_ms) {
        // Open planner: anyone can claim an id, so a live connection keeps
        // it; a silent one (a half-open TCP connection) gives way.
        refused = Refusal{
            WorkerRejection::kAlreadyConnected,
            grpc::StatusCode::ALREADY_EXISTS,
            absl::StrCat("worker ", id, " is connected and alive from ",
                         old.peer(),
                         "; a second connection may replace it only after 2 "
                         "heartbeats of silence")};
      }
      if (!refused.has_value()) {
        // Ended under mu_, so its OnDone cannot run (and free it) first.
        Of(&old).replaced = true;
        old.End(grpc::Status(grpc::StatusCode::ABORTED,
                             "replaced by a newer connection of the worker"));
        spdlog::warn(
            "event=worker_replaced worker={} old_peer={} new_peer={} "
            "silent_ms={}",
            id, old.peer(), stream->peer(), silent_ms);
      }
    }
    if (!refused.has_value()) {
      workers_[id] = stream;
      Of(stream).registered = true;
      Of(stream).hello = hello;
      Of(stream).gpu_kinds = kinds;
      Of(stream).executors.assign(hello.executors().begin(),
                                  hello.executors().end());
      Of(stream).running_assignment = hello.running_assignment_id();
      Of(stream).last_seen_written_ms = now;
      for (const v1::GpuDevice& gpu : hello.gpus()) {
        Of(stream).gauges.push_back(metrics_->GpuSeries(
            absl::StrCat(gpu.index()), gpu.uuid(), gpu.name(),
            hello.hostname().empty() ? hello.worker_id() : hello.hostname(),
            gpu.simulated()));
      }
      metrics_->WorkersConnected(static_cast<int64_t>(workers_.size()));
    }
  }
  if (refused.has_value()) {
    if (refused->code == grpc::StatusCode::UNAVAILABLE) {
      stream->End(grpc::Status(refused->code, refused->detail));
    } else {
      Reject(stream, id, refused->reason, "", refused->detail, refused->code);
    }
    return;
  }
  v1::WorkerStatus status;
  *status.mutable_hello() = hello;
  status.set_connected(true);
  status.set_last_seen_unix_ms(NowMs());
  if (absl::Status stored = store_->PutWorker(status); !stored.ok()) {
    spdlog::warn("event=worker_store_failed worker={} error=\"{}\"",
                 hello.worker_id(), std::string(stored.message()));
  }
  if (!hello.running_assignment_id().empty() &&
      !RenewOwnLease(hello.worker_id(), hello.running_assignment_id()).ok()) {
    v1::PlannerMessage cancel;
    cancel.mutable_cancel()->set_assignment_id(hello.running_assignment_id());
    cancel.mutable_cancel()->set_reason(
        "assignment no longer running here (lease expired or probe ended)");
    stream->Enqueue(std::move(cancel));
  }
  v1::PlannerMessage welcome;
  welcome.mutable_welcome()->set_planner_version(options_.planner_version);
  welcome.mutable_welcome()->set_heartbeat_ms(policy_.heartbeat_ms);
  stream->Enqueue(std::move(welcome));
  spdlog::info(
      "event=worker_connected worker={} peer={} gpus={} executors={} "
      "running={}",
      hello.worker_id(), stream->peer(), hello.gpus_size(),
      absl::StrJoin(hello.executors(), ","), hello.running_assignment_id());
  Wake();
}

absl::Status FleetService::RenewOwnLease(const std::string& worker,
                                         const std::string& assignment_id) {
  // An assignment id is "<probe id>.<attempt>": the probe says whose it is,
  // so a connection cannot keep another worker's lease alive.
  const size_t dot = assignment_id.rfind('.');
  if (dot == std::string::npos || dot == 0) {
    return absl::NotFoundError("not an assignment id");
  }
  ASSIGN_OR_RETURN(v1::Probe probe,
                   store_->GetProbe(assignment_id.substr(0, dot)));
  RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
  return store_->RenewLease(assignment_id, NowMs() + policy_.lease_ms);
}

void FleetService::OnHeartbeat(WorkerStream* stream,
                               const v1::Heartbeat& heartbeat) {
  std::optional<v1::WorkerStatus> refresh;
  bool registered = false;
  {
    absl::MutexLock lock(&mu_);
    registered = Of(stream).registered;
    if (registered && heartbeat.draining()) Of(stream).draining = true;
    const int64_t now = NowMs();
    if (registered &&
        now - Of(stream).last_seen_written_ms >= policy_.last_seen_write_ms) {
      Of(stream).last_seen_written_ms = now;
      refresh.emplace();
      *refresh->mutable_hello() = Of(stream).hello;
      refresh->set_connected(true);
      refresh->set_last_seen_unix_ms(now);
    }
  }
  if (!registered) {
    stream->End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             "send hello first"));
    return;
  }
  if (refresh.has_value()) (void)store_->PutWorker(*refresh);
  if (heartbeat.assignment_id().empty()) return;
  std::string worker;
  {
    absl::MutexLock lock(&mu_);
    worker = Of(stream).hello.worker_id();
  }
  if (!RenewOwnLease(worker, heartbeat.assignment_id()).ok()) {
    v1::PlannerMessage cancel;
    cancel.mutable_cancel()->set_assignment_id(heartbeat.assignment_id());
    cancel.mutable_cancel()->set_reason(
        "assignment no longer running here (lease expired or probe ended)");
    stream->Enqueue(std::move(cancel));
  }
}

void FleetService::OnSamples(WorkerStream* stream,
                             const v1::SampleBatch& samples) {
  std::vector<PlannerMetrics::GpuGauges> gauges;
  {
    absl::MutexLock lock(&mu_);
    if (!Of(stream).registered) return;
    Of(stream).samples_received += samples.samples_size();
    gauges = Of(stream).gauges;
  }
  metrics_->SamplesReceived(samples.samples_size());
  if (samples.samples_size() == 0) return;
  // Each GPU's latest reading in the batch. Until a GPU's second batch
  // says its period, its series lives two heartbeats.
  std::vector<const v1::Sample*> latest(gauges.size(), nullptr);
  for (const v1::Sample& sample : samples.samples()) {
    if (sample.gpu_index() < gauges.size())
      latest[sample.gpu_index()] = &sample;
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
                        policy_.heartbeat_ms);
  }
  if (!samples.probe_id().empty()) PublishSamples(samples);
}

void FleetService::OnResult(WorkerStream* stream,
                            const v1::ProbeResult& result) {
  bool registered;
  v1::WorkerHello hello;
  {
    absl::MutexLock lock(&mu_);
    registered = Of(stream).registered;
    if (registered) hello = Of(stream).hello;
  }
  if (!registered) {
    stream->End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             "send hello first"));
    return;
  }
  const std::string& worker = hello.worker_id();
  const std::string& key = result.key();
  const auto reject = [&](WorkerRejection reason, const std::string& detail) {
    Reject(stream, worker, reason, key, detail, std::nullopt);
  };
  if (std::optional<Rejection> bad = CheckResultIds(result)) {
    reject(bad->reason, bad->detail);
    return;
  }
  absl::StatusOr<v1::Probe> probe = store_->GetProbe(result.probe_id());
  if (probe.status().code() == absl::StatusCode::kNotFound) {
    reject(WorkerRejection::kNotLeased, std::string(probe.status().message()));
    return;
  }
  if (!probe.ok()) {
    spdlog::error("event=result_not_stored key={} error=\"{}\"", Cut(key),
                  std::string(probe.status().message()));
    return;  // not acknowledged: the worker sends it again
  }
  const auto acknowledge = [&] {
    v1::PlannerMessage ack;
    ack.mutable_ack()->add_keys(key);
    stream->Enqueue(std::move(ack));
  };
  if (result.has_batch()) {
    const v1::BatchResult& batch = result.batch();
    // What the run measured is the card this connection registered at
    // hello (its kind, memory, simulated flag), never the result's own
    // gpu field.
    const v1::GpuDevice* device = MeasuringDevice(*probe, hello);
    if (std::optional<Rejection> bad =
            CheckBatchResult(*probe, batch, CardMemoryGb(*probe, device))) {
      reject(bad->reason, bad->detail);
      return;
    }
    // No such card (a hello without GPUs): the batch is the probe's, but no
    // measured run of a catalog GPU.
    const v1::ProbeResult measured =
        device == nullptr ? result : AsMeasuredOn(result, *device);
    const std::optional<v1::MeasuredRun> run =
        device == nullptr ? std::nullopt
                          : MeasuredRunFor(*probe, measured, worker);
    const std::optional<v1::EnergyRun> energy =
        device == nullptr
            ? std::nullopt
            : EnergyRunFor(*probe, measured, worker, NowMs() / 1000);
    // Held to the bounds a Refit holds an import to; nothing stored if not.
    if (std::optional<Rejection> bad =
            CheckStoredRuns(run, energy, *catalog_)) {
      reject(bad->reason, bad->detail);
      return;
    }
    // The planner's key, not the worker's: one per run of this assignment.
    v1::Probe updated;
    absl::StatusOr<bool> stored = store_->RecordProbeResult(
        probe->id(), result.assignment_id(), worker,
        StoredResultKey(probe->id(), result.assignment_id(), batch), batch, run,
        &updated);
    if (stored.status().code() == absl::StatusCode::kFailedPrecondition) {
      reject(WorkerRejection::kNotLeased,
             std::string(stored.status().message()));
      return;
    }
    if (!stored.ok()) {
      spdlog::error("event=result_not_stored key={} error=\"{}\"", Cut(key),
                    std::string(stored.status().message()));
      return;
    }
    // An energy window, accepted for the assignment the worker holds, is
    // also an energy run, stored under the same key: also for a duplicate
    // (the first attempt may have failed here), and not acknowledged until
    // it is stored, so a result re-sent after a failure stores it once.
    if (energy.has_value()) {
      absl::StatusOr<bool> added = store_->AddEnergyRun(
          StoredResultKey(probe->id(), result.assignment_id(), batch), *energy);
      if (!added.ok()) {
        spdlog::error("event=energy_run_not_stored key={} error=\"{}\"",
                      Cut(key), std::string(added.status().message()));
        return;
      }
    }
    if (*stored && run.has_value()) {
      std::function<void()> callback;
      {
        absl::MutexLock lock(&mu_);
        callback = on_run_stored_;
      }
      if (callback) callback();
    }
    metrics_->ProbeResultReceived(!*stored                 ? "duplicate"
                                  : batch.oom()            ? "oom"
                                  : !batch.error().empty() ? "error"
                                                           : "measured");
    // The probe as the store left it, read in the same transaction.
    if (*stored) PublishProbe(updated);
  }
  if (!result.final() && !result.handed_back()) {
    acknowledge();
    return;
  }
  {
    // The worker is done with it, whether the planner takes its word.
    absl::MutexLock lock(&mu_);
    if (Of(stream).running_assignment == result.assignment_id()) {
      Of(stream).running_assignment.clear();
      Of(stream).running_probe.clear();
    }
  }
  if (!IsFinal(probe->state()) || probe->worker() != worker ||
      probe->assignment_id() != result.assignment_id()) {
    if (absl::Status leased =
            CheckLeased(*probe, result.assignment_id(), worker);
        !leased.ok()) {
      reject(WorkerRejection::kNotLeased, std::string(leased.message()));
      return;
    }
  } else {
    // This worker's assignment ended already: a re-sent last message
    // whose acknowledgement was lost.
    acknowledge();
    return;
  }
  absl::StatusOr<v1::Probe> finished;
  if (result.handed_back()) {
    finished = store_->HandBack(probe->id(), result.assignment_id(), worker,
                                policy_.max_handbacks);
  } else {
    std::string error = result.error();
    std::string details = result.details_json();
    if (error.empty() && probe->request().has_autotune()) {
      absl::StatusOr<std::string> record =
          AcceptAutotuneRecord(*probe, result, *stream);
      if (record.ok()) {
        details = *std::move(record);
      } else {
        error = absl::StrCat("autotune record rejected: ",
                             record.status().message());
      }
    }
    finished = store_->FinishAssignment(
        probe->id(), result.assignment_id(),
        error.empty() ? v1::Probe::SUCCEEDED : v1::Probe::FAILED, error,
        details, /*requeue=*/false);
  }
  if (finished.status().code() == absl::StatusCode::kFailedPrecondition) {
    reject(WorkerRejection::kNotLeased,
           std::string(finished.status().message()));
    return;
  }
  if (!finished.ok()) {
    spdlog::error("event=finish_not_stored key={} error=\"{}\"", Cut(key),
                  std::string(finished.status().message()));
    return;
  }
  spdlog::info("event=assignment_done probe={} assignment={} state={}",
               finished->id(), result.assignment_id(),
               v1::Probe::State_Name(finished->state()));
  PublishProbe(*finished);
  Wake();
  if (result.handed_back() && finished->state() == v1::Probe::FAILED) {
    // The hand-back ended the probe instead of re-queueing it.
    reject(WorkerRejection::kHandbackLimit, finished->error());
    return;
  }
  acknowledge();
}

void FleetService::OnStreamDone(WorkerStream* stream) {
  std::optional<v1::WorkerStatus> gone;
  {
    absl::MutexLock lock(&mu_);
    if (!Of(stream).registered) return;
    // Its GPUs' series go unless a newer connection of it uses them.
    for (const PlannerMetrics::GpuGauges& gauges : Of(stream).gauges) {
      metrics_->ReleaseGpuSeries(gauges);
    }
    Of(stream).gauges.clear();
    auto it = workers_.find(Of(stream).hello.worker_id());
    if (it != workers_.end() && it->second == stream) workers_.erase(it);
    metrics_->WorkersConnected(static_cast<int64_t>(workers_.size()));
    if (!Of(stream).replaced) {
      gone.emplace();
      *gone->mutable_hello() = Of(stream).hello;
      gone->set_connected(false);
      gone->set_last_seen_unix_ms(NowMs());
    }
  }
  if (gone.has_value()) {
    // Its running probe keeps its lease: a reconnect within it continues.
    (void)store_->PutWorker(*gone);
    spdlog::info("event=worker_disconnected worker={}",
                 gone->hello().worker_id());
  }
}

grpc::ServerUnaryReactor* FleetService::ListWorkers(
    grpc::CallbackServerContext* context, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Fleet/ListWorkers")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return DeferToStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::ListWorkersResponse> {
      const size_t budget = PageBytes(options_.max_request_bytes);
      ASSIGN_OR_RETURN(const PageSpec spec,
                       PageFromRequest("workers", request->page_size(),
                                       request->page_token(), budget));
      ASSIGN_OR_RETURN(Page<v1::WorkerStatus> stored,
                       store_->ListWorkers(spec));
      v1::ListWorkersResponse out;
      out.set_next_page_token(NextPageToken("workers", stored.next_after));
      absl::MutexLock lock(&mu_);
      const int64_t now = NowMs();
      for (v1::WorkerStatus& worker : stored.entries) {
        auto it = workers_.find(worker.hello().worker_id());
        // Connected elsewhere (another replica) counts only while its
        // last-seen time is fresh: a planner that died cannot say goodbye.
        if (worker.connected() &&
            now - worker.last_seen_unix_ms() > 2 * policy_.last_seen_write_ms) {
          worker.set_connected(false);
        }
        if (it != workers_.end()) {
          worker.set_connected(true);
          worker.set_samples_received(Of(it->second).samples_received);
          worker.set_running_probe(Of(it->second).running_probe);
          worker.set_last_seen_unix_ms(now);
        }
        if (BoundEntry(&worker, budget)) {
          spdlog::warn("event=list_entry_cut listing=workers worker={}",
                       worker.hello().worker_id().substr(0, 64));
        }
        *out.add_workers() = std::move(worker);
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

std::map<std::string, v1::Target> FleetService::NodeInventory() {
  std::map<std::string, v1::Target> inventory;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    if (!Of(stream).registered || Of(stream).hello.gpus().empty()) continue;
    const v1::WorkerHello& hello = Of(stream).hello;
    const std::string& node =
        hello.node_name().empty() ? hello.hostname() : hello.node_name();
    if (node.empty() || inventory.count(node) != 0) continue;
    v1::Target target;
    for (const v1::GpuDevice& device : hello.gpus()) {
      const std::string kind = CatalogGpuForDriverName(device.name());
      if (!kind.empty()) {
        target.set_gpu(kind);
        break;
      }
    }
    if (target.kind_case() == v1::Target::KIND_NOT_SET) {
      target.set_memory_gb(static_cast<double>(hello.gpus(0).memory_bytes()) /
                           1e9);
    }
    inventory[node] = target;
  }
  return inventory;
}

void FleetService::OnRunStored(std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  on_run_stored_ = std::move(callback);
}

std::string FleetService::NoWorkerFor(const v1::Probe& probe) {
  return headroom::NoWorkerFor(probe, ConnectedWorkers());
}

std::vector<ConnectedWorker> FleetService::ConnectedWorkers() {
  std::vector<ConnectedWorker> connected;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    if (!Of(stream).registered) continue;
    connected.push_back(
        {id,
         {Of(stream).hello.gpus().begin(), Of(stream).hello.gpus().end()},
         Of(stream).executors,
         Of(stream).draining});
  }
  return connected;
}

std::vector<IdleWorker> FleetService::IdleWorkers() {
  std::vector<IdleWorker> idle;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, stream] : workers_) {
    if (!Of(stream).running_assignment.empty() || Of(stream).draining) continue;
    idle.push_back(
        {id,
         Of(stream).gpu_kinds,
         Of(stream).executors,
         {Of(stream).hello.gpus().begin(), Of(stream).hello.gpus().end()}});
  }
  return idle;
}

bool FleetService::Assign(const std::string& worker, const v1::Probe& probe,
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

std::vector<std::string> FleetService::WatchedProbes() {
  std::vector<std::string> watched;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, watch] : watches_) {
    if (watched.empty() || watched.back() != id) watched.push_back(id);
  }
  return watched;
}

std::vector<RunningAssignment> FleetService::RunningAssignments() {
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

void FleetService::Withdraw(const RunningAssignment& running,
                            const std::string& reason) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(running.worker);
  if (it == workers_.end() ||
      Of(it->second).running_assignment != running.assignment) {
    return;  // finished or replaced meanwhile
  }
  v1::PlannerMessage cancel;
  cancel.mutable_cancel()->set_assignment_id(running.assignment);
  cancel.mutable_cancel()->set_reason(reason);
  it->second->Enqueue(std::move(cancel));
  Of(it->second).running_assignment.clear();
  Of(it->second).running_probe.clear();
  spdlog::warn("event=assignment_withdrawn probe={} assignment={} worker={}",
               running.probe, running.assignment, running.worker);
}

absl::StatusOr<Learner::Worker> FleetService::WorkerFor(
    bool include_simulated) {
  absl::MutexLock lock(&mu_);
  std::optional<Worker> simulated;
  int connected = 0;
  for (const auto& [id, stream] : workers_) {
    if (!Of(stream).registered || Of(stream).draining) continue;
    ++connected;
    for (const v1::GpuDevice& device : Of(stream).hello.gpus()) {
      const std::string kind = CatalogGpuForDriverName(device.name());
      absl::StatusOr<GpuInfo> card = FindGpu(kind);
      if (kind.empty() || !card.ok()) continue;
      const auto& executors = Of(stream).executors;
      const bool has = [&](const char* name) {
        return std::find(executors.begin(), executors.end(), name) !=
               executors.end();
      }(device.simulated() ? "sim" : "torch");
      if (!has) continue;
      Worker worker{id, card->name, card->memory_gb,
                    device.simulated() ? "sim" : "torch", device.simulated()};
      if (!device.simulated()) return worker;
      if (!simulated.has_value()) simulated = worker;
    }
  }
  if (simulated.has_value() && include_simulated) return *simulated;
  if (simulated.has_value()) {
    return absl::FailedPreconditionError(
        "only simulated workers are connected, and simulated runs anchor "
        "only questions that ask for them (set include_simulated)");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      connected == 0 ? "no worker is connected"
                     : "no connected worker has a catalog GPU and an executor "
                       "that builds models (torch, or sim on a simulated "
                       "card)"));
}

absl::StatusOr<std::optional<std::string>> FleetService::Outstanding(
    const std::string& key_id) {
  for (v1::Probe::State state : {v1::Probe::QUEUED, v1::Probe::RUNNING}) {
    ASSIGN_OR_RETURN(std::vector<v1::Probe> probes,
                     store_->ListProbes(state, 1000));
    for (const v1::Probe& probe : probes) {
      if (probe.request().learn_key() == key_id) return probe.id();
    }
  }
  return std::nullopt;
}

absl::StatusOr<std::string> FleetService::QueueLearning(
    const v1::CheckFitRequest& request, const std::vector<uint32_t>& batches,
    const Worker& worker, const std::string& key_id) {
  v1::SubmitProbeRequest probe;
  *probe.mutable_model() = request.model();
  *probe.mutable_setup() = request.setup();
  for (uint32_t batch : batches) probe.add_batches(batch);
  probe.set_worker(worker.id);
  probe.set_executor(worker.executor);
  probe.set_repetitions(1);
  // Few steps: the peak of a training step is reached in the first.
  probe.set_warmup_steps(1);
  probe.set_steps(2);
  probe.set_learn_key(key_id);
  ASSIGN_OR_RETURN(v1::Probe stored, Submit(probe));
  spdlog::info("event=learning_probe_queued probe={} key={} worker={}",
               stored.id(), key_id, worker.id);
  return stored.id();
}

absl::StatusOr<v1::Probe> FleetService::Submit(
    const v1::SubmitProbeRequest& request) {
  ASSIGN_OR_RETURN(
      v1::Probe probe,
      NewProbe(request, *catalog_, options_.max_request_bytes, NowMs()));
  ASSIGN_OR_RETURN(v1::Probe stored, store_->AddProbe(std::move(probe)));
  spdlog::info(
      "event=probe_submitted probe={} model={} gpu={} worker={} "
      "batches={} executor={}",
      stored.id(), stored.spec().name(), stored.gpu(), request.worker(),
      absl::StrJoin(request.batches(), ","), request.executor());
  Wake();
  return stored;
}

grpc::ServerUnaryReactor* FleetService::SubmitProbe(
    grpc::CallbackServerContext* context, const v1::SubmitProbeRequest* request,
    v1::SubmitProbeResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Fleet/SubmitProbe")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Refused before it waits for the store (CheckProbeRequestBytes).
  if (absl::Status size = CheckProbeRequestBytes(*request); !size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  return DeferToStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::SubmitProbeResponse> {
      if (request->has_autotune()) {
        return absl::InvalidArgumentError(
            "autotune is set by SubmitAutotune only; send the autotune there");
      }
      if (!request->learn_key().empty()) {
        return absl::InvalidArgumentError(
            "learn_key is set by the planner only (CheckFitRequest.learn)");
      }
      if (request->has_energy()) {
        return absl::InvalidArgumentError(
            "energy is set by SubmitEnergyProbe only; send the energy probe "
            "there");
      }
      v1::SubmitProbeResponse out;
      ASSIGN_OR_RETURN(*out.mutable_probe(), Submit(*request));
      if (std::string why = NoWorkerFor(out.probe()); !why.empty()) {
        out.set_warning(absl::StrCat(why, kStaysQueued));
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* FleetService::SubmitEnergyProbe(
    grpc::CallbackServerContext* context,
    const v1::SubmitEnergyProbeRequest* request,
    v1::SubmitProbeResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Fleet/SubmitEnergyProbe")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Refused before it waits for the store (CheckProbeRequestBytes).
  if (absl::Status size = CheckProbeRequestBytes(*request); !size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  return DeferToStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::SubmitProbeResponse> {
      RETURN_IF_ERROR(CheckSize(*request, options_.max_request_bytes));
      ASSIGN_OR_RETURN(const v1::SubmitProbeRequest probe,
                       EnergyProbeRequest(*request));
      v1::SubmitProbeResponse out;
      ASSIGN_OR_RETURN(*out.mutable_probe(), Submit(probe));
      if (std::string why = NoWorkerFor(out.probe()); !why.empty()) {
        out.set_warning(absl::StrCat(why, kStaysQueued));
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

absl::StatusOr<v1::SubmitAutotuneResponse> FleetService::Autotune(
    const v1::SubmitAutotuneRequest& request) {
  RETURN_IF_ERROR(CheckSize(request, options_.max_request_bytes));
  ASSIGN_OR_RETURN(std::vector<v1::WorkerStatus> workers,
                   store_->ListWorkers());
  // The catalog GPU the plan is for: the placement's kind, or the pinned
  // worker's first catalog card.
  std::string gpu;
  switch (request.placement_case()) {
    case v1::SubmitAutotuneRequest::kGpu: {
      absl::StatusOr<GpuInfo> info = FindGpu(request.gpu());
      if (!info.ok()) {
        return absl::Status(info.status().code(),
                            absl::StrCat("gpu: ", info.status().message()));
      }
      gpu = info->name;
      break;
    }
    case v1::SubmitAutotuneRequest::kWorker:
      RETURN_IF_ERROR(CheckFleetId(request.worker(), "worker"));
      for (const v1::WorkerStatus& w : workers) {
        if (w.hello().worker_id() != request.worker()) continue;
        for (const v1::GpuDevice& device : w.hello().gpus()) {
          if (gpu.empty()) gpu = CatalogGpuForDriverName(device.name());
        }
      }
      if (gpu.empty()) {
        return absl::NotFoundError(
            absl::StrCat("worker '", request.worker(),
                         "' is not known with a catalog GPU; see ListWorkers"));
      }
      break;
    case v1::SubmitAutotuneRequest::PLACEMENT_NOT_SET:
      return absl::InvalidArgumentError(
          "placement is empty; set gpu (a catalog GPU kind such as \"L4\") "
          "or worker (a worker id from ListWorkers)");
  }
  ASSIGN_OR_RETURN(std::optional<v1::FactorSet> factor_set,
                   store_->CurrentFactorSet());
  if (!factor_set.has_value()) {
    return absl::FailedPreconditionError("no factor set is current yet");
  }
  ASSIGN_OR_RETURN(v1::AutotunePlan autotune,
                   PlanAutotune(request, gpu, *catalog_, *factor_set));
  const v1::SubmitProbeRequest probe_request =
      AutotuneProbeRequest(request, autotune);
  ASSIGN_OR_RETURN(
      ResolvedModel model,
      ResolveModelRef(probe_request.model(), probe_request.setup(), *catalog_));
  v1::SubmitAutotuneResponse out;
  *out.mutable_plan() = autotune.plan();
  // The key each known worker that could run it would write: a record
  // under any of them stands.
  for (const v1::WorkerStatus& w : workers) {
    const v1::WorkerHello& hello = w.hello();
    if (request.placement_case() == v1::SubmitAutotuneRequest::kWorker &&
        hello.worker_id() != request.worker()) {
      continue;
    }
    if (!request.executor().empty() &&
        std::find(hello.executors().begin(), hello.executors().end(),
                  request.executor()) == hello.executors().end()) {
      continue;
    }
    for (const v1::GpuDevice& device : hello.gpus()) {
      if (CatalogGpuForDriverName(device.name()) != gpu) continue;
      const v1::AutotuneCacheKey key = AutotuneKeyFor(
          autotune, model.spec(), device, hello.framework_versions());
      ASSIGN_OR_RETURN(
          std::optional<v1::AutotuneRecord> cached,
          store_->FindAutotuneRecord(CacheKeyId(key), CacheKeyBytes(key)));
      if (!cached.has_value()) continue;
      out.set_cache_reused(true);
      out.set_cache_id(CacheKeyId(key));
      *out.mutable_cached() = *std::move(cached);
      out.mutable_cached()->set_cache_reused(true);
      spdlog::info("event=autotune_cache_reused id={} worker={}",
                   out.cache_id(), hello.worker_id());
      return out;
    }
  }
  ASSIGN_OR_RETURN(*out.mutable_probe(), Submit(probe_request));
  return out;
}

grpc::ServerUnaryReactor* FleetService::SubmitAutotune(
    grpc::CallbackServerContext* context,
    const v1::SubmitAutotuneRequest* request,
    v1::SubmitAutotuneResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Fleet/SubmitAutotune")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Refused before it waits for the store (CheckProbeRequestBytes).
  if (absl::Status size = CheckProbeRequestBytes(*request); !size.ok()) {
    reactor->Finish(ToGrpcStatus(size));
    return reactor;
  }
  return DeferToStore(reactor, [this, request, response, reactor] {
    Reply(reactor, Autotune(*request), response);
  });
}

absl::StatusOr<std::string> FleetService::AcceptAutotuneRecord(
    const v1::Probe& probe, const v1::ProbeResult& result,
    const WorkerStream& stream) {
  if (!result.has_autotune_record()) {
    return absl::InvalidArgumentError("the final result has no record");
  }
  v1::WorkerHello hello;
  {
    absl::MutexLock lock(&mu_);
    hello = Of(&stream).hello;
  }
  const v1::GpuDevice* gpu = nullptr;
  for (const v1::GpuDevice& device : hello.gpus()) {
    if (device.index() == result.gpu().index()) gpu = &device;
  }
  if (gpu == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu index ", result.gpu().index(), " is not in the worker's hello"));
  }
  const v1::AutotuneRecord& record = result.autotune_record();
  RETURN_IF_ERROR(
      ValidateAutotuneRecord(record, probe, *gpu, hello.framework_versions()));
  // Only a record with a selection is reusable; one without stays on the
  // probe.
  if (record.has_selected()) {
    const std::string id = CacheKeyId(record.cache_key());
    // Marked as the worker's, so a client's put does not replace it
    // without force.
    v1::AutotuneRecord measured = record;
    measured.set_measured_by_probe(probe.id());
    ASSIGN_OR_RETURN(bool replaced,
                     store_->PutAutotuneRecord(
                         id, CacheKeyBytes(record.cache_key()), measured));
    spdlog::info(
        "event=autotune_record_stored id={} probe={} replaced={} "
        "microbatch={} mode={}",
        id, probe.id(), replaced, record.selected().microbatch(),
        record.selected().mode());
  }
  return ToJson(record, /*pretty=*/false);
}

grpc::ServerWriteReactor<v1::ProbeEvent>* FleetService::WatchProbe(
    grpc::CallbackServerContext* context,
    const v1::WatchProbeRequest* request) {
  auto* watch = new ProbeWatch(this, request->id());
  if (options_.access != nullptr) {
    absl::Status allowed =
        options_.access->Check(*context, "/headroom.v1.Fleet/WatchProbe");
    if (!allowed.ok()) {
      watch->End(ToGrpcStatus(allowed));
      return watch;
    }
  }
  if (absl::Status valid = CheckFleetId(request->id(), "id"); !valid.ok()) {
    watch->End(ToGrpcStatus(valid));
    return watch;
  }
  {
    // Registered before the snapshot is read, and sent nothing until the
    // snapshot is (a publish meanwhile has it read again, SnapshotToSend):
    // no event falls between, none comes twice.
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      watch->End(
          grpc::Status(grpc::StatusCode::UNAVAILABLE, "planner shutting down"));
      return watch;
    }
    if (request->follow()) watches_.emplace(request->id(), watch);
    // The snapshot is read on the store executor, which sends it; the
    // watch is not freed before.
    Of(watch).snapshot_pending = true;
  }
  ReadSnapshot(watch, request->follow());
  return watch;
}

void FleetService::ReadSnapshot(ProbeWatch* watch, bool follow) {
  const std::string id = watch->probe_id_;
  if (!executor_->Post(
          [this, watch, id, follow] {
            SendSnapshot(watch, store_->GetProbe(id), follow);
          },
          options_.store_queue)) {
    SendSnapshot(watch,
                 absl::ResourceExhaustedError(
                     "the store queue is full (--store_queue); watch again "
                     "later"),
                 follow);
  }
}

void FleetService::SendSnapshot(ProbeWatch* watch,
                                absl::StatusOr<v1::Probe> probe, bool follow) {
  {
    absl::MutexLock lock(&mu_);
    WatchState& state = Of(watch);
    if (state.done) {
      // The call ended before its snapshot was read (cancelled, shutdown).
      delete watch;
      return;
    }
    if (SnapshotToSend(&state.read, &probe)) {
      state.snapshot_pending = false;
      if (!probe.ok()) {
        watch->End(ToGrpcStatus(probe.status()));
        return;
      }
      watch->Enqueue(SnapshotEvent(*probe, &state.cursor));
      if (!follow || IsFinal(probe->state())) {
        watch->End(grpc::Status::OK);
      }
      return;
    }
  }
  // Still pending: the watch is not freed before it is read again.
  ReadSnapshot(watch, follow);
}

grpc::ServerUnaryReactor* FleetService::DeferToStore(
    grpc::ServerUnaryReactor* reactor, std::function<void()> job) {
  return DeferStore(executor_, options_.store_queue, reactor, std::move(job));
}

grpc::ServerUnaryReactor* FleetService::CancelProbe(
    grpc::CallbackServerContext* context, const v1::CancelProbeRequest* request,
    v1::CancelProbeResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Fleet/CancelProbe")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return DeferToStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::CancelProbeResponse> {
      RETURN_IF_ERROR(CheckFleetId(request->id(), "id"));
      ASSIGN_OR_RETURN(v1::Probe before, store_->GetProbe(request->id()));
      ASSIGN_OR_RETURN(v1::Probe probe, store_->CancelProbe(request->id()));
      if (before.state() == v1::Probe::RUNNING &&
          probe.state() == v1::Probe::CANCELLED) {
        absl::MutexLock lock(&mu_);
        auto it = workers_.find(before.worker());
        if (it != workers_.end()) {
          v1::PlannerMessage cancel;
          cancel.mutable_cancel()->set_assignment_id(before.assignment_id());
          cancel.mutable_cancel()->set_reason("probe cancelled by an operator");
          it->second->Enqueue(std::move(cancel));
          Of(it->second).running_assignment.clear();
          Of(it->second).running_probe.clear();
        }
      }
      spdlog::info("event=probe_cancel probe={} state={}", probe.id(),
                   v1::Probe::State_Name(probe.state()));
      PublishProbe(probe);
      Wake();
      v1::CancelProbeResponse out;
      *out.mutable_probe() = std::move(probe);
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* FleetService::ListProbes(
    grpc::CallbackServerContext* context, const v1::ListProbesRequest* request,
    v1::ListProbesResponse* response) {
  if (auto* refused = RefuseUnary(options_.access.get(), context,
                                  "/headroom.v1.Fleet/ListProbes")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return DeferToStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::ListProbesResponse> {
      if (request->limit() > 10000) {
        return absl::InvalidArgumentError(
            absl::StrCat("limit = ", request->limit(),
                         " is out of range; allowed 0..10000 (0 = 100)"));
      }
      // A client from before paging sends limit alone: it is the page size,
      // at most kMaxPageSize.
      int32_t page_size = request->page_size();
      if (page_size == 0 && request->limit() > 0) {
        page_size = static_cast<int32_t>(
            std::min<uint32_t>(request->limit(), kMaxPageSize));
      }
      const size_t budget = PageBytes(options_.max_request_bytes);
      ASSIGN_OR_RETURN(
          const PageSpec spec,
          PageFromRequest(absl::StrCat("probes/", request->state()), page_size,
                          request->page_token(), budget));
      ASSIGN_OR_RETURN(Page<v1::Probe> probes,
                       store_->ListProbes(request->state(), spec));
      v1::ListProbesResponse out;
      out.set_next_page_token(NextPageToken(
          absl::StrCat("probes/", request->state()), probes.next_after));
      for (v1::Probe& probe : probes.entries) {
        if (BoundEntry(&probe, budget)) {
          spdlog::warn("event=list_entry_cut listing=probes probe={}",
                       probe.id().substr(0, 64));
        }
        *out.add_probes() = std::move(probe);
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

void FleetService::PublishSamples(const v1::SampleBatch& samples) {
  v1::ProbeEvent event;
  *event.mutable_samples() = samples;
  absl::MutexLock lock(&mu_);
  auto [begin, end] = watches_.equal_range(samples.probe_id());
  for (auto it = begin; it != end; ++it) {
    if (Of(it->second).cursor.synced) {
      it->second->Enqueue(event, /*droppable=*/true);
    }
  }
}

void FleetService::PublishProbe(const v1::Probe& probe) {
  absl::MutexLock lock(&mu_);
  auto [begin, end] = watches_.equal_range(probe.id());
  for (auto it = begin; it != end; ++it) {
    ProbeWatch& watch = *it->second;
    WatchState& state = Of(&watch);
    if (!state.cursor.synced) {
      if (state.snapshot_pending) PublishedWhileRead(probe, &state.read);
      continue;
    }
    for (v1::ProbeEvent& event : NewEvents(probe, &Of(&watch).cursor)) {
      watch.Enqueue(std::move(event));
    }
    if (IsFinal(probe.state())) watch.End(grpc::Status::OK);
  }
}

void FleetService::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void FleetService::DispatchLoop() {
  int64_t last_counts_ms = 0;
  int64_t last_poll_ms = 0;
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return wake_ || stopping_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&woken),
                           absl::Milliseconds(policy_.dispatch_ms));
      if (stopping_) return;
      wake_ = false;
    }
    dispatch_.Once();
    const int64_t now = NowMs();
    if (now - last_poll_ms >= policy_.store_poll_ms) {
      last_poll_ms = now;
      replica_sync_.Poll();
    }
    if (now - last_counts_ms >= policy_.probe_counts_ms) {
      last_counts_ms = now;
      absl::StatusOr<std::vector<std::pair<v1::Probe::State, int64_t>>> counts =
          store_->CountProbes();
      if (counts.ok()) {
        std::vector<std::pair<std::string, int64_t>> named;
        for (int state = v1::Probe::QUEUED; state <= v1::Probe::CANCELLED;
             ++state) {
          int64_t count = 0;
          for (const auto& [s, n] : *counts) {
            if (s == state) count = n;
          }
          named.emplace_back(
              v1::Probe::State_Name(static_cast<v1::Probe::State>(state)),
              count);
        }
        metrics_->ProbeStates(named);
      }
    }
  }
}

}  // namespace headroom
