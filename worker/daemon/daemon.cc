#include "worker/daemon/daemon.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/build_info.h"
#include "grpcpp/create_channel.h"
#include "spdlog/spdlog.h"
#include "worker/daemon/autotune_runner.h"

namespace headroom::worker {

// Turns an executor's callbacks into queued samples and results.
class WorkerDaemon::Sink final : public ExecutionSink {
 public:
  Sink(WorkerDaemon* daemon, const v1::Assignment& assignment)
      : daemon_(daemon), assignment_(assignment) {}

  void Sample(const v1::BatchRun& run, int64_t t_ms,
              const GpuReading& reading) override {
    v1::Sample sample;
    sample.set_assignment_id(assignment_.assignment_id());
    sample.set_batch(run.batch());
    sample.set_t_ms(t_ms);
    sample.set_gpu_index(reading.gpu_index.value_or(assignment_.gpu_index()));
    sample.set_fb_used_mib(static_cast<double>(reading.memory_used_bytes) /
                           (1024.0 * 1024.0));
    if (reading.power_w) sample.set_power_w(*reading.power_w);
    if (reading.total_energy_mj) {
      sample.set_total_energy_mj(*reading.total_energy_mj);
    }
    daemon_->QueueSample(std::move(sample), assignment_.probe_id());
  }

  void BatchDone(const v1::BatchRun& run, v1::BatchResult result) override {
    v1::ProbeResult message;
    // The key names the measurement, not the attempt: a batch re-run after
    // a re-queue is stored once. An autotune run's mode is part of it.
    message.set_key(absl::StrCat(assignment_.probe_id(), "/", run.batch(), "/",
                                 run.repetition(),
                                 run.mode().empty() ? "" : "/", run.mode()));
    message.set_probe_id(assignment_.probe_id());
    message.set_assignment_id(assignment_.assignment_id());
    *message.mutable_batch() = std::move(result);
    daemon_->SendResult(std::move(message), assignment_.gpu_index());
  }

