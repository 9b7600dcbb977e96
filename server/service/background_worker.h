#ifndef HEADROOM_SERVER_SERVICE_BACKGROUND_WORKER_H_
#define HEADROOM_SERVER_SERVICE_BACKGROUND_WORKER_H_

// One thread that runs long jobs (refits) in order, so gRPC reactors never
// block on them. Jobs queued when the worker is destroyed still run first.

#include <deque>
#include <functional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace headroom {

class BackgroundWorker {
 public:
  BackgroundWorker();
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  // Queues `job`; false when `max_queued` jobs already wait (the caller
  // answers RESOURCE_EXHAUSTED).
  bool Post(std::function<void()> job, size_t max_queued = 8);

 private:
  void Run();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_BACKGROUND_WORKER_H_
