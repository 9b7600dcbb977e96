#include "server/service/fleet_service.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "server/service/fleet/probe_requests.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/fleet_autotune.h"
#include "server/service/grpc_status.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "server/service/store_executor.h"
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

FleetService::FleetService(std::shared_ptr<const ModelCatalog> catalog,
                           Store* store, PlannerMetrics* metrics,
                           BackgroundWorker* executor, ServiceOptions service,
                           Options options)
    : catalog_(std::move(catalog)),
      store_(store),
      metrics_(metrics),
      executor_(executor),
      service_(std::move(service)),
      options_(std::move(options)),
      roster_(metrics),
      watchers_(store, executor, service_.store_queue),
      dispatch_(store, this, options_.policy, NowMs),
      replica_sync_(store, this) {
  dispatcher_ = std::thread([this] { DispatchLoop(); });
}

FleetService::~FleetService() { Shutdown(); }

void FleetService::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  roster_.Close(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                             "planner shutting down; reconnect"));
  watchers_.Close();
  if (dispatcher_.joinable()) dispatcher_.join();
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::PlannerMessage>*
FleetService::Connect(grpc::CallbackServerContext* context) {
  Caller caller;
  absl::Status allowed = absl::OkStatus();
  if (service_.access != nullptr) {
    allowed =
        service_.access->Check(*context, "/headroom.v1.Fleet/Connect", &caller);
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
  reject_log_.Note(reason, worker, stream->identity, stream->peer(), key,
                   detail);
  if (end.has_value()) {
    stream->End(grpc::Status(*end, detail));
    return;
  }
  stream->Enqueue(RejectedMessage(reason, key, detail));
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
  std::vector<std::string> kinds = StampCatalogGpus(&hello);
  if (std::optional<HelloRefusal> refused = roster_.Register(
          stream, hello, std::move(kinds), NowMs(), policy_.heartbeat_ms)) {
    if (refused->status.code() == absl::StatusCode::kUnavailable) {
      stream->End(ToGrpcStatus(refused->status));
    } else {
      Reject(stream, id, refused->reason, "",
             std::string(refused->status.message()),
             static_cast<grpc::StatusCode>(refused->status.code()));
    }
    return;
  }
  v1::WorkerStatus status;
  *status.mutable_hello() = hello;
  status.set_connected(true);
  status.set_last_seen_unix_ms(NowMs());
  if (absl::Status stored = store_->PutWorker(status); !stored.ok()) {
    spdlog::warn("event=worker_store_failed worker={} error=\"{}\"", id,
                 std::string(stored.message()));
  }
  if (!hello.running_assignment_id().empty()) {
    KeepOrCancel(stream, id, hello.running_assignment_id());
  }
  v1::PlannerMessage welcome;
  welcome.mutable_welcome()->set_planner_version(options_.planner_version);
  welcome.mutable_welcome()->set_heartbeat_ms(policy_.heartbeat_ms);
  stream->Enqueue(std::move(welcome));
  spdlog::info(
      "event=worker_connected worker={} peer={} gpus={} executors={} "
      "running={}",
      id, stream->peer(), hello.gpus_size(),
      absl::StrJoin(hello.executors(), ","), hello.running_assignment_id());
  Wake();
}

void FleetService::KeepOrCancel(WorkerStream* stream, const std::string& worker,
                                const std::string& assignment_id) {
  if (!RenewOwnLease(store_, worker, assignment_id, NowMs() + policy_.lease_ms)
           .ok()) {
    stream->Enqueue(CancelMessage(assignment_id, kNotRunningHere));
  }
}

void FleetService::OnHeartbeat(WorkerStream* stream,
                               const v1::Heartbeat& heartbeat) {
  std::optional<WorkerRoster::Heard> heard = roster_.Heartbeat(
      stream, heartbeat.draining(), NowMs(), policy_.last_seen_write_ms);
  if (!heard.has_value()) {
    stream->End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             "send hello first"));
    return;
  }
  if (heard->refresh.has_value()) (void)store_->PutWorker(*heard->refresh);
  if (heartbeat.assignment_id().empty()) return;
  KeepOrCancel(stream, heard->worker, heartbeat.assignment_id());
}

void FleetService::OnSamples(WorkerStream* stream,
                             const v1::SampleBatch& samples) {
  if (!roster_.Samples(stream, samples, policy_.heartbeat_ms)) return;
  if (samples.samples_size() == 0) return;
  if (!samples.probe_id().empty()) watchers_.PublishSamples(samples);
}

