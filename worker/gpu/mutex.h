#ifndef HEADROOM_WORKER_GPU_MUTEX_H_
#define HEADROOM_WORKER_GPU_MUTEX_H_

// A std::mutex that clang's thread-safety analysis understands, for the
// native layer, which takes no absl (see CMakeLists.txt): fields say
// HEADROOM_GUARDED_BY(mu_) and clang checks every access
// (scripts/check-thread-safety.py). Other compilers see a plain mutex.

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define HEADROOM_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HEADROOM_THREAD_ANNOTATION(x)
#endif
#define HEADROOM_GUARDED_BY(x) HEADROOM_THREAD_ANNOTATION(guarded_by(x))
#define HEADROOM_REQUIRES(...) \
  HEADROOM_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))

namespace headroom {
namespace gpu {

class HEADROOM_THREAD_ANNOTATION(capability("mutex")) Mutex {
 public:
  void Lock() HEADROOM_THREAD_ANNOTATION(acquire_capability()) { mu_.lock(); }
  void Unlock() HEADROOM_THREAD_ANNOTATION(release_capability()) {
    mu_.unlock();
  }

  // Releases the mutex while waiting on `cv` until a notification or
  // `deadline`, and holds it again on return; true when the deadline passed.
  bool WaitUntil(std::condition_variable& cv,
                 std::chrono::steady_clock::time_point deadline)
      HEADROOM_REQUIRES(this) {
    std::unique_lock<std::mutex> lock(mu_, std::adopt_lock);
    const bool timed_out =
        cv.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();  // still held, by the caller's MutexLock
    return timed_out;
  }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope.
class HEADROOM_THREAD_ANNOTATION(scoped_lockable) MutexLock {
 public:
  explicit MutexLock(Mutex& mu)
      HEADROOM_THREAD_ANNOTATION(acquire_capability(mu))
      : mu_(mu) {
    mu_.Lock();
  }
  ~MutexLock() HEADROOM_THREAD_ANNOTATION(release_capability()) {
    mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

}  // namespace gpu
}  // namespace headroom

#endif  // HEADROOM_WORKER_GPU_MUTEX_H_