 private:
  WorkerDaemon* daemon_;
  const v1::Assignment& assignment_;
};

WorkerDaemon::WorkerDaemon(DaemonOptions options,
                           std::vector<std::unique_ptr<Executor>> executors)
    : options_(std::move(options)) {
  for (std::unique_ptr<Executor>& executor : executors) {
    if (default_executor_.empty()) default_executor_ = executor->name();
    const std::string name = executor->name();
    executors_[name] = std::move(executor);
  }
  if (options_.journal_dir.empty()) return;
  absl::StatusOr<std::unique_ptr<ResultJournal>> journal =
      ResultJournal::Open(options_.journal_dir, {});
  if (!journal.ok()) {
    spdlog::error(
        "event=journal_unavailable worker={} dir={} error=\"{}\" "
        "action=results_in_memory_only",
        options_.worker_id, options_.journal_dir, journal.status().ToString());
    return;
  }
  journal_ = *std::move(journal);
  for (v1::ProbeResult& result : journal_->Load()) {
    const std::string key = result.key();
    if (unacked_.count(key) == 0) unacked_order_.push_back(key);
    unacked_[key] = std::move(result);
    ++counters_.results_recovered;
  }
  if (counters_.results_recovered > 0) {
    spdlog::info("event=journal_recovered worker={} dir={} results={}",
                 options_.worker_id, options_.journal_dir,
                 counters_.results_recovered);
  }
}

WorkerDaemon::~WorkerDaemon() {
  Stop();
  if (runner_.joinable()) runner_.join();
}

void WorkerDaemon::Stop() {
  absl::MutexLock lock(&mu_);
  if (stopping_) return;
  stopping_ = true;
  stop_deadline_ = std::chrono::steady_clock::now() + options_.shutdown_grace;
  if (stop_.load() == StopReason::kNone) stop_ = StopReason::kShutdown;
  cv_.SignalAll();
}

DaemonCounters WorkerDaemon::counters() const {
  absl::MutexLock lock(&mu_);
  return counters_;
}

v1::GpuDevice WorkerDaemon::DeviceAt(uint32_t index) const {
  for (const v1::GpuDevice& gpu : options_.gpus) {
    if (gpu.index() == index) return gpu;
  }
  return options_.gpus.empty() ? v1::GpuDevice() : options_.gpus.front();
}

bool WorkerDaemon::Finished() const {
  return stopping_ && ((unacked_.empty() && running_assignment_.empty()) ||
                       std::chrono::steady_clock::now() >= stop_deadline_);
}

void WorkerDaemon::Run() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
  // The channel retries a lost connection on our backoff, not on gRPC's
  // (1 s growing to 120 s, a 20 s connect timeout): a connect attempt gets
  // backoff_max, at least 1 s, and no longer waits between attempts.
  const int backoff_min_ms = static_cast<int>(options_.backoff_min.count());
  const int backoff_max_ms = static_cast<int>(options_.backoff_max.count());
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, backoff_min_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              std::max(backoff_max_ms, 1000));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_max_ms);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      OpenChannel(options_.planner, options_.security, args);
  if (!channel.ok()) {
    spdlog::error("event=connect_failed error=\"{}\"",
                  std::string(channel.status().message()));
    return;
  }
  auto stub = v1::Fleet::NewStub(*channel);
  std::mt19937_64 rng(std::hash<std::string>()(options_.worker_id));
  std::chrono::milliseconds backoff = options_.backoff_min;
  // The planner being away is said once (and again when the kind of
  // failure changes: unreachable, or refused with another code), then
  // retries are logged at debug until it welcomes us.
  std::optional<grpc::StatusCode> waiting_said;
  const auto failure_kind = [](grpc::StatusCode code) {
    return code == grpc::StatusCode::CANCELLED ||
                   code == grpc::StatusCode::DEADLINE_EXCEEDED ||
                   code == grpc::StatusCode::OK
               ? grpc::StatusCode::UNAVAILABLE
               : code;
  };
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (Finished()) break;
    }
    grpc::Status ended;
    const bool welcomed = Serve(stub.get(), &ended);
    connected_ = false;
    std::chrono::milliseconds wait = options_.backoff_min;
    {
      absl::MutexLock lock(&mu_);
      std::string reason = ended.error_message();
      std::replace(reason.begin(), reason.end(), '"', '\'');
      if (reason.empty()) reason = "the stream ended";
      if (Finished()) {
        spdlog::debug("event=stream_ended worker={} code={} message=\"{}\"",
                      options_.worker_id, static_cast<int>(ended.error_code()),
                      reason);
        break;
      }
      if (welcomed) {
        backoff = options_.backoff_min;
        waiting_said.reset();
      }
      if (waiting_said != failure_kind(ended.error_code())) {
        spdlog::log(welcomed ? spdlog::level::warn : spdlog::level::info,
                    "event=waiting_for_planner worker={} planner={} code={} "
                    "message=\"{}waiting for the planner at {} ({}); retrying "
                    "quietly until connected\"",
                    options_.worker_id, options_.planner,
                    static_cast<int>(ended.error_code()),
                    welcomed ? "disconnected; " : "", options_.planner, reason);
        waiting_said = failure_kind(ended.error_code());
      } else {
        spdlog::debug("event=stream_ended worker={} code={} message=\"{}\"",
                      options_.worker_id, static_cast<int>(ended.error_code()),
                      reason);
      }
      std::uniform_real_distribution<double> jitter(0.8, 1.2);
      wait = std::chrono::milliseconds(static_cast<int64_t>(
          static_cast<double>(backoff.count()) * jitter(rng)));
      spdlog::debug("event=reconnect_wait worker={} ms={}", options_.worker_id,
                    wait.count());
      backoff = std::min(backoff * 2, options_.backoff_max);
    }
    // A stopping daemon still retries (to deliver results) until its
    // deadline, but no sooner than the backoff says.
    WaitToReconnect(**channel, wait);
  }
  std::thread runner;
  {
    absl::MutexLock lock(&mu_);
    stop_ = StopReason::kShutdown;
    runner = std::move(runner_);
  }
  if (runner.joinable()) runner.join();
  absl::MutexLock lock(&mu_);
  spdlog::info("event=worker_stopped worker={} unacked={}", options_.worker_id,
               unacked_.size());
}