void FleetService::OnResult(WorkerStream* stream,
                            const v1::ProbeResult& result) {
  std::optional<v1::WorkerHello> hello = roster_.HelloOf(stream);
  if (!hello.has_value()) {
    stream->End(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                             "send hello first"));
    return;
  }
  const std::string& worker = hello->worker_id();
  if (std::optional<Rejection> bad = CheckResultIds(result)) {
    Reject(stream, worker, bad->reason, result.key(), bad->detail,
           std::nullopt);
    return;
  }
  absl::StatusOr<v1::Probe> probe = store_->GetProbe(result.probe_id());
  if (probe.status().code() == absl::StatusCode::kNotFound) {
    Reject(stream, worker, WorkerRejection::kNotLeased, result.key(),
           std::string(probe.status().message()), std::nullopt);
    return;
  }
  if (!probe.ok()) {
    spdlog::error("event=result_not_stored key={} error=\"{}\"",
                  Cut(result.key()), std::string(probe.status().message()));
    return;  // not acknowledged: the worker sends it again
  }
  if (result.has_batch()) {
    const ResultOutcome batch = RecordBatchResult(
        store_, *catalog_, *probe, result, *hello, NowMs() / 1000);
    if (batch.run_stored) {
      std::function<void()> callback;
      {
        absl::MutexLock lock(&mu_);
        callback = on_run_stored_;
      }
      if (callback) callback();
    }
    if (!batch.counted.empty()) metrics_->ProbeResultReceived(batch.counted);
    if (batch.changed.has_value()) watchers_.PublishProbe(*batch.changed);
    if (!Taken(stream, worker, result, batch)) return;
  }
  if (result.final() || result.handed_back()) {
    // The worker is done with it, whether the planner takes its word.
    roster_.AssignmentDone(stream, result.assignment_id());
    const ResultOutcome ended =
        EndAssignment(store_, *probe, result, *hello, policy_.max_handbacks);
    if (ended.changed.has_value()) {
      watchers_.PublishProbe(*ended.changed);
      Wake();
    }
    if (!Taken(stream, worker, result, ended)) return;
  }
  v1::PlannerMessage ack;
  ack.mutable_ack()->add_keys(result.key());
  stream->Enqueue(std::move(ack));
}

bool FleetService::Taken(WorkerStream* stream, const std::string& worker,
                         const v1::ProbeResult& result,
                         const ResultOutcome& outcome) {
  if (outcome.rejected.has_value()) {
    Reject(stream, worker, outcome.rejected->reason, result.key(),
           outcome.rejected->detail, std::nullopt);
    return false;
  }
  return !outcome.retry;
}

void FleetService::OnStreamDone(WorkerStream* stream) {
  std::optional<v1::WorkerStatus> gone = roster_.Remove(stream, NowMs());
  if (!gone.has_value()) return;
  // Its running probe keeps its lease: a reconnect within it continues.
  (void)store_->PutWorker(*gone);
  spdlog::info("event=worker_disconnected worker={}",
               gone->hello().worker_id());
}

template <typename Response>
grpc::ServerUnaryReactor* FleetService::Serve(
    grpc::CallbackServerContext* context, const char* method,
    const google::protobuf::Message* probe_request, Response* response,
    std::function<absl::StatusOr<Response>()> answer) {
  if (auto* refused = RefuseUnary(service_.access.get(), context, method)) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (probe_request != nullptr) {
    // Refused before it waits for the store (CheckProbeRequestBytes).
    if (absl::Status size = CheckProbeRequestBytes(*probe_request);
        !size.ok()) {
      reactor->Finish(ToGrpcStatus(size));
      return reactor;
    }
  }
  return DeferStore(executor_, service_.store_queue, reactor,
                    [reactor, response, answer = std::move(answer)] {
                      Reply(reactor, answer(), response);
                    });
}

grpc::ServerUnaryReactor* FleetService::ListWorkers(
    grpc::CallbackServerContext* context, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  return Serve<v1::ListWorkersResponse>(
      context, "/headroom.v1.Fleet/ListWorkers", nullptr, response,
      [this, request]() -> absl::StatusOr<v1::ListWorkersResponse> {
        const size_t budget = PageBytes(service_.max_request_bytes);
        ASSIGN_OR_RETURN(const PageSpec spec,
                         PageFromRequest("workers", request->page_size(),
                                         request->page_token(), budget));
        ASSIGN_OR_RETURN(Page<v1::WorkerStatus> stored,
                         store_->ListWorkers(spec));
        v1::ListWorkersResponse out;
        out.set_next_page_token(NextPageToken("workers", stored.next_after));
        roster_.MarkLive(&stored.entries, NowMs(), policy_.last_seen_write_ms);
        for (v1::WorkerStatus& worker : stored.entries) {
          if (BoundEntry(&worker, budget)) {
            spdlog::warn("event=list_entry_cut listing=workers worker={}",
                         worker.hello().worker_id().substr(0, 64));
          }
          *out.add_workers() = std::move(worker);
        }
        return out;
      });
}

