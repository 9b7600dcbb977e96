#include "server/service/background_worker.h"

#include <algorithm>

namespace headroom {

BackgroundWorker::BackgroundWorker(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) {
    threads_.emplace_back([this] { Run(); });
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

void BackgroundWorker::Run() {
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
