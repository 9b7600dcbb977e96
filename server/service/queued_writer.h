#ifndef HEADROOM_SERVER_SERVICE_QUEUED_WRITER_H_
#define HEADROOM_SERVER_SERVICE_QUEUED_WRITER_H_

// The write side of a server stream reactor (bidi or server-streaming):
// messages queue and go out one at a time, and Finish comes once, after the
// queue has drained. Callbacks are never entered with the lock held.

#include <deque>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/status.h"

namespace headroom {

template <typename Reactor, typename Message>
class QueuedWriter : public Reactor {
 public:
  // Queues `message`. A droppable one (a live sample) is discarded rather
  // than queued beyond `max_queued` messages; the others always queue.
  // Returns false when the stream is ending.
  bool Enqueue(Message message, bool droppable = false,
               size_t max_queued = 4096) {
    const Message* next = nullptr;
    {
      absl::MutexLock lock(&write_mu_);
      if (ending_) return false;
      if (droppable && queue_.size() >= max_queued) {
        ++dropped_;
        return true;
      }
      queue_.push_back(std::move(message));
      if (!writing_) {
        writing_ = true;
        next = &queue_.front();
      }
    }
    if (next != nullptr) this->StartWrite(next);
    return true;
  }

  // Finishes the call with `status` once queued messages are written (or at
  // once when a write failed). Later calls change nothing.
  void End(grpc::Status status) {
    bool finish_now = false;
    {
      absl::MutexLock lock(&write_mu_);
      if (ending_) return;
      ending_ = true;
      status_ = std::move(status);
      finish_now = !writing_ && !finished_;
      finished_ = finished_ || finish_now;
    }
    if (finish_now) this->Finish(status_);
  }

  void OnWriteDone(bool ok) override {
    const Message* next = nullptr;
    bool finish_now = false;
    {
      absl::MutexLock lock(&write_mu_);
      queue_.pop_front();
      if (!ok) {
        // The peer is gone: nothing more can be written.
        queue_.clear();
        if (!ending_) {
          ending_ = true;
          status_ = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "stream broken while writing");
        }
      }
      if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        finish_now = ending_ && !finished_;
        finished_ = finished_ || finish_now;
      }
    }
    if (next != nullptr) {
      this->StartWrite(next);
    } else if (finish_now) {
      this->Finish(status_);
    }
  }

  // End() was called (or a write failed): start no further reads.
  bool ending() {
    absl::MutexLock lock(&write_mu_);
    return ending_;
  }

  size_t dropped() {
    absl::MutexLock lock(&write_mu_);
    return dropped_;
  }

 private:
  absl::Mutex write_mu_;
  // std::deque keeps the front element's address while others are pushed.
  std::deque<Message> queue_ ABSL_GUARDED_BY(write_mu_);
  bool writing_ ABSL_GUARDED_BY(write_mu_) = false;
  bool ending_ ABSL_GUARDED_BY(write_mu_) = false;
  bool finished_ ABSL_GUARDED_BY(write_mu_) = false;
  size_t dropped_ ABSL_GUARDED_BY(write_mu_) = 0;
  grpc::Status status_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_QUEUED_WRITER_H_
