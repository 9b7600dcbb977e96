// headroom-http-health: /healthz latency with 0 and with N idle TCP
// connections open, on the HTTP port as it was and as it is, plain and TLS.
//
// "before" is cpp-httplib as the planner configured it until issue 32: a
// 4-thread pool, 10 s read timeout (each idle connection holds a thread
// until httplib's 5 s keep-alive wait ends). "after" is HttpServer: a thread
// per connection within BoundedHttpServer's limits. Each request opens a
// fresh connection (as a kubelet probe does), so TLS pays its handshake.
// Loops are bounded in requests, and a side stops a phase after 3 requests
// that time out (the client waits 2 s).

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "prometheus/registry.h"
#include "server/service/http_server.h"
#include "spdlog/spdlog.h"
#include "tests/support/loopback.h"

ABSL_FLAG(int, requests, 200, "requests per side and phase (1..100000)");
ABSL_FLAG(int, idle, 100, "idle connections in the second phase (0..1000)");

namespace headroom {
namespace {

struct Phase {
  std::vector<double> ms;
  int failed = 0;
};

struct Side {
  std::string name;
  bool tls = false;
  int port = 0;
  // Open connections the server holds now (after only; -1 unknown).
  std::function<long()> open = [] { return -1L; };
  Phase quiet;
  Phase crowded;
};

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(
      values.size() - 1, static_cast<size_t>(p * (values.size() - 1) + 0.5));
  return values[index];
}

Phase Measure(const Side& side, int requests) {
  Phase phase;
  for (int i = 0; i < requests && phase.failed < 3; ++i) {
    std::unique_ptr<httplib::ClientImpl> client;
    if (side.tls) {
      auto https = std::make_unique<httplib::SSLClient>("127.0.0.1", side.port);
      https->enable_server_certificate_verification(false);
      client = std::move(https);
    } else {
      client = std::make_unique<httplib::ClientImpl>("127.0.0.1", side.port);
    }
    client->set_connection_timeout(2, 0);
    client->set_read_timeout(2, 0);
    const auto start = std::chrono::steady_clock::now();
    auto answer = client->Get("/healthz");
    const double ms = std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count();
    if (answer && answer->status == 200) {
      phase.ms.push_back(ms);
    } else {
      ++phase.failed;
    }
  }
  return phase;
}

void Print(const std::string& name, int idle, const Phase& phase) {
  std::printf("| %s | %d | %zu | %d | %.2f | %.2f |\n", name.c_str(), idle,
              phase.ms.size(), phase.failed, Percentile(phase.ms, 0.5),
              Percentile(phase.ms, 0.99));
}

int Main() {
  const int requests = std::clamp(absl::GetFlag(FLAGS_requests), 1, 100000);
  const int idle = std::clamp(absl::GetFlag(FLAGS_idle), 0, 1000);
  spdlog::set_level(spdlog::level::warn);
  const std::string dir = std::filesystem::temp_directory_path() /
                          absl::StrCat("headroom-http-health-", getpid());
  const std::string make = absl::StrCat(
      HEADROOM_SOURCE_DIR, "/scripts/dev-certs.sh ", dir, " 2>/dev/null");
  if (std::system(make.c_str()) != 0) {
    std::fprintf(stderr, "headroom-http-health: %s failed\n", make.c_str());
    return 1;
  }
  const std::string cert = dir + "/planner.pem";
  const std::string key = dir + "/planner-key.pem";

  // Before: httplib as configured until issue 32.
  std::vector<std::unique_ptr<httplib::Server>> before;
  std::vector<std::thread> listeners;
  std::vector<Side> sides;
  for (bool tls : {false, true}) {
    std::unique_ptr<httplib::Server> server =
        tls ? std::make_unique<httplib::SSLServer>(cert.c_str(), key.c_str())
            : std::make_unique<httplib::Server>();
    server->new_task_queue = [] { return new httplib::ThreadPool(4); };
    server->set_read_timeout(10, 0);
    server->set_write_timeout(10, 0);
    server->Get("/healthz", [](const httplib::Request&, httplib::Response& r) {
      r.set_content("ok\n", "text/plain");
    });
    Side side;
    side.name = tls ? "before, TLS" : "before, plain";
    side.tls = tls;
    side.port = server->bind_to_any_port("127.0.0.1");
    listeners.emplace_back([raw = server.get()] { raw->listen_after_bind(); });
    before.push_back(std::move(server));
    sides.push_back(side);
  }
  // After: HttpServer.
  auto registry = std::make_shared<prometheus::Registry>();
  std::vector<std::unique_ptr<HttpServer>> after;
  for (bool tls : {false, true}) {
    HttpServer::Options options;
    if (tls) options.tls = {cert, key, ""};
    auto server = HttpServer::Start(
        "127.0.0.1:0", options, registry, [] { return true; },
        [](const HttpServer::Query&) { return std::string(); });
    if (!server.ok()) {
      std::fprintf(stderr, "headroom-http-health: %s\n",
                   server.status().ToString().c_str());
      return 1;
    }
    Side side;
    side.name = tls ? "after, TLS" : "after, plain";
    side.tls = tls;
    side.port = (*server)->port();
    side.open = [raw = server->get()] {
      return static_cast<long>(raw->connection_counts().open);
    };
    after.push_back(*std::move(server));
    sides.push_back(side);
  }
  // The listeners are up once a first request is answered.
  for (Side& side : sides) Measure(side, 1);

  for (Side& side : sides) {
    side.quiet = Measure(side, requests);
    std::vector<int> held;
    for (int i = 0; i < idle; ++i) {
      const int fd = testing::OpenLoopbackConnection(side.port);
      if (fd >= 0) held.push_back(fd);
    }
    // Let the server take them up (the old one into its pool).
    for (int i = 0; i < 200 && side.open() >= 0 && side.open() < idle; ++i) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (side.open() < 0) absl::SleepFor(absl::Milliseconds(200));
    side.crowded = Measure(side, requests);
    std::printf("%s: %zu idle connections held, %ld open at the end\n",
                side.name.c_str(), held.size(), side.open());
    for (int fd : held) close(fd);
  }

  std::printf(
      "\n| server | idle connections | answered | timed out (2 s) | p50 ms | "
      "p99 ms |\n|---|---|---|---|---|---|\n");
  for (const Side& side : sides) {
    Print(side.name, 0, side.quiet);
    Print(side.name, idle, side.crowded);
  }
  for (auto& server : before) server->stop();
  for (std::thread& listener : listeners) listener.join();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return headroom::Main();
}
