// headroom-loadgen: drives the real planner over loopback gRPC and compares
// CheckFit on an inline 7B decoder with Ping, the transport floor, in one
// run. Rounds of the two RPCs alternate so that both see the same machine.
//
// Two modes, each reported: latency (one request outstanding, the per-call
// floor) and throughput (many requests in flight over several channels).
// Every loop is bounded by a call count and by time; calls carry a deadline.

#include <arpa/inet.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "bench/closed_loop.h"
#include "bench/llama2_7b.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, server, "",
          "planner to load (host:port on loopback only); empty starts one "
          "in-process on 127.0.0.1:0");
ABSL_FLAG(bool, json, false, "print one JSON object instead of a table");
ABSL_FLAG(int, rounds, 6,
          "rounds per RPC per mode, Ping and CheckFit "
          "alternating (1..100)");
ABSL_FLAG(double, seconds_per_round, 2.0,
          "length of one round in seconds (0.05..60); the default run is "
          "2 modes x 2 RPCs x rounds x this");
ABSL_FLAG(int64_t, max_calls_per_round, 2000000,
          "a round also ends after this many calls");
ABSL_FLAG(int, channels, 2,
          "throughput mode: channels (TCP connections) to spread calls over");
ABSL_FLAG(int, in_flight, 16,
          "throughput mode: requests outstanding at once, over all channels");
ABSL_FLAG(std::string, rpcs, "both",
          "both (the comparison), or ping / check_fit alone, e.g. to profile "
          "one of them");
ABSL_FLAG(std::string, check_fit, "inline",
          "which CheckFit to compare with Ping: inline (the 7B spec sent in "
          "the request) or catalog (template bert-base by name, same setup, "
          "batches and targets)");
ABSL_FLAG(bool, mutex_deadlock_detection, true,
          "leave absl::Mutex deadlock detection as the library defaults "
          "(on in Debian's non-NDEBUG Abseil); false turns it off, as a "
          "planner main() could, to measure what it costs");
ABSL_FLAG(std::string, models_dir, HEADROOM_SOURCE_DIR "/models",
          "in-process planner: model catalog directory");
ABSL_FLAG(std::string, runs, HEADROOM_SOURCE_DIR "/data/memory-runs.jsonl",
          "in-process planner: calibration runs fitted on start");
ABSL_FLAG(std::string, energy_curves,
          HEADROOM_SOURCE_DIR "/data/energy-curves.json",
          "in-process planner: energy curves stored on start");

