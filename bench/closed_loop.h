#ifndef HEADROOM_BENCH_CLOSED_LOOP_H_
#define HEADROOM_BENCH_CLOSED_LOOP_H_

// The load the gRPC benchmarks share: a closed loop of callback-API calls
// (Ping or CheckFit) over one or more stubs, bounded by time and by a call
// budget, with latency percentiles, rates and process CPU; and the
// loopback-only check for a target address.

#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"

namespace headroom::bench {

using Clock = std::chrono::steady_clock;

// Per-call deadline: a hung server makes a round end late, not hang.
constexpr auto kCallDeadline = std::chrono::seconds(5);

enum class Rpc { kPing, kCheckFit };

// OK when `target` names a loopback TCP address (127.0.0.0/8, ::1 or
// localhost, optionally with an ipv4:/ipv6:/dns: scheme); the load generator
// never sends load off the machine.
inline absl::Status CheckLoopback(const std::string& target) {
  std::string rest = target;
  for (const char* scheme : {"dns:///", "dns:", "ipv4:", "ipv6:"}) {
    if (absl::StartsWith(rest, scheme)) {
      rest = rest.substr(std::string(scheme).size());
      break;
    }
  }
  std::string host;
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find(']');
    if (close != std::string::npos) host = rest.substr(1, close - 1);
  } else {
    const size_t colon = rest.rfind(':');
    host = colon == std::string::npos ? rest : rest.substr(0, colon);
  }
  in_addr v4{};
  in6_addr v6{};
  const bool loopback = host == "localhost" ||
                        (inet_pton(AF_INET, host.c_str(), &v4) == 1 &&
                         (ntohl(v4.s_addr) >> 24) == 127) ||
                        (inet_pton(AF_INET6, host.c_str(), &v6) == 1 &&
                         IN6_IS_ADDR_LOOPBACK(&v6));
  if (!loopback) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--server=", target,
        " is not a loopback address; allowed 127.0.0.0/8, [::1] or "
        "localhost with a port, e.g. 127.0.0.1:50051"));
  }
  return absl::OkStatus();
}

// Process CPU time (user + system) in seconds and context switches
// (voluntary + involuntary): client and, in-process, server together.
struct ProcessUsage {
  double cpu_seconds = 0;
  int64_t context_switches = 0;
};

inline ProcessUsage GetProcessUsage() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return {seconds(usage.ru_utime) + seconds(usage.ru_stime),
          static_cast<int64_t>(usage.ru_nvcsw + usage.ru_nivcsw)};
}

// What one round (or several merged) measured.
struct Sample {
  int64_t calls = 0;
  int64_t errors = 0;  // non-OK status or a wrong CheckFit answer
  double seconds = 0;
  double cpu_seconds = 0;
  int64_t context_switches = 0;
  std::vector<float> latency_us;
  std::vector<double> round_qps;

  void Merge(Sample other) {
    calls += other.calls;
    errors += other.errors;
    seconds += other.seconds;
    cpu_seconds += other.cpu_seconds;
    context_switches += other.context_switches;
    latency_us.insert(latency_us.end(), other.latency_us.begin(),
                      other.latency_us.end());
    round_qps.push_back(other.calls / std::max(other.seconds, 1e-9));
  }
};

// A closed loop of `in_flight` callback-API calls spread over `stubs`: each
// completion records its latency and issues the next call until the round's
// deadline or call budget is spent. No thread blocks inside gRPC.
class ClosedLoop {
 public:
  // A CheckFit answer whose params differ from `expected_params` counts as
  // an error (0: any answer is right).
  ClosedLoop(Rpc rpc, const v1::CheckFitRequest* fit_request,
             std::vector<v1::Fit::Stub*> stubs, int in_flight,
             uint64_t expected_params)
      : rpc_(rpc),
        fit_request_(fit_request),
        stubs_(std::move(stubs)),
        in_flight_(in_flight),
        expected_params_(expected_params) {}

  ClosedLoop(const ClosedLoop&) = delete;
  ClosedLoop& operator=(const ClosedLoop&) = delete;

