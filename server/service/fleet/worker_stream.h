#ifndef HEADROOM_SERVER_SERVICE_FLEET_WORKER_STREAM_H_
#define HEADROOM_SERVER_SERVICE_FLEET_WORKER_STREAM_H_

// One worker's Fleet.Connect stream: the bidi reactor and the message
// protocol. Each message read is queued on the stream's SerialQueue and
// handled on the store executor, in read order, by a WorkerStreamHandler
// (the FleetService); the next read starts at once, so no gRPC callback
// thread touches the store.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "headroom/v1/fleet.grpc.pb.h"
#include "server/service/background_worker.h"
#include "server/service/metrics.h"
#include "server/service/queued_writer.h"
#include "server/service/serial_queue.h"

namespace headroom {

class WorkerStream;

// What a stream's messages are handed to, on the store executor, one at a
// time per stream and in the order read.
class WorkerStreamHandler {
 public:
  virtual ~WorkerStreamHandler() = default;
  virtual void OnHello(WorkerStream* stream, const v1::WorkerHello& hello) = 0;
  virtual void OnHeartbeat(WorkerStream* stream,
                           const v1::Heartbeat& heartbeat) = 0;
  virtual void OnSamples(WorkerStream* stream,
                         const v1::SampleBatch& samples) = 0;
  virtual void OnResult(WorkerStream* stream,
                        const v1::ProbeResult& result) = 0;
  // The call is over and every message before its end was handled; the
  // stream is freed when this returns.
  virtual void OnStreamDone(WorkerStream* stream) = 0;
};

class WorkerStream
    : public QueuedWriter<
          grpc::ServerBidiReactor<v1::WorkerMessage, v1::PlannerMessage>,
          v1::PlannerMessage> {
 public:
  // `identity` is the worker the caller's credential is bound to
  // ("cert:<worker id>" from a worker certificate, "token:<worker id>" from
  // a worker token), empty on a planner running open. A worker
  // that sends faster than its messages are handled (more than
  // `max_unhandled` waiting) is told to reconnect. `handler` and
  // `executor` must outlive every stream. Starts the first read.
  WorkerStream(WorkerStreamHandler* handler, BackgroundWorker* executor,
               std::string peer, std::string identity, size_t max_unhandled);

  void OnReadDone(bool ok) override;
  void OnCancel() override;
  // The stream is freed after its last message is handled (its queue
  // outlives it until then).
  void OnDone() override;

  const std::string& peer() const { return peer_; }
  // When the worker last sent anything on this stream.
  int64_t last_heard_ms() const { return last_heard_ms_.load(); }

  const std::string identity;

  // What the planner keeps about this stream (WorkerRoster). Only the
  // roster reaches it, through its own accessor that requires its lock,
  // so clang checks every access.
  struct Registration {
    bool registered = false;
    bool replaced = false;
    v1::WorkerHello hello;
    std::vector<std::string> gpu_kinds;
    std::vector<std::string> executors;
    std::string running_assignment;
    std::string running_probe;
    // The worker is stopping: it gets no new assignment.
    bool draining = false;
    uint64_t samples_received = 0;
    int64_t last_seen_written_ms = 0;
    std::vector<PlannerMetrics::GpuGauges> gauges;
  };

 private:
  // Runs on the store executor, in read order.
  void Handle(const v1::WorkerMessage& message);

  WorkerStreamHandler* handler_;
  std::string peer_;
  const size_t max_unhandled_;
  std::atomic<int64_t> last_heard_ms_;
  // Read by gRPC; moved into a job once read.
  v1::WorkerMessage incoming_;
  std::shared_ptr<SerialQueue> handled_;

  friend class WorkerRoster;
  Registration registration_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_WORKER_STREAM_H_
