#include "server/service/store_executor.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace headroom {

grpc::ServerUnaryReactor* DeferStore(BackgroundWorker* executor,
                                     size_t max_queued,
                                     grpc::ServerUnaryReactor* reactor,
                                     std::function<void()> job) {
  if (!executor->Post(std::move(job), max_queued)) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("the store queue is full (", max_queued,
                     " requests wait for the store, --store_queue); retry "
                     "later")));
  }
  return reactor;
}

}  // namespace headroom
