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

// The snapshot read while the probe went on: what was read may predate the
// publish the watcher was not sent, so it is read again; the README's
// energy probe printed its result before its "running" line this way.
TEST(ProbeWatchesTest, SnapshotIsReadAgainAfterAPublishWhileRead) {
  SnapshotRead read;
  v1::Probe queued = Running(0);
  queued.set_state(v1::Probe::QUEUED);
  absl::StatusOr<v1::Probe> stored = queued;
  // Nothing published meanwhile: the read is sent.
  EXPECT_TRUE(SnapshotToSend(&read, &stored));

  PublishedWhileRead(Running(0), &read);
  EXPECT_FALSE(SnapshotToSend(&read, &stored));
  EXPECT_EQ(read.rereads, 1);
  // The second read, after that publish, is sent.
  stored = Running(1);
  EXPECT_TRUE(SnapshotToSend(&read, &stored));
  EXPECT_EQ(stored->results_size(), 1);
}

// A final probe published while the snapshot is read is the snapshot:
// nothing follows it, so a stale read would leave the watch open.
TEST(ProbeWatchesTest, FinalProbePublishedWhileReadIsTheSnapshot) {
  SnapshotRead read;
  v1::Probe done = Running(2);
  done.set_state(v1::Probe::SUCCEEDED);
  PublishedWhileRead(Running(1), &read);
  PublishedWhileRead(done, &read);
  absl::StatusOr<v1::Probe> stored = Running(0);
  EXPECT_TRUE(SnapshotToSend(&read, &stored));
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), v1::Probe::SUCCEEDED);
  EXPECT_EQ(stored->results_size(), 2);
  EXPECT_EQ(read.rereads, 0);
}

// Reads again at most kSnapshotRereads times; a store error is sent as it.
TEST(ProbeWatchesTest, SnapshotRereadsAreBounded) {
  SnapshotRead read;
  absl::StatusOr<v1::Probe> stored = Running(0);
  int reads = 1;
  for (; reads <= 2 * kSnapshotRereads; ++reads) {
    PublishedWhileRead(Running(reads), &read);
    if (SnapshotToSend(&read, &stored)) break;
  }
  EXPECT_EQ(reads, kSnapshotRereads + 1);

  SnapshotRead failed;
  PublishedWhileRead(Running(1), &failed);
  absl::StatusOr<v1::Probe> error = absl::UnavailableError("store down");
  EXPECT_TRUE(SnapshotToSend(&failed, &error));
  EXPECT_FALSE(error.ok());
}

}  // namespace
}  // namespace headroom