void WorkerDaemon::WaitToReconnect(grpc::Channel& channel,
                                   std::chrono::milliseconds wait) {
  // gRPC (1.51) moves a connect attempt on only while some thread polls the
  // channel; left alone, only its backup poller does, every 5 s, and a
  // worker found a restarted planner 17-18 s late. So the wait polls it,
  // in slices short enough to see Stop, and once it is connected sleeps out
  // the backoff.
  constexpr auto kSlice = std::chrono::milliseconds(50);
  const auto wake = std::chrono::steady_clock::now() + wait;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= wake) return;
    {
      absl::MutexLock lock(&mu_);
      if (Finished()) return;
      if (channel.GetState(/*try_to_connect=*/true) == GRPC_CHANNEL_READY) {
        cv_.WaitWithTimeout(&mu_, absl::FromChrono(wake - now));
        continue;
      }
    }
    channel.WaitForConnected(
        std::chrono::system_clock::now() +
        std::min<std::chrono::steady_clock::duration>(kSlice, wake - now));
  }
}

bool WorkerDaemon::Serve(v1::Fleet::Stub* stub, grpc::Status* ended) {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    context_ = &context;
  }
  std::unique_ptr<Stream> stream = stub->Connect(&context);
  v1::WorkerMessage hello;
  {
    absl::MutexLock lock(&mu_);
    v1::WorkerHello& h = *hello.mutable_hello();
    h.set_worker_id(options_.worker_id);
    h.set_hostname(options_.hostname);
    h.set_node_name(options_.node_name.empty() ? options_.hostname
                                               : options_.node_name);
    for (const v1::GpuDevice& gpu : options_.gpus) *h.add_gpus() = gpu;
    h.set_host_memory_bytes(options_.host_memory_bytes);
    for (const auto& [name, executor] : executors_) h.add_executors(name);
    h.set_version(GetBuildInfo().version);
    for (const auto& [name, version] : options_.framework_versions) {
      (*h.mutable_framework_versions())[name] = version;
    }
    for (const std::string& note : options_.notes) h.add_notes(note);
    h.set_running_assignment_id(running_assignment_);
  }
  bool welcomed = false;
  if (stream->Write(hello)) {
    {
      // What was queued for the last stream goes again once this one is
      // welcomed (Handle).
      absl::MutexLock lock(&mu_);
      ++counters_.connects;
      outbox_.clear();
      welcomed_ = false;
    }
    connected_ = true;
    std::atomic<bool> stream_ok{true};
    std::thread writer([&] { WriteLoop(stream.get(), &stream_ok); });
    v1::PlannerMessage message;
    while (stream->Read(&message)) {
      if (message.has_welcome()) welcomed = true;
      Handle(message);
    }
    stream_ok = false;
    cv_.SignalAll();
    writer.join();
  }
  *ended = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    context_ = nullptr;
    welcomed_ = false;
  }
  return welcomed;
}

