// headroom-replicas: planner replicas over one PostgreSQL store, measured
// side by side in one run (issue 9, item 5):
//   throughput  CheckFit closed-loop load on one replica vs the same load
//               spread over two, rounds alternating;
//   refit       CheckFit latency on both replicas in rounds where refits
//               run back to back on one of them vs rounds without;
//   promote     time from PromoteFactorSet answered by one replica to the
//               other answering CheckFit with that version.
// The replicas are the real headroom-planner binary on loopback, each its
// own process; the database is a fresh one on the server named by --pg_url
// (or HEADROOM_TEST_PG_URL), dropped at the end. Every loop is bounded in
// count and time.

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/closed_loop.h"
#include "bench/llama2_7b.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
#include "tests/support/postgres.h"

ABSL_FLAG(std::string, pg_url, "",
          "PostgreSQL server (postgresql://user@127.0.0.1:port/db) to create "
          "the benchmark's database on; empty takes HEADROOM_TEST_PG_URL");
ABSL_FLAG(int, rounds, 4, "rounds per arm (1..50)");
ABSL_FLAG(double, seconds_per_round, 3.0, "seconds per round (0.5..60)");
ABSL_FLAG(int, in_flight, 16, "CheckFit calls outstanding at once (1..256)");
ABSL_FLAG(int, promotes, 20, "promotions timed (1..200)");
ABSL_FLAG(int64_t, store_poll_ms, 1000,
          "the replicas' --store_poll_ms (how often they follow the store)");
ABSL_FLAG(std::string, planner_bin, HEADROOM_PLANNER_BIN, "planner binary");

