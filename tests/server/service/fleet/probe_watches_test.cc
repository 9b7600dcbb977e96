// What a watcher is sent: the snapshot, then each result and each change
// of state or assignment once, however often the same snapshot comes.

#include "server/service/fleet/probe_watches.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

v1::Probe Running(int results) {
  v1::Probe probe;
  probe.set_id("p-1");
  probe.set_state(v1::Probe::RUNNING);
  probe.set_assignment_id("p-1.1");
  for (int i = 0; i < results; ++i) probe.add_results()->set_batch(8 << i);
  return probe;
}

TEST(ProbeWatchesTest, NothingIsNewBeforeTheSnapshot) {
  WatchCursor cursor;
  EXPECT_TRUE(NewEvents(Running(2), &cursor).empty());
  EXPECT_FALSE(cursor.synced);
}

TEST(ProbeWatchesTest, EachResultAndChangeIsSentOnce) {
  WatchCursor cursor;
  const v1::ProbeEvent snapshot = SnapshotEvent(Running(1), &cursor);
  EXPECT_EQ(snapshot.probe().results_size(), 1);
  EXPECT_TRUE(cursor.synced);
  // The same snapshot again: nothing new.
  EXPECT_TRUE(NewEvents(Running(1), &cursor).empty());

  std::vector<v1::ProbeEvent> events = NewEvents(Running(3), &cursor);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].result().batch(), 16u);
  EXPECT_EQ(events[1].result().batch(), 32u);
  EXPECT_TRUE(NewEvents(Running(3), &cursor).empty());
  // An older snapshot (one path behind another) sends nothing again.
  EXPECT_TRUE(NewEvents(Running(2), &cursor).empty());

  v1::Probe requeued = Running(3);
  requeued.set_state(v1::Probe::QUEUED);
  requeued.clear_assignment_id();
  events = NewEvents(requeued, &cursor);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].probe().state(), v1::Probe::QUEUED);

  v1::Probe again = Running(3);
  again.set_assignment_id("p-1.2");
  events = NewEvents(again, &cursor);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].probe().assignment_id(), "p-1.2");

  v1::Probe done = Running(4);
  done.set_assignment_id("p-1.2");
  done.set_state(v1::Probe::SUCCEEDED);
  events = NewEvents(done, &cursor);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].result().batch(), 64u);
  EXPECT_EQ(events[1].probe().state(), v1::Probe::SUCCEEDED);
}

TEST(ProbeWatchesTest, FinalStates) {
  EXPECT_TRUE(IsFinal(v1::Probe::SUCCEEDED));
  EXPECT_TRUE(IsFinal(v1::Probe::FAILED));
  EXPECT_TRUE(IsFinal(v1::Probe::CANCELLED));
  EXPECT_FALSE(IsFinal(v1::Probe::QUEUED));
  EXPECT_FALSE(IsFinal(v1::Probe::RUNNING));
}

}  // namespace
}  // namespace headroom
