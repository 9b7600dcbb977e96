#ifndef HEADROOM_SERVER_SERVICE_BACKGROUND_WORKER_H_
#define HEADROOM_SERVER_SERVICE_BACKGROUND_WORKER_H_

// Threads that run long jobs (refits, model imports) in the order they were
// queued, so gRPC reactors never block on them; with one thread each job
// finishes before the next starts. Jobs queued when the worker is destroyed
// still run first.

#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace headroom {

class BackgroundWorker {
 public:
  // `threads` at least 1. `nice` above 0 lowers the threads' scheduling
  // priority (Linux nice per thread, and SCHED_IDLE), so that jobs yield
  // the CPU to the gRPC threads' short answers at once.
  explicit BackgroundWorker(int threads = 1, int nice = 0);
  ~BackgroundWorker();
  BackgroundWorker(const BackgroundWorker&) = delete;
  BackgroundWorker& operator=(const BackgroundWorker&) = delete;

  // Queues `job`; false when `max_queued` jobs already wait (the caller
  // answers RESOURCE_EXHAUSTED).
  bool Post(std::function<void()> job, size_t max_queued = 8);

 private:
  void Run(int nice);
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_BACKGROUND_WORKER_H_