std::shared_ptr<const std::map<std::string, v1::Target>>
FleetService::NodeInventory(bool include_simulated) {
  // The generation first: a worker that registers meanwhile makes the next
  // call rebuild, never leaves a stale map current.
  const uint64_t generation = roster_.generation();
  absl::MutexLock lock(&inventory_mu_);
  Inventory& inventory = inventory_[include_simulated ? 1 : 0];
  if (inventory.nodes == nullptr || inventory.generation != generation) {
    inventory.nodes = std::make_shared<const std::map<std::string, v1::Target>>(
        NodeTargets(roster_.Hellos(), include_simulated));
    inventory.generation = generation;
  }
  return inventory.nodes;
}

void FleetService::OnRunStored(std::function<void()> callback) {
  absl::MutexLock lock(&mu_);
  on_run_stored_ = std::move(callback);
}

void FleetService::Withdraw(const RunningAssignment& running,
                            const std::string& reason) {
  // Not when it finished or was replaced meanwhile.
  if (roster_.Withdraw(running.worker, running.assignment, reason)) {
    spdlog::warn("event=assignment_withdrawn probe={} assignment={} worker={}",
                 running.probe, running.assignment, running.worker);
  }
}

absl::StatusOr<Learner::Worker> FleetService::WorkerFor(
    bool include_simulated) {
  return LearningWorker(roster_.Connected(), include_simulated);
}

absl::StatusOr<std::optional<std::string>> FleetService::Outstanding(
    const std::string& key_id) {
  return OutstandingLearning(store_, key_id);
}

absl::StatusOr<std::string> FleetService::QueueLearning(
    const v1::CheckFitRequest& request, const std::vector<uint32_t>& batches,
    const Worker& worker, const std::string& key_id) {
  ASSIGN_OR_RETURN(v1::Probe stored,
                   Submit(LearningProbeRequest(request, batches, worker.id,
                                               worker.executor, key_id)));
  spdlog::info("event=learning_probe_queued probe={} key={} worker={}",
               stored.id(), key_id, worker.id);
  return stored.id();
}

absl::StatusOr<v1::Probe> FleetService::Submit(
    const v1::SubmitProbeRequest& request) {
  ASSIGN_OR_RETURN(
      v1::Probe probe,
      NewProbe(request, *catalog_, service_.max_request_bytes, NowMs()));
  ASSIGN_OR_RETURN(v1::Probe stored, store_->AddProbe(std::move(probe)));
  spdlog::info(
      "event=probe_submitted probe={} model={} gpu={} worker={} "
      "batches={} executor={}",
      stored.id(), stored.spec().name(), stored.gpu(), request.worker(),
      absl::StrJoin(request.batches(), ","), request.executor());
  Wake();
  return stored;
}

absl::StatusOr<v1::SubmitProbeResponse> FleetService::SubmitWarned(
    const v1::SubmitProbeRequest& request) {
  v1::SubmitProbeResponse out;
  ASSIGN_OR_RETURN(*out.mutable_probe(), Submit(request));
  if (std::string why = NoWorkerFor(out.probe(), roster_.Connected());
      !why.empty()) {
    out.set_warning(absl::StrCat(why, kStaysQueued));
  }
  return out;
}

grpc::ServerUnaryReactor* FleetService::SubmitProbe(
    grpc::CallbackServerContext* context, const v1::SubmitProbeRequest* request,
    v1::SubmitProbeResponse* response) {
  return Serve<v1::SubmitProbeResponse>(
      context, "/headroom.v1.Fleet/SubmitProbe", request, response,
      [this, request]() -> absl::StatusOr<v1::SubmitProbeResponse> {
        RETURN_IF_ERROR(CheckOperatorProbeRequest(*request));
        return SubmitWarned(*request);
      });
}

grpc::ServerUnaryReactor* FleetService::SubmitEnergyProbe(
    grpc::CallbackServerContext* context,
    const v1::SubmitEnergyProbeRequest* request,
    v1::SubmitProbeResponse* response) {
  return Serve<v1::SubmitProbeResponse>(
      context, "/headroom.v1.Fleet/SubmitEnergyProbe", request, response,
      [this, request]() -> absl::StatusOr<v1::SubmitProbeResponse> {
        RETURN_IF_ERROR(CheckSize(*request, service_.max_request_bytes));
        ASSIGN_OR_RETURN(const v1::SubmitProbeRequest probe,
                         EnergyProbeRequest(*request));
        return SubmitWarned(probe);
      });
}