void WorkerDaemon::Handle(const v1::PlannerMessage& message) {
  switch (message.kind_case()) {
    case v1::PlannerMessage::kWelcome: {
      absl::MutexLock lock(&mu_);
      if (message.welcome().heartbeat_ms() > 0) {
        heartbeat_ =
            std::chrono::milliseconds(message.welcome().heartbeat_ms());
      }
      spdlog::info(
          "event=connected worker={} planner={} heartbeat_ms={} resending={}",
          options_.worker_id, options_.planner, heartbeat_.count(),
          unacked_.size());
      // Everything not acknowledged goes again, oldest first (from before
      // a reconnect, or from the journal of an earlier run); the planner
      // stores each run once. One queued meanwhile may go twice: stored
      // once too.
      outbox_.clear();
      welcomed_ = true;
      for (const std::string& key : unacked_order_) {
        auto it = unacked_.find(key);
        if (it == unacked_.end()) continue;
        v1::WorkerMessage resend;
        *resend.mutable_result() = it->second;
        outbox_.push_back(std::move(resend));
      }
      cv_.SignalAll();
      break;
    }
    case v1::PlannerMessage::kAssignment:
      StartAssignment(message.assignment());
      break;
    case v1::PlannerMessage::kAck: {
      absl::MutexLock lock(&mu_);
      for (const std::string& key : message.ack().keys()) {
        if (unacked_.count(key) > 0) ++counters_.results_acked;
        ForgetResultLocked(key);
      }
      cv_.SignalAll();
      break;
    }
    case v1::PlannerMessage::kRejected: {
      // Refused for good: sending it again would be refused again.
      const v1::Rejected& rejected = message.rejected();
      absl::MutexLock lock(&mu_);
      spdlog::warn(
          "event=result_rejected worker={} key={} reason={} detail=\"{}\"",
          options_.worker_id, rejected.key().substr(0, 200),
          rejected.reason().substr(0, 64), rejected.detail().substr(0, 400));
      if (unacked_.count(rejected.key()) > 0) ++counters_.results_rejected;
      ForgetResultLocked(rejected.key());
      cv_.SignalAll();
      break;
    }
    case v1::PlannerMessage::kCancel: {
      absl::MutexLock lock(&mu_);
      if (message.cancel().assignment_id() == running_assignment_) {
        spdlog::info("event=cancel worker={} assignment={} reason=\"{}\"",
                     options_.worker_id, running_assignment_,
                     message.cancel().reason());
        stop_ = StopReason::kCancelled;
      }
      break;
    }
    case v1::PlannerMessage::KIND_NOT_SET:
      break;
  }
}

void WorkerDaemon::StartAssignment(const v1::Assignment& assignment) {
  absl::MutexLock lock(&mu_);
  const auto refuse = [&](const std::string& why,
                          bool hand_back) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    v1::ProbeResult result;
    result.set_key(absl::StrCat(assignment.assignment_id(),
                                hand_back ? "/handback" : "/final"));
    result.set_probe_id(assignment.probe_id());
    result.set_assignment_id(assignment.assignment_id());
    result.set_handed_back(hand_back);
    result.set_final(!hand_back);
    if (!hand_back) result.set_error(why);
    PrepareResult(&result, assignment.gpu_index());
    QueueResultLocked(std::move(result));
    spdlog::warn("event=assignment_refused worker={} assignment={} why=\"{}\"",
                 options_.worker_id, assignment.assignment_id(), why);
  };
  if (assignment.assignment_id() == running_assignment_) return;  // re-sent
  if (stopping_ || !running_assignment_.empty()) {
    refuse(stopping_ ? "worker stopping" : "worker busy", /*hand_back=*/true);
    return;
  }
  const std::string name =
      assignment.executor().empty() ? default_executor_ : assignment.executor();
  if (executors_.count(name) == 0) {
    std::vector<std::string> have;
    for (const auto& [n, e] : executors_) have.push_back(n);
    refuse(absl::StrCat("executor \"", name,
                        "\" is not available on this worker (have: ",
                        absl::StrJoin(have, ", "), ")"),
           /*hand_back=*/false);
    return;
  }
  // A multi-GPU assignment: on GPUs this worker has, on an executor that
  // runs several.
  if (assignment.setup().gpus() > 1) {
    std::string why;
    if (name == "cuda") {
      why = absl::StrCat("the cuda executor runs on one GPU; setup.gpus = ",
                         assignment.setup().gpus());
    }
    for (uint32_t index : assignment.gpu_indices()) {
      bool have = false;
      for (const v1::GpuDevice& gpu : options_.gpus) {
        have = have || gpu.index() == index;
      }
      if (!have && why.empty()) {
        why = absl::StrCat("gpu_indices names GPU ", index,
                           ", which this worker does not have");
      }
    }
    if (!why.empty()) {
      refuse(why, /*hand_back=*/false);
      return;
    }
  }
  running_assignment_ = assignment.assignment_id();
  running_probe_ = assignment.probe_id();
  stop_ = StopReason::kNone;
  ++counters_.assignments;
  // The previous runner cleared running_assignment_ as its last act.
  if (runner_.joinable()) runner_.join();
  runner_ = std::thread([this, assignment, name] {
    RunAssignment(assignment, executors_.at(name).get());
  });
}

