// The pool imports run on: several threads, a bounded queue, and every
// queued job run before it is destroyed.

#include "server/service/background_worker.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

// Two threads run two jobs at once: each waits for the other to start.
TEST(BackgroundWorkerTest, ThreadsRunJobsAtOnce) {
  BackgroundWorker pool(2);
  absl::Notification a_started, b_started, a_done, b_done;
  ASSERT_TRUE(pool.Post([&] {
    a_started.Notify();
    b_started.WaitForNotification();
    a_done.Notify();
  }));
  ASSERT_TRUE(pool.Post([&] {
    b_started.Notify();
    a_started.WaitForNotification();
    b_done.Notify();
  }));
  a_done.WaitForNotification();
  b_done.WaitForNotification();
}

// With every thread busy, at most max_queued jobs wait; the rest are
// refused at once, and the queued ones still run.
TEST(BackgroundWorkerTest, RefusesPastItsQueueAndRunsWhatItQueued) {
  std::atomic<int> ran{0};
  {
    BackgroundWorker pool(1);
    absl::Notification started, release;
    ASSERT_TRUE(pool.Post([&] {
      started.Notify();
      release.WaitForNotification();
    }));
    started.WaitForNotification();
    EXPECT_TRUE(pool.Post([&] { ++ran; }, 2));
    EXPECT_TRUE(pool.Post([&] { ++ran; }, 2));
    EXPECT_FALSE(pool.Post([&] { ++ran; }, 2));
    release.Notify();
  }
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace headroom