namespace headroom {
namespace {

using bench::ClosedLoop;
using bench::Rpc;
using bench::Sample;
using bench::Summarize;
using bench::Summary;
using testing::Child;

const std::string kRoot = HEADROOM_SOURCE_DIR;

std::chrono::system_clock::time_point In(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

struct Replica {
  std::string address;
  std::unique_ptr<Child> process;
  std::vector<std::unique_ptr<v1::Fit::Stub>> stubs;   // one per channel
  std::unique_ptr<v1::Calibration::Stub> calibration;  // on the first channel

  v1::Fit::Stub* stub() { return stubs.front().get(); }
  bool Answers() {
    grpc::ClientContext context;
    context.set_deadline(In(1));
    v1::PingResponse pong;
    return stub()->Ping(&context, {}, &pong).ok();
  }
};

std::unique_ptr<Replica> StartReplica(const std::string& db) {
  auto replica = std::make_unique<Replica>();
  replica->address = "127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  replica->process = std::make_unique<Child>(std::vector<std::string>{
      absl::GetFlag(FLAGS_planner_bin), "--listen=" + replica->address,
      "--http_listen=", "--models_dir=" + kRoot + "/models",
      "--runs=" + kRoot + "/data/memory-runs.jsonl",
      "--energy_curves=" + kRoot + "/data/energy-curves.json", "--db=" + db,
      "--store_poll_ms=" + std::to_string(absl::GetFlag(FLAGS_store_poll_ms)),
      "--log_level=warn"});
  for (int i = 0; i < 2; ++i) {
    grpc::ChannelArguments args;
    args.SetInt("headroom.replicas.channel", i);
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto channel = grpc::CreateCustomChannel(
        replica->address, grpc::InsecureChannelCredentials(), args);
    if (i == 0) replica->calibration = v1::Calibration::NewStub(channel);
    replica->stubs.push_back(v1::Fit::NewStub(channel));
  }
  for (int i = 0; i < 600 && !replica->Answers(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return replica;
}

std::string Line(const char* arm, const Summary& s) {
  return absl::StrFormat("  %-28s %10.0f %10.0f %10.0f %8d %7d\n", arm, s.qps,
                         s.p50_us, s.p99_us, static_cast<int>(s.calls),
                         static_cast<int>(s.errors));
}

int Main() {
  std::string server = absl::GetFlag(FLAGS_pg_url);
  if (server.empty()) server = testing::PostgresServerUrl();
  if (server.empty()) {
    std::fprintf(stderr,
                 "headroom-replicas: no PostgreSQL: pass --pg_url or set "
                 "HEADROOM_TEST_PG_URL (scripts/test-postgres.sh start)\n");
    return 2;
  }
  const int rounds = std::clamp(absl::GetFlag(FLAGS_rounds), 1, 50);
  const double seconds =
      std::clamp(absl::GetFlag(FLAGS_seconds_per_round), 0.5, 60.0);
  const int in_flight = std::clamp(absl::GetFlag(FLAGS_in_flight), 1, 256);
  const int promotes = std::clamp(absl::GetFlag(FLAGS_promotes), 1, 200);

  auto database = testing::TemporaryPostgresDatabase::Create(server);
  if (!database.ok()) {
    std::fprintf(stderr, "headroom-replicas: %s\n",
                 database.status().ToString().c_str());
    return 2;
  }
  // The first replica creates the schema and the first factor set.
  std::unique_ptr<Replica> a = StartReplica((*database)->url());
  std::unique_ptr<Replica> b = StartReplica((*database)->url());
  if (!a->Answers() || !b->Answers()) {
    std::fprintf(stderr, "headroom-replicas: a replica did not start\n");
    return 1;
  }

  const v1::CheckFitRequest request = bench::Llama2SevenBCheckFitRequest();
  std::vector<v1::Fit::Stub*> one = {a->stubs[0].get(), a->stubs[1].get()};
  std::vector<v1::Fit::Stub*> two = {a->stubs[0].get(), b->stubs[0].get(),
                                     a->stubs[1].get(), b->stubs[1].get()};
  ClosedLoop on_one(Rpc::kCheckFit, &request, one, in_flight,
                    bench::kLlama2SevenBParams);
  ClosedLoop on_two(Rpc::kCheckFit, &request, two, in_flight,
                    bench::kLlama2SevenBParams);
  const int64_t max_calls = 5000000;
  on_one.Run(0.5, max_calls);
  on_two.Run(0.5, max_calls);

  // 1. Throughput, one replica vs two, rounds alternating.
  Sample one_total, two_total;
  for (int round = 0; round < rounds; ++round) {
    if (round % 2 == 0) {
      one_total.Merge(on_one.Run(seconds, max_calls));
      two_total.Merge(on_two.Run(seconds, max_calls));
    } else {
      two_total.Merge(on_two.Run(seconds, max_calls));
      one_total.Merge(on_one.Run(seconds, max_calls));
    }
  }

  // 2. Latency while refits run on replica a back to back for the whole
  // round (forced, so each is promoted and both replicas install it), in
  // rounds alternating with quiet ones.
  Sample quiet_total, refit_total;
  std::vector<double> refit_seconds;
  for (int round = 0; round < rounds; ++round) {
    quiet_total.Merge(on_two.Run(seconds, max_calls));
    std::atomic<bool> round_over{false};
    std::thread refits([&] {
      for (int i = 0; i < 10000 && !round_over.load(); ++i) {
        grpc::ClientContext context;
        context.set_deadline(In(120));
        v1::RefitRequest refit_request;
        refit_request.set_force(true);
        v1::RefitResponse response;
        const auto start = std::chrono::steady_clock::now();
        if (!a->calibration->Refit(&context, refit_request, &response).ok())
          break;
        refit_seconds.push_back(std::chrono::duration<double>(
                                    std::chrono::steady_clock::now() - start)
                                    .count());
      }
    });
    refit_total.Merge(on_two.Run(seconds, max_calls));
    round_over.store(true);
    refits.join();
  }

  // 3. Promote on a, time until b answers with that version.
  grpc::ClientContext list_context;
  list_context.set_deadline(In(10));
  v1::ListFactorSetsResponse sets;
  if (!a->calibration->ListFactorSets(&list_context, {}, &sets).ok() ||
      sets.factor_sets_size() < 2) {
    std::fprintf(stderr, "headroom-replicas: fewer than 2 factor sets\n");
    return 1;
  }
  std::vector<double> promote_ms;
  std::mt19937 random(20261130);
  for (int i = 0; i < promotes; ++i) {
    // A random wait first, so promotions land anywhere in b's poll period.
    std::this_thread::sleep_for(std::chrono::milliseconds(
        random() % std::max<int64_t>(1, absl::GetFlag(FLAGS_store_poll_ms))));
    const std::string target =
        sets.factor_sets(i % sets.factor_sets_size()).version();
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::PromoteFactorSetRequest promote;
    promote.set_version(target);
    v1::PromoteFactorSetResponse promoted;
    if (!a->calibration->PromoteFactorSet(&context, promote, &promoted).ok()) {
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto give_up = start + std::chrono::seconds(30);
    for (int poll = 0; poll < 100000; ++poll) {
      grpc::ClientContext fit_context;
      fit_context.set_deadline(In(5));
      v1::CheckFitResponse answer;
      if (b->stub()->CheckFit(&fit_context, request, &answer).ok() &&
          answer.factor_set_version() == target) {
        promote_ms.push_back(std::chrono::duration<double, std::milli>(
                                 std::chrono::steady_clock::now() - start)
                                 .count());
        break;
      }
      if (std::chrono::steady_clock::now() > give_up) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  const Summary s_one = Summarize(std::move(one_total));
  const Summary s_two = Summarize(std::move(two_total));
  const Summary s_quiet = Summarize(std::move(quiet_total));
  const Summary s_refit = Summarize(std::move(refit_total));
  std::sort(promote_ms.begin(), promote_ms.end());
  std::sort(refit_seconds.begin(), refit_seconds.end());
  auto at = [](const std::vector<double>& v, double q) {
    return v.empty()
               ? 0.0
               : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
  };

  std::printf(
      "headroom-replicas: planners over one PostgreSQL, CheckFit of an inline "
      "7B decoder, %d in flight, %d rounds x %.1f s per arm, "
      "--store_poll_ms=%lld, %u CPUs\n",
      in_flight, rounds, seconds,
      static_cast<long long>(absl::GetFlag(FLAGS_store_poll_ms)),
      std::thread::hardware_concurrency());
  std::printf("  %-28s %10s %10s %10s %8s %7s\n", "arm", "calls/s", "p50 us",
              "p99 us", "calls", "errors");
  std::printf("%s", Line("one replica", s_one).c_str());
  std::printf("%s", Line("two replicas", s_two).c_str());
  std::printf("%s", Line("two, no refit", s_quiet).c_str());
  std::printf("%s", Line("two, refit running on one", s_refit).c_str());
  std::printf("  throughput two/one: %.2f; p99 with refit / without: %.2f\n",
              s_one.qps == 0 ? 0 : s_two.qps / s_one.qps,
              s_quiet.p99_us == 0 ? 0 : s_refit.p99_us / s_quiet.p99_us);
  std::printf(
      "  refits during the refit rounds: %zu back to back, median %.3f s "
      "each\n",
      refit_seconds.size(), at(refit_seconds, 0.5));
  std::printf(
      "  promote on a -> b answers with it: %zu of %d, median %.0f ms, "
      "p90 %.0f ms, max %.0f ms\n",
      promote_ms.size(), promotes, at(promote_ms, 0.5), at(promote_ms, 0.9),
      promote_ms.empty() ? 0.0 : promote_ms.back());
  const bool ok = s_one.errors == 0 && s_two.errors == 0 &&
                  s_refit.errors == 0 &&
                  static_cast<int>(promote_ms.size()) == promotes;
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return headroom::Main();
}
