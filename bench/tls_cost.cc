// headroom-tls-cost: what TLS costs a CheckFit on loopback, side by side.
//
// Starts two in-process planners on 127.0.0.1:0, one plaintext and one with
// TLS and bearer tokens (certificates and tokens from scripts/dev-certs.sh in
// a temporary directory), and alternates rounds between them:
//   - steady: one channel, one call outstanding, a catalog CheckFit
//     (bert-base, three batches, two GPUs); p50 / p99 µs per call;
//   - handshake: a fresh channel per call (TCP connect, and for TLS the
//     handshake), the first CheckFit on it; p50 / p99 µs per call.
// Every loop is bounded in calls and seconds. The ratios TLS / plaintext are
// measured in one run, so a noisy machine moves both sides alike.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/client_channel.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, rounds, 6, "rounds per planner per mode (1..100)");
ABSL_FLAG(int, calls_per_round, 400,
          "steady mode: calls per round (handshake: a quarter of it)");
ABSL_FLAG(double, max_seconds_per_round, 10, "a round also ends after this");

namespace headroom {
namespace {

struct Side {
  std::string name;
  std::unique_ptr<PlannerApp> app;
  ChannelSecurity security;
  std::string target;
  std::vector<double> steady_us;
  std::vector<double> handshake_us;
  int64_t errors = 0;
};

v1::CheckFitRequest Request() {
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("bert-base");
  for (int batch : {8, 64, 256}) request.add_batches(batch);
  request.add_targets()->set_gpu("L4");
  request.add_targets()->set_gpu("H100");
  return request;
}

std::shared_ptr<grpc::Channel> Open(const Side& side, int salt) {
  grpc::ChannelArguments args;
  // Distinct arguments and a local subchannel pool: a new TCP connection.
  args.SetInt("headroom.tls_cost.salt", salt);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return *OpenChannel(side.target, side.security, args);
}

bool Call(v1::Fit::Stub& stub, const v1::CheckFitRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  v1::CheckFitResponse response;
  return stub.CheckFit(&context, request, &response).ok() &&
         response.params() > 0;
}

double Micros(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(
      values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
  return values[index];
}

int Main() {
  const int rounds = std::clamp(absl::GetFlag(FLAGS_rounds), 1, 100);
  const int calls = std::clamp(absl::GetFlag(FLAGS_calls_per_round), 4, 100000);
  const auto limit = std::chrono::duration<double>(
      std::clamp(absl::GetFlag(FLAGS_max_seconds_per_round), 0.1, 120.0));
  spdlog::set_level(spdlog::level::warn);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  const std::string dir = std::filesystem::temp_directory_path() /
                          absl::StrCat("headroom-tls-cost-", getpid());
  const std::string make = absl::StrCat(
      HEADROOM_SOURCE_DIR, "/scripts/dev-certs.sh ", dir, " 2>/dev/null");
  if (std::system(make.c_str()) != 0) {
    std::fprintf(stderr, "headroom-tls-cost: %s failed\n", make.c_str());
    return 1;
  }
  std::ifstream token_file(dir + "/token-reader");
  std::string token;
  std::getline(token_file, token);

  Side plain;
  plain.name = "plaintext";
  Side tls;
  tls.name = "tls+token";
  for (Side* side : {&plain, &tls}) {
    PlannerConfig config;
    config.listen = "127.0.0.1:0";
    config.http_listen = "";
    config.db_path = ":memory:";
    config.models_dir = HEADROOM_SOURCE_DIR "/models";
    config.runs_path = HEADROOM_SOURCE_DIR "/data/memory-runs.jsonl";
    config.energy_curves_path = HEADROOM_SOURCE_DIR "/data/energy-curves.json";
    if (side == &tls) {
      config.tls_cert = dir + "/planner.pem";
      config.tls_key = dir + "/planner-key.pem";
      config.tokens_file = dir + "/tokens";
      side->security.tls_ca = dir + "/ca.pem";
      side->security.token = token;
    }
    auto app = PlannerApp::Start(config);
    if (!app.ok()) {
      std::fprintf(stderr, "headroom-tls-cost: %s\n",
                   app.status().ToString().c_str());
      return 1;
    }
    side->app = *std::move(app);
    // The certificate names localhost and 127.0.0.1.
    side->target = absl::StrCat("127.0.0.1:", side->app->grpc_port());
  }

  const v1::CheckFitRequest request = Request();
  int salt = 0;
  for (int round = 0; round < rounds; ++round) {
    // The side that goes first alternates.
    std::vector<Side*> order = {&plain, &tls};
    if (round % 2 == 1) std::swap(order[0], order[1]);
    for (Side* side : order) {
      auto stub = v1::Fit::NewStub(Open(*side, ++salt));
      if (!Call(*stub, request)) ++side->errors;  // connect, warm
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0;
           i < calls && std::chrono::steady_clock::now() - start < limit; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!Call(*stub, request)) ++side->errors;
        side->steady_us.push_back(
            Micros(std::chrono::steady_clock::now() - t0));
      }
    }
    for (Side* side : order) {
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0;
           i < calls / 4 && std::chrono::steady_clock::now() - start < limit;
           ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        auto stub = v1::Fit::NewStub(Open(*side, ++salt));
        if (!Call(*stub, request)) ++side->errors;
        side->handshake_us.push_back(
            Micros(std::chrono::steady_clock::now() - t0));
      }
    }
  }

  std::printf(
      "headroom-tls-cost: %d rounds, catalog CheckFit (bert-base, 3 "
      "batches, 2 GPUs), two in-process planners on loopback\n\n",
      rounds);
  std::printf("%-10s %-10s %8s %10s %10s %7s\n", "mode", "planner", "calls",
              "p50 us", "p99 us", "errors");
  for (const char* mode : {"steady", "handshake"}) {
    for (Side* side : {&plain, &tls}) {
      const auto& values =
          std::string(mode) == "steady" ? side->steady_us : side->handshake_us;
      std::printf("%-10s %-10s %8zu %10.1f %10.1f %7lld\n", mode,
                  side->name.c_str(), values.size(), Percentile(values, 0.5),
                  Percentile(values, 0.99),
                  static_cast<long long>(side->errors));
    }
    const auto& p =
        std::string(mode) == "steady" ? plain.steady_us : plain.handshake_us;
    const auto& t =
        std::string(mode) == "steady" ? tls.steady_us : tls.handshake_us;
    std::printf("%-10s %-10s %8s %9.2fx %9.2fx\n", mode, "tls/plain", "",
                Percentile(t, 0.5) / Percentile(p, 0.5),
                Percentile(t, 0.99) / Percentile(p, 0.99));
  }
  for (Side* side : {&plain, &tls}) {
    side->app->Shutdown(std::chrono::milliseconds(500));
  }
  std::filesystem::remove_all(dir);
  return plain.errors + tls.errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return headroom::Main();
}