  // Runs one round; returns when every slot has stopped.
  Sample Run(double seconds, int64_t max_calls) {
    end_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(seconds));
    budget_.store(max_calls);
    errors_.store(0);
    absl::BlockingCounter stopped(in_flight_);
    stopped_ = &stopped;
    std::vector<std::unique_ptr<Slot>> slots;
    for (int i = 0; i < in_flight_; ++i) {
      slots.push_back(std::make_unique<Slot>(
          this, stubs_[static_cast<size_t>(i) % stubs_.size()]));
    }
    const ProcessUsage usage_start = GetProcessUsage();
    const Clock::time_point start = Clock::now();
    for (auto& slot : slots) slot->IssueOrStop();
    stopped.Wait();
    Sample sample;
    sample.seconds =
        std::chrono::duration<double>(Clock::now() - start).count();
    const ProcessUsage usage_end = GetProcessUsage();
    sample.cpu_seconds = usage_end.cpu_seconds - usage_start.cpu_seconds;
    sample.context_switches =
        usage_end.context_switches - usage_start.context_switches;
    sample.errors = errors_.load();
    for (auto& slot : slots) {
      sample.latency_us.insert(sample.latency_us.end(),
                               slot->latency_us.begin(),
                               slot->latency_us.end());
    }
    sample.calls = static_cast<int64_t>(sample.latency_us.size());
    return sample;
  }

 private:
  // One outstanding call at a time; touched only by its own completion chain.
  class Slot {
   public:
    Slot(ClosedLoop* loop, v1::Fit::Stub* stub) : loop_(loop), stub_(stub) {}

    void IssueOrStop() {
      if (Clock::now() >= loop_->end_ || loop_->budget_.fetch_sub(1) <= 0) {
        loop_->stopped_->DecrementCount();  // last touch of this slot
        return;
      }
      context_ = std::make_unique<grpc::ClientContext>();
      context_->set_deadline(std::chrono::system_clock::now() + kCallDeadline);
      sent_ = Clock::now();
      if (loop_->rpc_ == Rpc::kPing) {
        stub_->async()->Ping(context_.get(), &ping_request_, &ping_response_,
                             [this](grpc::Status status) { Done(status); });
      } else {
        stub_->async()->CheckFit(context_.get(), loop_->fit_request_,
                                 &fit_response_,
                                 [this](grpc::Status status) { Done(status); });
      }
    }

    std::vector<float> latency_us;

   private:
    void Done(const grpc::Status& status) {
      latency_us.push_back(static_cast<float>(
          std::chrono::duration<double, std::micro>(Clock::now() - sent_)
              .count()));
      if (!status.ok() ||
          (loop_->rpc_ == Rpc::kCheckFit && loop_->expected_params_ != 0 &&
           fit_response_.params() != loop_->expected_params_)) {
        loop_->errors_.fetch_add(1);
      }
      IssueOrStop();
    }

    ClosedLoop* loop_;
    v1::Fit::Stub* stub_;
    std::unique_ptr<grpc::ClientContext> context_;
    v1::PingRequest ping_request_;
    v1::PingResponse ping_response_;
    v1::CheckFitResponse fit_response_;
    Clock::time_point sent_;
  };

  const Rpc rpc_;
  const v1::CheckFitRequest* fit_request_;
  const std::vector<v1::Fit::Stub*> stubs_;
  const int in_flight_;
  const uint64_t expected_params_;
  Clock::time_point end_;
  std::atomic<int64_t> budget_{0};
  std::atomic<int64_t> errors_{0};
  absl::BlockingCounter* stopped_ = nullptr;
};

struct Summary {
  int64_t calls = 0;
  int64_t errors = 0;
  double qps = 0;
  double qps_min_round = 0;
  double qps_max_round = 0;
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  double cpu_us_per_call = 0;
  double context_switches_per_call = 0;
};

inline double Percentile(std::vector<float>& values, double q) {
  if (values.empty()) return 0;
  const size_t index = std::min(
      values.size() - 1, static_cast<size_t>(q * (values.size() - 1) + 0.5));
  std::nth_element(values.begin(), values.begin() + index, values.end());
  return values[index];
}

inline Summary Summarize(Sample sample) {
  Summary s;
  s.calls = sample.calls;
  s.errors = sample.errors;
  s.qps = sample.calls / std::max(sample.seconds, 1e-9);
  if (!sample.round_qps.empty()) {
    s.qps_min_round =
        *std::min_element(sample.round_qps.begin(), sample.round_qps.end());
    s.qps_max_round =
        *std::max_element(sample.round_qps.begin(), sample.round_qps.end());
  }
  double total_us = 0;
  for (float v : sample.latency_us) total_us += v;
  s.mean_us = sample.latency_us.empty() ? 0 : total_us / sample.calls;
  s.p50_us = Percentile(sample.latency_us, 0.50);
  s.p99_us = Percentile(sample.latency_us, 0.99);
  s.cpu_us_per_call =
      sample.calls == 0 ? 0 : sample.cpu_seconds * 1e6 / sample.calls;
  s.context_switches_per_call =
      sample.calls == 0
          ? 0
          : static_cast<double>(sample.context_switches) / sample.calls;
  return s;
}

}  // namespace headroom::bench

#endif  // HEADROOM_BENCH_CLOSED_LOOP_H_
