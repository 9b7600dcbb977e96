#include "server/service/rate_limit.h"

#include <chrono>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// "60 s" for a window in whole seconds, else "1500 ms".
std::string WindowText(int64_t window_ms) {
  if (window_ms % 1000 == 0) return absl::StrCat(window_ms / 1000, " s");
  return absl::StrCat(window_ms, " ms");
}

}  // namespace

int64_t SteadyNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

CallerRateLimit::CallerRateLimit(Options options, NowMsFn now_ms)
    : options_(options), now_ms_(std::move(now_ms)) {
  absl::MutexLock lock(&mu_);
  window_start_ms_ = now_ms_();
}

void CallerRateLimit::Roll() {
  const int64_t now = now_ms_();
  if (now - window_start_ms_ < options_.window_ms) return;
  window_start_ms_ = now;
  taken_ = 0;
  by_caller_.clear();
}

std::string CallerRateLimit::Take(const std::string& caller) {
  absl::MutexLock lock(&mu_);
  Roll();
  const std::string window = WindowText(options_.window_ms);
  if (taken_ >= options_.total) {
    return absl::StrCat("rate limited: the planner queued ", taken_, " of ",
                        options_.total, " learning probes allowed per ", window,
                        " (--auto_probe_total)");
  }
  auto it = by_caller_.find(caller);
  const int mine = it == by_caller_.end() ? 0 : it->second;
  if (mine >= options_.per_caller) {
    return absl::StrCat("rate limited: ", caller, " queued ", mine, " of ",
                        options_.per_caller, " learning probes allowed per ",
                        window, " (--auto_probe_per_caller)");
  }
  ++taken_;
  ++by_caller_[caller];
  return "";
}

LogLimiter::LogLimiter(int lines, NowMsFn now_ms, size_t max_kinds)
    : lines_(lines), now_ms_(std::move(now_ms)), max_kinds_(max_kinds) {}

bool LogLimiter::Admit(absl::string_view kind, int64_t* suppressed) {
  const int64_t now = now_ms_();
  absl::MutexLock lock(&mu_);
  auto it = kinds_.find(kind);
  if (it == kinds_.end() && kinds_.size() + 1 >= max_kinds_) {
    // Full: forget the kinds with nothing held back whose window is over
    // (they would start afresh anyway).
    for (auto stale = kinds_.begin(); stale != kinds_.end();) {
      if (stale->second.held_back == 0 &&
          now - stale->second.start_ms >= 1000) {
        stale = kinds_.erase(stale);
      } else {
        ++stale;
      }
    }
  }
  if (it == kinds_.end()) {
    // Past max_kinds_ - 1 kinds, the rest share one entry.
    const absl::string_view key =
        kinds_.size() + 1 < max_kinds_ ? kind : absl::string_view("(other)");
    bool inserted;
    std::tie(it, inserted) = kinds_.try_emplace(std::string(key));
    if (inserted) it->second.start_ms = now;
  }
  Window& window = it->second;
  if (now - window.start_ms >= 1000) {
    window.start_ms = now;
    window.written = 0;
  }
  if (window.written >= lines_) {
    ++window.held_back;
    return false;
  }
  ++window.written;
  *suppressed = window.held_back;
  window.held_back = 0;
  return true;
}

namespace {

void ProtobufLogLine(google::protobuf::LogLevel level, const char* filename,
                     int line, const std::string& message) {
  static LogLimiter* const limiter = new LogLimiter(10);
  int64_t suppressed = 0;
  const std::string source =
      absl::StrCat(filename == nullptr ? "?" : filename, ":", line);
  if (!limiter->Admit(absl::StrCat(static_cast<int>(level), " ", source),
                      &suppressed)) {
    return;
  }
  const spdlog::level::level_enum as =
      level >= google::protobuf::LOGLEVEL_ERROR     ? spdlog::level::err
      : level == google::protobuf::LOGLEVEL_WARNING ? spdlog::level::warn
                                                    : spdlog::level::info;
  if (suppressed > 0) {
    spdlog::log(as,
                "event=log_suppressed kind=protobuf_log source={} count={} "
                "message=\"suppressed {} similar\"",
                source, suppressed, suppressed);
  }
  spdlog::log(as, "event=protobuf_log source={} message=\"{}\"", source,
              message.substr(0, 512));
}

}  // namespace

void RateLimitProtobufLogs() {
  static const bool installed = [] {
    google::protobuf::SetLogHandler(&ProtobufLogLine);
    return true;
  }();
  (void)installed;
}

}  // namespace headroom
