#include "server/service/background_worker.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace headroom {

BackgroundWorker::BackgroundWorker(int threads, int nice) {
  for (int i = 0; i < std::max(threads, 1); ++i) {
    threads_.emplace_back([this, nice] { Run(nice); });
  }
}

BackgroundWorker::~BackgroundWorker() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& thread : threads_) thread.join();
}

bool BackgroundWorker::Post(std::function<void()> job, size_t max_queued) {
  absl::MutexLock lock(&mu_);
  if (stopping_ || jobs_.size() >= max_queued) return false;
  jobs_.push_back(std::move(job));
  return true;
}

bool BackgroundWorker::HasWorkOrStopping() const {
  return stopping_ || !jobs_.empty();
}

void BackgroundWorker::Run(int nice) {
  // Best effort: a failure leaves the thread at the process's priority.
  if (nice > 0) {
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)),
                      nice);
    // SCHED_IDLE as well: a runnable normal thread (a catalog answer)
    // preempts these at once, where nice alone waits out a time slice.
    sched_param idle{};
    (void)sched_setscheduler(0, SCHED_IDLE, &idle);
  }
  for (;;) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BackgroundWorker::HasWorkOrStopping));
      if (jobs_.empty()) return;  // stopping, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace headroom
