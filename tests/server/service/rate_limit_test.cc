// The fixed-window limits on a hand-stepped clock: learning probes per
// caller and in all, and log lines per kind with the count held back.

#include "server/service/rate_limit.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.pb.h"
#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

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

TEST(ProtobufLogTest, AFloodOfUndecodableMessagesWritesABoundedLog) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(4096);
  auto logger = std::make_shared<spdlog::logger>("protobuf_log_test", sink);
  const std::shared_ptr<spdlog::logger> before = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  RateLimitProtobufLogs();
  // A string field with invalid UTF-8: protobuf logs an ERROR per parse.
  const std::string bad("\x0a\x04\x0a\x02\xff\xfe", 6);
  int refused = 0;
  for (int i = 0; i < 1000; ++i) {
    v1::CheckFitRequest request;
    if (!request.ParseFromString(bad)) ++refused;
  }
  spdlog::set_default_logger(before);
  EXPECT_EQ(refused, 1000);
  const std::vector<std::string> lines = sink->last_formatted();
  int protobuf_lines = 0;
  for (const std::string& line : lines) {
    if (line.find("event=protobuf_log") != std::string::npos) ++protobuf_lines;
  }
  // At least one line says why; at most a few seconds' allowance of 10.
  EXPECT_GE(protobuf_lines, 1);
  EXPECT_LE(protobuf_lines, 100) << "1000 parses wrote " << protobuf_lines;
}

}  // namespace
}  // namespace headroom