namespace headroom {
namespace {

using bench::CheckLoopback;
using bench::ClosedLoop;
using bench::kCallDeadline;
using bench::Rpc;
using bench::Sample;
using bench::Summarize;
using bench::Summary;

struct ModeResult {
  std::string mode;
  int channels = 0;
  int in_flight = 0;
  Summary ping;
  Summary check_fit;
};

// Warms both RPCs, then runs `rounds` rounds of each, alternating which goes
// first so neither always follows the other.
ModeResult RunMode(const std::string& mode,
                   const std::vector<v1::Fit::Stub*>& stubs, int in_flight,
                   const v1::CheckFitRequest& fit_request, bool run_ping,
                   bool run_check_fit, int rounds, double seconds_per_round,
                   int64_t max_calls, uint64_t expected_params) {
  ClosedLoop ping(Rpc::kPing, &fit_request, stubs, in_flight, expected_params);
  ClosedLoop check_fit(Rpc::kCheckFit, &fit_request, stubs, in_flight,
                       expected_params);
  const double warmup_seconds = std::min(0.25, seconds_per_round);
  if (run_ping) ping.Run(warmup_seconds, max_calls);
  if (run_check_fit) check_fit.Run(warmup_seconds, max_calls);
  Sample ping_total;
  Sample fit_total;
  for (int round = 0; round < rounds; ++round) {
    for (int turn = 0; turn < 2; ++turn) {
      if ((round + turn) % 2 == 0) {
        if (run_ping) ping_total.Merge(ping.Run(seconds_per_round, max_calls));
      } else if (run_check_fit) {
        fit_total.Merge(check_fit.Run(seconds_per_round, max_calls));
      }
    }
  }
  ModeResult result;
  result.mode = mode;
  result.channels = static_cast<int>(
      std::min<size_t>(stubs.size(), static_cast<size_t>(in_flight)));
  result.in_flight = in_flight;
  result.ping = Summarize(std::move(ping_total));
  result.check_fit = Summarize(std::move(fit_total));
  return result;
}

double Ratio(double a, double b) { return b == 0 ? 0 : a / b; }

std::string SummaryJson(const Summary& s) {
  return absl::StrFormat(
      "{\"calls\": %d, \"errors\": %d, \"qps\": %.1f, \"qps_min_round\": "
      "%.1f, \"qps_max_round\": %.1f, \"p50_us\": %.1f, \"p99_us\": %.1f, "
      "\"mean_us\": %.1f, \"cpu_us_per_call\": %.1f, "
      "\"context_switches_per_call\": %.2f}",
      s.calls, s.errors, s.qps, s.qps_min_round, s.qps_max_round, s.p50_us,
      s.p99_us, s.mean_us, s.cpu_us_per_call, s.context_switches_per_call);
}

std::string ModeJson(const ModeResult& m) {
  return absl::StrFormat(
      "\"%s\": {\"channels\": %d, \"in_flight\": %d, \"ping\": %s, "
      "\"check_fit\": %s, \"check_fit_over_ping\": {\"p50\": %.3f, \"p99\": "
      "%.3f, \"qps\": %.3f}}",
      m.mode, m.channels, m.in_flight, SummaryJson(m.ping),
      SummaryJson(m.check_fit), Ratio(m.check_fit.p50_us, m.ping.p50_us),
      Ratio(m.check_fit.p99_us, m.ping.p99_us),
      Ratio(m.check_fit.qps, m.ping.qps));
}

void PrintTable(const std::string& target, const std::string& model, int rounds,
                double seconds, const std::vector<ModeResult>& modes) {
  std::printf(
      "headroom-loadgen: %s; %d rounds x %.2f s per RPC per mode, "
      "alternating; CheckFit = %s, batches {1,8,32}, "
      "targets L4/H100/A100-80GB\n\n",
      target.c_str(), rounds, seconds, model.c_str());
  std::printf("%-10s %4s %4s %-9s %10s %6s %10s %14s %9s %9s %9s %8s %5s\n",
              "mode", "chan", "infl", "rpc", "calls", "errors", "QPS",
              "QPS rounds", "p50 us", "p99 us", "mean us", "cpu us", "csw");
  for (const ModeResult& m : modes) {
    for (const auto& [name, s] :
         {std::pair<const char*, const Summary&>{"Ping", m.ping},
          std::pair<const char*, const Summary&>{"CheckFit", m.check_fit}}) {
      std::printf(
          "%-10s %4d %4d %-9s %10lld %6lld %10.0f %6.0f..%-6.0f %9.1f %9.1f "
          "%9.1f %8.1f %5.2f\n",
          m.mode.c_str(), m.channels, m.in_flight, name,
          static_cast<long long>(s.calls), static_cast<long long>(s.errors),
          s.qps, s.qps_min_round, s.qps_max_round, s.p50_us, s.p99_us,
          s.mean_us, s.cpu_us_per_call, s.context_switches_per_call);
    }
    std::printf(
        "%-10s CheckFit/Ping: p50 x%.2f  p99 x%.2f  QPS x%.2f  cpu/call "
        "x%.2f\n\n",
        m.mode.c_str(), Ratio(m.check_fit.p50_us, m.ping.p50_us),
        Ratio(m.check_fit.p99_us, m.ping.p99_us),
        Ratio(m.check_fit.qps, m.ping.qps),
        Ratio(m.check_fit.cpu_us_per_call, m.ping.cpu_us_per_call));
  }
}

int Main() {
  const bool json = absl::GetFlag(FLAGS_json);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  const double seconds = absl::GetFlag(FLAGS_seconds_per_round);
  const int64_t max_calls = absl::GetFlag(FLAGS_max_calls_per_round);
  const int channels = absl::GetFlag(FLAGS_channels);
  const int in_flight = absl::GetFlag(FLAGS_in_flight);
  const std::string rpcs = absl::GetFlag(FLAGS_rpcs);
  const bool run_ping = rpcs == "both" || rpcs == "ping";
  const bool run_check_fit = rpcs == "both" || rpcs == "check_fit";
  const std::string which = absl::GetFlag(FLAGS_check_fit);
  if ((which != "inline" && which != "catalog") || rounds < 1 || rounds > 100 ||
      !(seconds >= 0.05 && seconds <= 60) || max_calls < 1 || channels < 1 ||
      channels > 64 || in_flight < 1 || in_flight > 4096 ||
      !(run_ping || run_check_fit)) {
    std::fprintf(stderr,
                 "headroom-loadgen: out of range; allowed --rounds 1..100, "
                 "--seconds_per_round 0.05..60, --max_calls_per_round >= 1, "
                 "--channels 1..64, --in_flight 1..4096, --rpcs "
                 "both|ping|check_fit, --check_fit inline|catalog\n");
    return 2;
  }
  spdlog::set_level(spdlog::level::warn);
  if (!absl::GetFlag(FLAGS_mutex_deadlock_detection)) {
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  }

  std::unique_ptr<PlannerApp> app;
  std::string target = absl::GetFlag(FLAGS_server);
  std::string described;
  if (target.empty()) {
    PlannerConfig config;
    config.listen = "127.0.0.1:0";
    config.http_listen = "";
    config.db_path = ":memory:";
    config.models_dir = absl::GetFlag(FLAGS_models_dir);
    config.runs_path = absl::GetFlag(FLAGS_runs);
    config.energy_curves_path = absl::GetFlag(FLAGS_energy_curves);
    auto started = PlannerApp::Start(config);
    if (!started.ok()) {
      std::fprintf(stderr, "headroom-loadgen: cannot start the planner: %s\n",
                   started.status().ToString().c_str());
      return 1;
    }
    app = std::move(*started);
    target = absl::StrCat("127.0.0.1:", app->grpc_port());
    described = absl::StrCat("in-process planner on ", target);
  } else {
    const absl::Status loopback = CheckLoopback(target);
    if (!loopback.ok()) {
      std::fprintf(stderr, "headroom-loadgen: %s\n",
                   std::string(loopback.message()).c_str());
      return 2;
    }
    described = absl::StrCat("planner at ", target);
  }

  // Distinct channel args give each channel its own TCP connection.
  std::vector<std::unique_ptr<v1::Fit::Stub>> owned;
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("headroom.loadgen.channel", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    owned.push_back(v1::Fit::NewStub(grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<v1::Fit::Stub*> stubs;
  for (auto& stub : owned) stubs.push_back(stub.get());

  // One checked call first: a wrong answer or a dead server ends the run.
  v1::CheckFitRequest request = bench::Llama2SevenBCheckFitRequest();
  if (which == "catalog") request.mutable_model()->set_template_("bert-base");
  // The catalog answer's parameter count is the one the first call reports.
  uint64_t expected_params = which == "inline" ? bench::kLlama2SevenBParams : 0;
  size_t response_bytes = 0;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kCallDeadline);
    v1::CheckFitResponse response;
    const grpc::Status status =
        stubs[0]->CheckFit(&context, request, &response);
    if (expected_params == 0 && status.ok())
      expected_params = response.params();
    response_bytes = response.ByteSizeLong();
    if (!status.ok() || response.params() != expected_params ||
        expected_params == 0) {
      std::fprintf(stderr,
                   "headroom-loadgen: CheckFit on %s failed (%s) or params "
                   "%llu != %llu\n",
                   target.c_str(), status.error_message().c_str(),
                   static_cast<unsigned long long>(response.params()),
                   static_cast<unsigned long long>(expected_params));
      return 1;
    }
  }

  std::vector<ModeResult> modes;
  modes.push_back(RunMode("latency", {stubs[0]}, 1, request, run_ping,
                          run_check_fit, rounds, seconds, max_calls,
                          expected_params));
  modes.push_back(RunMode("throughput", stubs, in_flight, request, run_ping,
                          run_check_fit, rounds, seconds, max_calls,
                          expected_params));

  int64_t errors = 0;
  for (const ModeResult& m : modes)
    errors += m.ping.errors + m.check_fit.errors;
  if (json) {
    std::vector<std::string> parts;
    for (const ModeResult& m : modes) parts.push_back(ModeJson(m));
    std::printf(
        "{\"target\": \"%s\", \"in_process\": %s, \"rounds\": %d, "
        "\"seconds_per_round\": %.3f, \"mutex_deadlock_detection\": %s, "
        "\"check_fit\": \"%s\", \"request_bytes\": %zu, "
        "\"response_bytes\": %zu, %s}\n",
        target.c_str(), app ? "true" : "false", rounds, seconds,
        absl::GetFlag(FLAGS_mutex_deadlock_detection) ? "true" : "false",
        which.c_str(), request.ByteSizeLong(), response_bytes,
        absl::StrJoin(parts, ", ").c_str());
  } else {
    PrintTable(described,
               which == "inline" ? "inline Llama-2-7B" : "catalog bert-base",
               rounds, seconds, modes);
  }
  if (app) app->Shutdown(std::chrono::milliseconds(1000));
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return headroom::Main();
}
