// The WatchProbe calls without a server (calls not bound to a gRPC call;
// what they are sent waits in the reactor): which calls follow a probe, so
// the replica sync reads it back, and which end at once.

#include "server/service/fleet/watch_calls.h"

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/service/fleet/fleet_test_store.h"

namespace headroom {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class ProbeWatchersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = file_.Open();
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    executor_ = std::make_unique<BackgroundWorker>();
    watchers_ =
        std::make_unique<ProbeWatchers>(store_.get(), executor_.get(), 16);
  }
  // The snapshot reads finish before the watchers go.
  void TearDown() override { executor_.reset(); }

  TempStoreFile file_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ProbeWatchers> watchers_;
  std::unique_ptr<BackgroundWorker> executor_;
};

TEST_F(ProbeWatchersTest, OnlyAllowedFollowingCallsOfAGoodIdFollow) {
  watchers_->Watch("p-1", /*follow=*/true, absl::OkStatus());
  watchers_->Watch("p-1", /*follow=*/true, absl::OkStatus());
  watchers_->Watch("p-2", /*follow=*/false, absl::OkStatus());
  watchers_->Watch("p-3", /*follow=*/true,
                   absl::PermissionDeniedError("no token"));
  watchers_->Watch("p 4!", /*follow=*/true, absl::OkStatus());
  // Each followed probe once, for the replica sync.
  EXPECT_THAT(watchers_->Watched(), ElementsAre("p-1"));
}

TEST_F(ProbeWatchersTest, AfterCloseNoCallFollows) {
  watchers_->Close();
  watchers_->Watch("p-1", /*follow=*/true, absl::OkStatus());
  EXPECT_THAT(watchers_->Watched(), IsEmpty());
  // Publishing to no one is harmless.
  v1::Probe probe;
  probe.set_id("p-1");
  watchers_->PublishProbe(probe);
}

}  // namespace
}  // namespace headroom
