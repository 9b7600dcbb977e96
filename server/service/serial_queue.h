#ifndef HEADROOM_SERVER_SERVICE_SERIAL_QUEUE_H_
#define HEADROOM_SERVER_SERVICE_SERIAL_QUEUE_H_

// Jobs of one caller (one worker stream) run on a shared BackgroundWorker in
// the order they were added, one at a time, never two at once: the store
// work of a stream keeps its order while many streams share the threads.
// At most one job of the queue waits in the worker's queue at a time, so
// many streams cannot fill it; the caller bounds its own backlog (pending).

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/service/background_worker.h"

namespace headroom {

class SerialQueue : public std::enable_shared_from_this<SerialQueue> {
 public:
  // Made shared (std::make_shared), so that a job may free the queue's
  // owner: the queue lives until its last turn ends. `worker` must outlive
  // every job added.
  explicit SerialQueue(BackgroundWorker* worker) : worker_(worker) {}
  SerialQueue(const SerialQueue&) = delete;
  SerialQueue& operator=(const SerialQueue&) = delete;

  // Adds `job` after those already added. Runs it on the worker; when the
  // worker refuses (it is stopping), the job runs on the thread that drains
  // the queue, or on this one.
  void Add(std::function<void()> job) {
    {
      absl::MutexLock lock(&mu_);
      jobs_.push_back(std::move(job));
      if (draining_) return;
      draining_ = true;
    }
    Schedule();
  }

  // Jobs added and not yet finished (the one running counts).
  size_t pending() {
    absl::MutexLock lock(&mu_);
    return jobs_.size() + (running_ ? 1 : 0);
  }

 private:
  // Jobs one turn runs before giving the worker's threads to other queues.
  static constexpr int kJobsPerTurn = 16;

  void Schedule() {
    if (!worker_->Post([self = shared_from_this()] { self->Turn(); },
                       kUnbounded)) {
      Turn();
    }
  }

  // Runs queued jobs in order; reschedules itself while some remain.
  void Turn() {
    for (int i = 0; i < kJobsPerTurn; ++i) {
      std::function<void()> job;
      {
        absl::MutexLock lock(&mu_);
        if (jobs_.empty()) {
          draining_ = false;
          return;
        }
        job = std::move(jobs_.front());
        jobs_.pop_front();
        running_ = true;
      }
      job();
      absl::MutexLock lock(&mu_);
      running_ = false;
    }
    Schedule();
  }

  static constexpr size_t kUnbounded = static_cast<size_t>(-1);

  BackgroundWorker* worker_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> jobs_ ABSL_GUARDED_BY(mu_);
  // A turn is scheduled or running.
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool running_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_SERIAL_QUEUE_H_