void WorkerDaemon::RunAssignment(const v1::Assignment& assignment,
                                 Executor* executor) {
  spdlog::info(
      "event=assignment_start worker={} assignment={} probe={} "
      "executor={} runs={}",
      options_.worker_id, assignment.assignment_id(), assignment.probe_id(),
      executor->name(), assignment.runs_size());
  Sink sink(this, assignment);
  ExecutionOutcome outcome;
  if (assignment.has_autotune()) {
    google::protobuf::Map<std::string, std::string> versions(
        options_.framework_versions.begin(), options_.framework_versions.end());
    outcome = RunAutotune(assignment, DeviceAt(assignment.gpu_index()),
                          versions, executor, &sink, stop_);
  } else {
    outcome = executor->Run(assignment, &sink, stop_);
  }
  v1::ProbeResult result;
  result.set_key(absl::StrCat(assignment.assignment_id(),
                              outcome.handed_back ? "/handback" : "/final"));
  result.set_probe_id(assignment.probe_id());
  result.set_assignment_id(assignment.assignment_id());
  result.set_final(!outcome.handed_back);
  result.set_handed_back(outcome.handed_back);
  result.set_error(outcome.error);
  result.set_details_json(outcome.details_json);
  if (outcome.autotune_record.has_value()) {
    *result.mutable_autotune_record() = *outcome.autotune_record;
  }
  spdlog::info(
      "event=assignment_end worker={} assignment={} handed_back={} "
      "error=\"{}\"",
      options_.worker_id, assignment.assignment_id(), outcome.handed_back,
      outcome.error);
  PrepareResult(&result, assignment.gpu_index());
  absl::MutexLock lock(&mu_);
  QueueResultLocked(std::move(result));
  running_assignment_.clear();
  running_probe_.clear();
  cv_.SignalAll();
}

void WorkerDaemon::SendResult(v1::ProbeResult result, uint32_t gpu_index) {
  PrepareResult(&result, gpu_index);
  absl::MutexLock lock(&mu_);
  QueueResultLocked(std::move(result));
}

void WorkerDaemon::PrepareResult(v1::ProbeResult* result, uint32_t gpu_index) {
  // Every result names the card and the versions it was measured with.
  *result->mutable_gpu() = DeviceAt(gpu_index);
  for (const auto& [name, version] : options_.framework_versions) {
    (*result->mutable_framework_versions())[name] = version;
  }
  if (journal_ == nullptr) return;
  // On disk before it is sent: a worker killed from here on sends it again
  // when it starts.
  if (absl::Status journaled = journal_->Add(*result); !journaled.ok()) {
    spdlog::warn(
        "event=journal_write_failed worker={} key={} error=\"{}\" "
        "action=sent_unjournaled",
        options_.worker_id, result->key(), journaled.ToString());
  }
}

