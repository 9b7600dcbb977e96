#ifndef HEADROOM_WORKER_DAEMON_DAEMON_H_
#define HEADROOM_WORKER_DAEMON_DAEMON_H_

// The worker daemon: one Fleet.Connect stream to the planner, reconnected
// with exponential backoff; assignments run one at a time on an executor;
// samples stream back in small batches; results are kept until the planner
// acknowledges (or rejects) them and are re-sent after every reconnect, and,
// with a journal, after a restart of the worker.

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/client_channel.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "worker/daemon/executor.h"
#include "worker/daemon/result_journal.h"

namespace headroom::worker {

struct DaemonOptions {
  std::string planner = "127.0.0.1:50051";
  // TLS (the planner's CA, this worker's certificate for mTLS) and the
  // bearer token; plaintext without a CA.
  ChannelSecurity security;
  std::string worker_id;
  std::string hostname;
  // The node the GPUs are on, as the cluster's scheduler names it.
  std::string node_name;
  std::vector<v1::GpuDevice> gpus;
  // The node's host memory, bytes (0: not known), said at hello.
  uint64_t host_memory_bytes = 0;
  std::vector<std::string> notes;
  std::map<std::string, std::string> framework_versions;
  // Reconnect backoff: doubles from min to max, with +-20 % jitter.
  std::chrono::milliseconds backoff_min{100};
  std::chrono::milliseconds backoff_max{10000};
  // Samples go out when this many wait or this long passed.
  size_t sample_flush_count = 16;
  std::chrono::milliseconds sample_flush_period{100};
  // Samples kept while disconnected (older ones are dropped and counted).
  size_t max_buffered_samples = 100000;
  // On shutdown: how long to wait for the running batch and for acks.
  std::chrono::milliseconds shutdown_grace{10000};
  // Where results wait for their acknowledgement on disk (ResultJournal);
  // empty: in memory only, lost with the process.
  std::string journal_dir;
};

struct DaemonCounters {
  uint64_t samples_sent = 0;
  uint64_t samples_dropped = 0;
  uint64_t results_sent = 0;
  uint64_t results_acked = 0;
  // Results the planner refused by name (dropped, never sent again).
  uint64_t results_rejected = 0;
  // Results read back from the journal at start.
  uint64_t results_recovered = 0;
  uint64_t connects = 0;
  uint64_t assignments = 0;
};

class WorkerDaemon {
 public:
  // `executors` by name ("sim", "torch", "cuda"); the first is the default.
  WorkerDaemon(DaemonOptions options,
               std::vector<std::unique_ptr<Executor>> executors);
  ~WorkerDaemon();
  WorkerDaemon(const WorkerDaemon&) = delete;
  WorkerDaemon& operator=(const WorkerDaemon&) = delete;

  // Connects and serves until Stop(); returns after a clean hand-back.
  // Results left in the journal by an earlier run go first, once the
  // planner has welcomed the worker.
  void Run();
  // Asks Run() to finish: the running assignment finishes its batch or is
  // handed back, unacknowledged results get `shutdown_grace` to be acked.
  void Stop();

  DaemonCounters counters() const;
  bool connected() const { return connected_.load(); }

 private:
  class Sink;
  using Stream =
      grpc::ClientReaderWriter<v1::WorkerMessage, v1::PlannerMessage>;

  // One connection; true when the planner welcomed the worker. `ended` is
  // how the stream ended.
  bool Serve(v1::Fleet::Stub* stub, grpc::Status* ended);
  // Waits `wait` between connections (less once Finished), polling
  // `channel` so that its reconnect attempts progress meanwhile: a planner
  // back within the wait is connected to when it ends.
  void WaitToReconnect(grpc::Channel& channel, std::chrono::milliseconds wait);
  // Stopping and nothing left to deliver (or out of time). Needs mu_.
  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Handle(const v1::PlannerMessage& message);
  void StartAssignment(const v1::Assignment& assignment);
  void RunAssignment(const v1::Assignment& assignment, Executor* executor);
  // Sets the result's GPU and versions and writes it to the journal.
  void PrepareResult(v1::ProbeResult* result, uint32_t gpu_index);
  // Keeps a prepared result until acknowledged and queues it for the
  // writer. Needs mu_.
  void QueueResultLocked(v1::ProbeResult result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets an acknowledged or rejected result. Needs mu_.
  void ForgetResultLocked(const std::string& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a result until acknowledged and sends it when connected.
  void SendResult(v1::ProbeResult result, uint32_t gpu_index);
  void QueueSample(v1::Sample sample, const std::string& probe_id);
  // The writer thread: samples in batches, results, heartbeats.
  void WriteLoop(Stream* stream, std::atomic<bool>* stream_ok);
  v1::GpuDevice DeviceAt(uint32_t index) const;

  const DaemonOptions options_;
  std::map<std::string, std::unique_ptr<Executor>> executors_;
  // Null without a journal directory (or when it cannot be opened).
  std::unique_ptr<ResultJournal> journal_;
  std::string default_executor_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // signalled when anything below changes
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point stop_deadline_ ABSL_GUARDED_BY(mu_);
  // The live stream's, to cancel.
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::chrono::milliseconds heartbeat_ ABSL_GUARDED_BY(mu_){5000};
  // Results not yet acknowledged, by key, in the order made.
  std::map<std::string, v1::ProbeResult> unacked_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> unacked_order_ ABSL_GUARDED_BY(mu_);
  // Results to write now.
  std::deque<v1::WorkerMessage> outbox_ ABSL_GUARDED_BY(mu_);
  // The live stream's planner has welcomed the worker. Until then a new
  // result waits in unacked_ and goes with the welcome's re-send, after
  // every older one: a last result written before them would end its
  // assignment while they are still unstored.
  bool welcomed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<std::pair<std::string, v1::Sample>> samples_ ABSL_GUARDED_BY(mu_);
  std::string running_assignment_ ABSL_GUARDED_BY(mu_);
  std::string running_probe_ ABSL_GUARDED_BY(mu_);
  std::thread runner_ ABSL_GUARDED_BY(mu_);
  std::atomic<StopReason> stop_{StopReason::kNone};
  DaemonCounters counters_ ABSL_GUARDED_BY(mu_);
  std::uint64_t sample_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> connected_{false};
};

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_DAEMON_H_
