// A worker stream's messages: handled in order, one at a time, on threads
// shared with other streams, and a job may free the queue's owner.

#include "server/service/serial_queue.h"

#include <atomic>
#include <memory>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

// On four threads, the jobs of one queue still run in the order added and
// never two at once.
TEST(SerialQueueTest, RunsJobsInOrderOneAtATime) {
  BackgroundWorker pool(4);
  auto queue = std::make_shared<SerialQueue>(&pool);
  absl::Mutex mu;
  std::vector<int> order;
  std::atomic<int> running{0};
  std::atomic<bool> overlapped{false};
  absl::Notification done;
  constexpr int kJobs = 1000;
  for (int i = 0; i < kJobs; ++i) {
    queue->Add([&, i] {
      if (running.fetch_add(1) != 0) overlapped = true;
      {
        absl::MutexLock lock(&mu);
        order.push_back(i);
      }
      running.fetch_sub(1);
      if (i == kJobs - 1) done.Notify();
    });
  }
  done.WaitForNotification();
  EXPECT_FALSE(overlapped.load());
  absl::MutexLock lock(&mu);
  ASSERT_EQ(order.size(), static_cast<size_t>(kJobs));
  for (int i = 0; i < kJobs; ++i) EXPECT_EQ(order[i], i);
}

// Two queues on one thread both progress: a long backlog of one does not
// keep the other's jobs waiting until it is empty.
TEST(SerialQueueTest, QueuesShareTheThreadsInTurns) {
  BackgroundWorker pool(1);
  auto busy = std::make_shared<SerialQueue>(&pool);
  auto other = std::make_shared<SerialQueue>(&pool);
  absl::Notification hold, held;
  std::atomic<int> busy_ran{0};
  busy->Add([&] {
    held.Notify();
    hold.WaitForNotification();
  });
  held.WaitForNotification();
  for (int i = 0; i < 100; ++i) busy->Add([&] { ++busy_ran; });
  std::atomic<int> busy_when_other_ran{-1};
  absl::Notification other_ran;
  other->Add([&] {
    busy_when_other_ran = busy_ran.load();
    other_ran.Notify();
  });
  hold.Notify();
  other_ran.WaitForNotification();
  EXPECT_LT(busy_when_other_ran.load(), 100);
}

// pending() counts what waits and what runs.
TEST(SerialQueueTest, PendingCountsWaitingAndRunningJobs) {
  BackgroundWorker pool(1);
  auto queue = std::make_shared<SerialQueue>(&pool);
  absl::Notification started, release, last;
  queue->Add([&] {
    started.Notify();
    release.WaitForNotification();
  });
  started.WaitForNotification();
  queue->Add([] {});
  queue->Add([&] { last.Notify(); });
  EXPECT_EQ(queue->pending(), 3u);
  release.Notify();
  last.WaitForNotification();
}

// The last job may free the object that owns the queue (a stream's OnDone).
TEST(SerialQueueTest, AJobMayFreeTheQueuesOwner) {
  struct Owner {
    std::shared_ptr<SerialQueue> queue;
  };
  BackgroundWorker pool(2);
  absl::Notification freed;
  auto* owner = new Owner{std::make_shared<SerialQueue>(&pool)};
  bool first_ran = false;
  bool first_ran_before_free = false;
  owner->queue->Add([&first_ran] { first_ran = true; });
  owner->queue->Add([owner, &freed, &first_ran, &first_ran_before_free] {
    first_ran_before_free = first_ran;
    delete owner;
    freed.Notify();
  });
  freed.WaitForNotification();
  EXPECT_TRUE(first_ran_before_free);
}

// Jobs added while the worker is stopping still run, in order.
TEST(SerialQueueTest, RunsJobsAddedWhileTheWorkerStops) {
  std::vector<int> order;
  std::shared_ptr<SerialQueue> queue;
  {
    BackgroundWorker pool(1);
    queue = std::make_shared<SerialQueue>(&pool);
    absl::Notification started, release;
    queue->Add([&] {
      started.Notify();
      release.WaitForNotification();
    });
    started.WaitForNotification();
    for (int i = 0; i < 40; ++i)
      queue->Add([&order, i] { order.push_back(i); });
    release.Notify();
  }
  ASSERT_EQ(order.size(), 40u);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(order[i], i);
}

}  // namespace
}  // namespace headroom
