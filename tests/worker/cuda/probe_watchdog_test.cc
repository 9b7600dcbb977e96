#include "worker/cuda/probe_watchdog.h"

#include <chrono>
#include <thread>

#include "gtest/gtest.h"

namespace headroom {
namespace cuda {
namespace {

using Clock = std::chrono::steady_clock;

TEST(ProbeWatchdogTest, CancelledWatchEndsPromptly) {
  const Clock::time_point start = Clock::now();
  {
    ProbeWatchdog watchdog(std::chrono::minutes(10));
    watchdog.SetStage("gemm");
    EXPECT_EQ(watchdog.stage(), "gemm");
    EXPECT_TRUE(watchdog.ClaimOutput());
    EXPECT_FALSE(watchdog.ClaimOutput());
  }
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
}

TEST(ProbeWatchdogDeathTest, PastTheDeadlineItExitsWithCode2) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ProbeWatchdog watchdog(std::chrono::milliseconds(20));
        watchdog.SetStage("copy_h2d");
        // A hung GPU call, bounded so that a broken watchdog fails the test.
        std::this_thread::sleep_for(std::chrono::seconds(20));
      },
      ::testing::ExitedWithCode(2), "");
}

}  // namespace
}  // namespace cuda
}  // namespace headroom
