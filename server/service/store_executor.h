#ifndef HEADROOM_SERVER_SERVICE_STORE_EXECUTOR_H_
#define HEADROOM_SERVER_SERVICE_STORE_EXECUTOR_H_

// Store I/O never runs on a gRPC callback thread: a handler that reads or
// writes the store hands the work to the store executor (a fixed pool of
// threads with a bounded queue, shared by every service), and the job
// finishes the call from there, as Refit does on the refit worker.

#include <cstddef>
#include <functional>

#include "grpcpp/support/server_callback.h"
#include "server/service/background_worker.h"

namespace headroom {

// Runs `job` on `executor`; the job must finish `reactor`. When
// `max_queued` jobs already wait, finishes the call with RESOURCE_EXHAUSTED
// instead. Returns `reactor`, for the handler to return.
grpc::ServerUnaryReactor* DeferStore(BackgroundWorker* executor,
                                     size_t max_queued,
                                     grpc::ServerUnaryReactor* reactor,
                                     std::function<void()> job);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_STORE_EXECUTOR_H_