void WorkerDaemon::ForgetResultLocked(const std::string& key) {
  unacked_.erase(key);
  if (journal_ != nullptr) journal_->Remove(key);
  while (!unacked_order_.empty() &&
         unacked_.count(unacked_order_.front()) == 0) {
    unacked_order_.pop_front();
  }
}

void WorkerDaemon::QueueResultLocked(v1::ProbeResult result) {
  const std::string key = result.key();
  if (unacked_.count(key) == 0) unacked_order_.push_back(key);
  v1::WorkerMessage message;
  *message.mutable_result() = result;
  unacked_[key] = std::move(result);
  // Before the welcome it goes with the re-send, in the order made.
  if (welcomed_) outbox_.push_back(std::move(message));
  ++counters_.results_sent;
  cv_.SignalAll();
}

void WorkerDaemon::QueueSample(v1::Sample sample, const std::string& probe_id) {
  absl::MutexLock lock(&mu_);
  sample.set_seq(sample_seq_++);
  if (samples_.size() >= options_.max_buffered_samples) {
    samples_.pop_front();
    ++counters_.samples_dropped;
  }
  samples_.emplace_back(probe_id, std::move(sample));
  if (samples_.size() >= options_.sample_flush_count) cv_.SignalAll();
}

void WorkerDaemon::WriteLoop(Stream* stream, std::atomic<bool>* stream_ok) {
  auto last_heartbeat = std::chrono::steady_clock::now();
  auto last_flush = last_heartbeat;
  bool drain_announced = false;
  while (stream_ok->load()) {
    std::vector<v1::WorkerMessage> out;
    bool close = false;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time wake = absl::Now() + absl::Milliseconds(20);
      while (stream_ok->load() && outbox_.empty() &&
             samples_.size() < options_.sample_flush_count &&
             !cv_.WaitWithDeadline(&mu_, wake)) {
      }
      if (!stream_ok->load()) break;
      const auto now = std::chrono::steady_clock::now();
      // Samples first: a batch's samples go out before its result.
      if (!samples_.empty() &&
          (samples_.size() >= options_.sample_flush_count ||
           now - last_flush >= options_.sample_flush_period ||
           !outbox_.empty() || stopping_)) {
        last_flush = now;
        while (!samples_.empty()) {
          v1::WorkerMessage message;
          v1::SampleBatch& batch = *message.mutable_samples();
          batch.set_probe_id(samples_.front().first);
          while (!samples_.empty() &&
                 samples_.front().first == batch.probe_id() &&
                 static_cast<size_t>(batch.samples_size()) < 256) {
            *batch.add_samples() = std::move(samples_.front().second);
            samples_.pop_front();
          }
          counters_.samples_sent += batch.samples_size();
          out.push_back(std::move(message));
        }
      }
      while (!outbox_.empty()) {
        out.push_back(std::move(outbox_.front()));
        outbox_.pop_front();
      }
      // A stopping worker says so at once (before its hand-back), so the
      // planner assigns it nothing more.
      const bool announce_drain = stopping_ && !drain_announced;
      if (now - last_heartbeat >= heartbeat_ || announce_drain) {
        last_heartbeat = now;
        drain_announced = drain_announced || stopping_;
        v1::WorkerMessage message;
        message.mutable_heartbeat()->set_assignment_id(running_assignment_);
        message.mutable_heartbeat()->set_draining(stopping_);
        out.insert(out.begin(), std::move(message));
      }
      if (stopping_ && now >= stop_deadline_ && context_ != nullptr) {
        context_->TryCancel();
      }
      close = stopping_ && unacked_.empty() && running_assignment_.empty() &&
              samples_.empty();
    }
    for (const v1::WorkerMessage& message : out) {
      if (!stream->Write(message)) {
        // Results stay unacknowledged and go again after the reconnect.
        stream_ok->store(false);
        break;
      }
    }
    if (close && stream_ok->load()) {
      stream->WritesDone();
      return;
    }
  }
}

}  // namespace headroom::worker
