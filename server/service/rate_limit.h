#ifndef HEADROOM_SERVER_SERVICE_RATE_LIMIT_H_
#define HEADROOM_SERVER_SERVICE_RATE_LIMIT_H_

// Fixed-window counters for what a caller may make the planner do or write:
// learning probes per caller and in all (--auto_probe), and log lines per
// kind (refused worker messages, refused calls), so a flood of bad input
// costs a bounded number of probes and log lines. Both take the clock as a
// function, so tests step it by hand; both are thread-safe.

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace headroom {

// Milliseconds on some monotonic clock.
using NowMsFn = std::function<int64_t()>;
// std::chrono::steady_clock in milliseconds.
int64_t SteadyNowMs();

// At most `per_caller` takes per caller and `total` in all per window. The
// map of callers holds only callers that took something this window, so
// it never holds more than `total` entries.
class CallerRateLimit {
 public:
  struct Options {
    int per_caller = 6;
    int total = 30;
    int64_t window_ms = 60000;
  };
  CallerRateLimit(Options options, NowMsFn now_ms);
  CallerRateLimit(const CallerRateLimit&) = delete;
  CallerRateLimit& operator=(const CallerRateLimit&) = delete;

  // Takes one from `caller`'s allowance and the total. Empty when taken;
  // else why not, naming the limit ("rate limited: caller token:r had 6 of
  // 6 this minute"). A refused take counts against nothing.
  std::string Take(const std::string& caller);

 private:
  void Roll() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const NowMsFn now_ms_;
  absl::Mutex mu_;
  int64_t window_start_ms_ ABSL_GUARDED_BY(mu_);
  int taken_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, int> by_caller_ ABSL_GUARDED_BY(mu_);
};

// At most `lines` lines of each kind per second; the lines past it are
// counted, and the next line of that kind allowed says how many were held
// back. A kind is the caller's (an event, a reason, who); at most
// `max_kinds` are kept, those quiet for a second are forgotten when full,
// and any kind past them shares one allowance.
class LogLimiter {
 public:
  explicit LogLimiter(int lines, NowMsFn now_ms = SteadyNowMs,
                      size_t max_kinds = 64);
  LogLimiter(const LogLimiter&) = delete;
  LogLimiter& operator=(const LogLimiter&) = delete;

  // Whether a line of `kind` may be written now. When true, `suppressed`
  // receives how many lines of `kind` were held back since the last one
  // written (write "suppressed K similar" with it when K > 0).
  bool Admit(absl::string_view kind, int64_t* suppressed);

 private:
  struct Window {
    int64_t start_ms = 0;
    int written = 0;
    int64_t held_back = 0;
  };
  const int lines_;
  const NowMsFn now_ms_;
  const size_t max_kinds_;
  absl::Mutex mu_;
  std::map<std::string, Window, std::less<>> kinds_ ABSL_GUARDED_BY(mu_);
};

// Sends protobuf's own log lines (one `libprotobuf ERROR` per request with
// invalid UTF-8 in a string field, say) to spdlog as event=protobuf_log,
// at most 10 a second per level and source line, then one "suppressed K
// similar" line: a flood of undecodable requests writes a bounded log. The
// planner installs it once at start; a later call replaces nothing.
void RateLimitProtobufLogs();

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_RATE_LIMIT_H_
