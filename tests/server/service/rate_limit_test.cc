// The fixed-window limits on a hand-stepped clock: learning probes per
// caller and in all, and log lines per kind with the count held back.

#include "server/service/rate_limit.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

TEST(CallerRateLimitTest, EachCallerAndAllCallersHaveAnAllowancePerWindow) {
  int64_t now = 5000;
  CallerRateLimit limit({/*per_caller=*/2, /*total=*/3, /*window_ms=*/60000},
                        [&] { return now; });
  EXPECT_EQ(limit.Take("token:a"), "");
  EXPECT_EQ(limit.Take("token:a"), "");
  EXPECT_EQ(limit.Take("token:a"),
            "rate limited: token:a queued 2 of 2 learning probes allowed per "
            "60 s (--auto_probe_per_caller)");
  EXPECT_EQ(limit.Take("anonymous"), "");
  EXPECT_THAT(limit.Take("token:b"),
              HasSubstr("the planner queued 3 of 3 learning probes allowed "
                        "per 60 s (--auto_probe_total)"));
  // Refused takes count against nothing; the window ends a minute on.
  now += 59999;
  EXPECT_NE(limit.Take("token:b"), "");
  now += 1;
  EXPECT_EQ(limit.Take("token:a"), "");
  EXPECT_EQ(limit.Take("token:a"), "");
  EXPECT_EQ(limit.Take("token:b"), "");
  EXPECT_NE(limit.Take("token:c"), "");
}

TEST(LogLimiterTest, LinesPastTheAllowanceAreCountedAndReportedOnce) {
  int64_t now = 0;
  LogLimiter limiter(/*lines=*/3, [&] { return now; });
  int64_t suppressed = -1;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(limiter.Admit("rejected:not_leased", &suppressed)) << i;
    EXPECT_EQ(suppressed, 0);
  }
  // 100,000 more in the same second: none written.
  int written = 0;
  for (int i = 0; i < 100000; ++i) {
    written += limiter.Admit("rejected:not_leased", &suppressed) ? 1 : 0;
  }
  EXPECT_EQ(written, 0);
  // Another kind has its own allowance.
  EXPECT_TRUE(limiter.Admit("rejected:malformed", &suppressed));
  EXPECT_EQ(suppressed, 0);
  // The next second's first line carries the count, once.
  now += 1000;
  ASSERT_TRUE(limiter.Admit("rejected:not_leased", &suppressed));
  EXPECT_EQ(suppressed, 100000);
  ASSERT_TRUE(limiter.Admit("rejected:not_leased", &suppressed));
  EXPECT_EQ(suppressed, 0);
}

TEST(LogLimiterTest, KindsPastTheBoundShareOneAllowance) {
  int64_t now = 0;
  LogLimiter limiter(/*lines=*/1, [&] { return now; }, /*max_kinds=*/3);
  int64_t suppressed = 0;
  EXPECT_TRUE(limiter.Admit("a", &suppressed));
  EXPECT_TRUE(limiter.Admit("b", &suppressed));
  // "c" and "d" are both "(other)": one line between them.
  EXPECT_TRUE(limiter.Admit("c", &suppressed));
  EXPECT_FALSE(limiter.Admit("d", &suppressed));
  EXPECT_FALSE(limiter.Admit("e", &suppressed));
  // A second on, the quiet kinds are forgotten and a new one gets its own.
  now += 1000;
  EXPECT_TRUE(limiter.Admit("f", &suppressed));
  EXPECT_EQ(suppressed, 0);
  // The map is full again ("f", "(other)"): "g" shares "(other)", whose
  // first line this second says it held back "d" and "e".
  EXPECT_TRUE(limiter.Admit("g", &suppressed));
  EXPECT_EQ(suppressed, 2);
  EXPECT_FALSE(limiter.Admit("h", &suppressed));
}

}  // namespace
}  // namespace headroom