grpc::ServerUnaryReactor* FleetService::SubmitAutotune(
    grpc::CallbackServerContext* context,
    const v1::SubmitAutotuneRequest* request,
    v1::SubmitAutotuneResponse* response) {
  return Serve<v1::SubmitAutotuneResponse>(
      context, "/headroom.v1.Fleet/SubmitAutotune", request, response,
      [this, request] {
        return AnswerAutotune(*request, store_, *catalog_,
                              service_.max_request_bytes,
                              [this](const v1::SubmitProbeRequest& probe) {
                                return Submit(probe);
                              });
      });
}

grpc::ServerWriteReactor<v1::ProbeEvent>* FleetService::WatchProbe(
    grpc::CallbackServerContext* context,
    const v1::WatchProbeRequest* request) {
  absl::Status allowed = absl::OkStatus();
  if (service_.access != nullptr) {
    allowed = service_.access->Check(*context, "/headroom.v1.Fleet/WatchProbe");
  }
  return watchers_.Watch(request->id(), request->follow(), allowed);
}

grpc::ServerUnaryReactor* FleetService::CancelProbe(
    grpc::CallbackServerContext* context, const v1::CancelProbeRequest* request,
    v1::CancelProbeResponse* response) {
  return Serve<v1::CancelProbeResponse>(
      context, "/headroom.v1.Fleet/CancelProbe", nullptr, response,
      [this, request]() -> absl::StatusOr<v1::CancelProbeResponse> {
        RETURN_IF_ERROR(CheckFleetId(request->id(), "id"));
        ASSIGN_OR_RETURN(v1::Probe before, store_->GetProbe(request->id()));
        ASSIGN_OR_RETURN(v1::Probe probe, store_->CancelProbe(request->id()));
        // The store leaves a finished probe as it is (and one cancelled
        // before): nothing was cancelled, so the call did not succeed.
        if (before.state() == v1::Probe::CANCELLED ||
            probe.state() != v1::Probe::CANCELLED) {
          return absl::FailedPreconditionError(
              absl::StrCat("probe ", probe.id(), " already finished (",
                           v1::Probe::State_Name(probe.state()),
                           "); only a QUEUED or RUNNING probe can be "
                           "cancelled"));
        }
        if (before.state() == v1::Probe::RUNNING &&
            probe.state() == v1::Probe::CANCELLED) {
          roster_.Cancel(before.worker(), before.assignment_id(),
                         "probe cancelled by an operator");
        }
        spdlog::info("event=probe_cancel probe={} state={}", probe.id(),
                     v1::Probe::State_Name(probe.state()));
        watchers_.PublishProbe(probe);
        Wake();
        v1::CancelProbeResponse out;
        *out.mutable_probe() = std::move(probe);
        return out;
      });
}

grpc::ServerUnaryReactor* FleetService::ListProbes(
    grpc::CallbackServerContext* context, const v1::ListProbesRequest* request,
    v1::ListProbesResponse* response) {
  return Serve<v1::ListProbesResponse>(
      context, "/headroom.v1.Fleet/ListProbes", nullptr, response,
      [this, request]() -> absl::StatusOr<v1::ListProbesResponse> {
        ASSIGN_OR_RETURN(const int32_t page_size, ProbesPageSize(*request));
        const size_t budget = PageBytes(service_.max_request_bytes);
        const std::string listing = absl::StrCat("probes/", request->state());
        ASSIGN_OR_RETURN(
            const PageSpec spec,
            PageFromRequest(listing, page_size, request->page_token(), budget));
        ASSIGN_OR_RETURN(Page<v1::Probe> probes,
                         store_->ListProbes(request->state(), spec));
        v1::ListProbesResponse out;
        out.set_next_page_token(NextPageToken(listing, probes.next_after));
        for (v1::Probe& probe : probes.entries) {
          if (BoundEntry(&probe, budget)) {
            spdlog::warn("event=list_entry_cut listing=probes probe={}",
                         probe.id().substr(0, 64));
          }
          *out.add_probes() = std::move(probe);
        }
        return out;
      });
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
      if (counts.ok()) metrics_->ProbeStates(NamedProbeCounts(*counts));
    }
  }
}

}  // namespace headroom
