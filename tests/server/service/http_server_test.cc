// The HTTP port against idle, trickling and crowding clients (the issue: four
// idle TCP connections stalled /healthz, /metrics and the extender for 10 s
// each), and its routes against callers without what reads need (the issue:
// /calibration, /energy and the extender's verdicts answered anyone).

#include "server/service/http_server.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/support/loopback.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using testing::HttpBody;
using testing::HttpGet;
using testing::HttpRaw;
using testing::OpenLoopbackConnection;
using ::testing::StartsWith;

// SHA-256 of the token "admin".
constexpr char kAdminHash[] =
    "8c6976e5b5410415bde908bd4dee15dfb167a9c873fc4bb8a81f6f2ab448a918";

// Polls `condition` for up to 20 s.
bool WaitFor(const std::function<bool()>& condition) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

// Whether the server closed `fd`: a read sees the end (after any answer)
// within 5 s.
bool ClosedByServer(int fd) {
  char buffer[4096];
  for (int i = 0; i < 1000; ++i) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n == 0) return true;
    if (n < 0) return false;  // the 5 s receive timeout
  }
  return false;
}

std::string Get(int port, const std::string& path, const std::string& token) {
  return HttpRaw(
      port, "GET " + path +
                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                "close\r\n" +
                (token.empty() ? std::string()
                               : "Authorization: Bearer " + token + "\r\n") +
                "\r\n");
}

std::string Post(int port, const std::string& path, const std::string& token) {
  return HttpRaw(
      port, "POST " + path +
                " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                "close\r\nContent-Type: application/json\r\n" +
                (token.empty() ? std::string()
                               : "Authorization: Bearer " + token + "\r\n") +
                "Content-Length: 2\r\n\r\n{}");
}

class HttpServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<HttpServer> Start(HttpServer::Options options) {
    auto server = HttpServer::Start(
        "127.0.0.1:0", std::move(options), registry_, [] { return true; },
        [](const HttpServer::Query&) {
          return std::string("<html>calibration</html>");
        });
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    (*server)->HandlePage(
        "/energy",
        [](const HttpServer::Query& query) -> absl::StatusOr<std::string> {
          if (query.count("arch") != 0 && query.at("arch") != "ampere") {
            return absl::InvalidArgumentError("arch = 'foo' <unknown>");
          }
          return std::string("<html>energy</html>");
        });
    (*server)->HandlePost("/scheduler/filter", [](const std::string&) {
      return HttpServer::Answer{200, "{\"NodeNames\":[]}"};
    });
    return *std::move(server);
  }

  std::shared_ptr<prometheus::Registry> registry_ =
      std::make_shared<prometheus::Registry>();
};

TEST_F(HttpServerTest, HealthzAnswersWithAHundredIdleConnectionsOpen) {
  HttpServer::Options options;
  options.limits.idle_timeout = absl::Seconds(60);  // open all through
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  std::vector<int> idle;
  for (int i = 0; i < 100; ++i) {
    const int fd = OpenLoopbackConnection(server->port());
    ASSERT_GE(fd, 0);
    idle.push_back(fd);
  }
  ASSERT_TRUE(WaitFor([&] { return server->connection_counts().open == 100; }));

  const std::string health = HttpGet(server->port(), "/healthz");
  EXPECT_THAT(health, StartsWith("HTTP/1.1 200"));
  EXPECT_EQ(HttpBody(health), "ok\n");
  const std::string metrics = HttpGet(server->port(), "/metrics");
  EXPECT_THAT(metrics, StartsWith("HTTP/1.1 200"));
  EXPECT_EQ(server->connection_counts().evicted, 0u);
  EXPECT_EQ(server->connection_counts().refused, 0u);

  // The idle ones were open all along, and each is still served.
  const std::string request =
      "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(send(idle[0], request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  char answer[256] = {};
  ASSERT_GT(recv(idle[0], answer, sizeof(answer) - 1, 0), 0);
  EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
  for (int fd : idle) close(fd);
}

TEST_F(HttpServerTest, PastTheLimitANewConnectionClosesAnIdleOne) {
  HttpServer::Options options;
  options.limits.max_connections = 8;
  options.limits.idle_timeout = absl::Seconds(60);
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  std::vector<pollfd> idle;
  for (int i = 0; i < 8; ++i) {
    const int fd = OpenLoopbackConnection(server->port());
    ASSERT_GE(fd, 0);
    idle.push_back({fd, POLLIN, 0});
  }
  ASSERT_TRUE(WaitFor([&] { return server->connection_counts().open == 8; }));

  EXPECT_THAT(HttpGet(server->port(), "/healthz"), StartsWith("HTTP/1.1 200"));
  EXPECT_EQ(server->connection_counts().evicted, 1u);
  // Exactly one idle connection was closed to make room.
  ASSERT_EQ(poll(idle.data(), idle.size(), 5000), 1);
  for (const pollfd& entry : idle) {
    if (entry.revents != 0) {
      EXPECT_TRUE(ClosedByServer(entry.fd));
    }
  }
  for (const pollfd& entry : idle) close(entry.fd);
}

TEST_F(HttpServerTest, ATricklingRequestIsCutAtItsDeadline) {
  HttpServer::Options options;
  options.limits.request_timeout = absl::Milliseconds(200);
  options.limits.idle_timeout = absl::Seconds(60);
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  const int fd = OpenLoopbackConnection(server->port());
  ASSERT_GE(fd, 0);
  const std::string start = "GET /healthz HTTP/1.1\r\nX-Slow: ";
  ASSERT_EQ(send(fd, start.data(), start.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(start.size()));
  // One byte every 25 ms, 400 at most (10 s), until the server ends it.
  int sent = 0;
  bool ended = false;
  for (; sent < 400 && !ended; ++sent) {
    pollfd entry{fd, POLLIN, 0};
    if (poll(&entry, 1, 25) > 0) {
      ended = true;
      break;
    }
    if (send(fd, "a", 1, MSG_NOSIGNAL) != 1) ended = true;
  }
  EXPECT_TRUE(ended);
  EXPECT_LT(sent, 400);
  // It answers 400 or nothing, then closes.
  char buffer[512] = {};
  const ssize_t n = recv(fd, buffer, sizeof(buffer) - 1, 0);
  if (n > 0) {
    EXPECT_THAT(buffer, StartsWith("HTTP/1.1 4"));
    EXPECT_TRUE(ClosedByServer(fd));
  }
  close(fd);
  EXPECT_TRUE(WaitFor([&] { return server->connection_counts().open == 0; }));
}

TEST_F(HttpServerTest, WhenEverySlotIsAnsweringANewConnectionIsClosedAtOnce) {
  HttpServer::Options options;
  options.limits.max_connections = 2;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  absl::Mutex mu;
  int entered = 0;
  absl::Notification release;
  server->HandlePost("/wait", [&](const std::string&) {
    {
      absl::MutexLock lock(&mu);
      ++entered;
    }
    release.WaitForNotificationWithTimeout(absl::Seconds(30));
    return HttpServer::Answer{200, "{}"};
  });
  std::string answers[2];
  std::thread callers[2];
  for (int i = 0; i < 2; ++i) {
    callers[i] = std::thread([&, i] {
      answers[i] = testing::HttpPost(server->port(), "/wait", "{}");
    });
  }
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(
        mu.AwaitWithTimeout(absl::Condition(
                                +[](int* n) { return *n == 2; }, &entered),
                            absl::Seconds(20)));
  }
  const int third = OpenLoopbackConnection(server->port());
  ASSERT_GE(third, 0);
  EXPECT_TRUE(ClosedByServer(third));
  close(third);
  EXPECT_EQ(server->connection_counts().refused, 1u);
  release.Notify();
  for (std::thread& caller : callers) caller.join();
  for (const std::string& answer : answers) {
    EXPECT_THAT(answer, StartsWith("HTTP/1.1 200"));
  }
}

// A planner whose reads need a token: every route but /healthz refuses a
// caller without one, before reading a body.
TEST_F(HttpServerTest, ReadsNeedATokenWhereThePlannerSaysSo) {
  HttpServer::Options options;
  options.access = std::make_shared<const Access>(
      Access::Options{"tokens", true, false, false},
      std::map<std::string, TokenEntry>{
          {kAdminHash, TokenEntry{"alice", Role::kReader}}});
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();

  EXPECT_THAT(Get(port, "/healthz", ""), StartsWith("HTTP/1.1 200"));
  for (const char* path : {"/metrics", "/calibration", "/energy"}) {
    const std::string refused = Get(port, path, "");
    EXPECT_THAT(refused, StartsWith("HTTP/1.1 401")) << path;
    EXPECT_THAT(refused, HasSubstr("WWW-Authenticate: Bearer"));
    EXPECT_THAT(HttpBody(refused),
                HasSubstr(std::string(path) +
                          ": this planner requires a token for reads"));
    EXPECT_THAT(Get(port, path, "admin"), StartsWith("HTTP/1.1 200")) << path;
    const std::string wrong = Get(port, path, "nope");
    EXPECT_THAT(wrong, StartsWith("HTTP/1.1 401")) << path;
    EXPECT_THAT(HttpBody(wrong), HasSubstr("--tokens_file"));
  }
  const std::string verdicts = Post(port, "/scheduler/filter", "");
  EXPECT_THAT(verdicts, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(HttpBody(verdicts), HasSubstr("/scheduler/filter: this planner"));
  EXPECT_THAT(Post(port, "/scheduler/filter", "admin"),
              StartsWith("HTTP/1.1 200"));
  // An unknown path says nothing about which paths exist.
  const std::string unknown = Get(port, "/nosuch", "");
  EXPECT_THAT(unknown, StartsWith("HTTP/1.1 401"));
  EXPECT_THAT(HttpBody(unknown), HasSubstr("this path"));
  EXPECT_THAT(Get(port, "/nosuch", "admin"), StartsWith("HTTP/1.1 404"));
}

TEST_F(HttpServerTest, OpenMetricsAnswerScrapesWithoutAToken) {
  HttpServer::Options options;
  options.access = std::make_shared<const Access>(
      Access::Options{"tokens", true, false, false},
      std::map<std::string, TokenEntry>{
          {kAdminHash, TokenEntry{"alice", Role::kReader}}});
  options.metrics_open = true;
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  EXPECT_THAT(Get(server->port(), "/metrics", ""), StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(Get(server->port(), "/calibration", ""),
              StartsWith("HTTP/1.1 401"));
}

TEST_F(HttpServerTest, WhereReadsAreOpenEveryRouteAnswersWithoutAToken) {
  HttpServer::Options options;
  options.access = std::make_shared<const Access>(
      Access::Options{"tokens", false, true, false},
      std::map<std::string, TokenEntry>{
          {kAdminHash, TokenEntry{"alice", Role::kReader}}});
  auto server = Start(options);
  ASSERT_NE(server, nullptr);
  for (const char* path : {"/metrics", "/calibration", "/energy"}) {
    EXPECT_THAT(Get(server->port(), path, ""), StartsWith("HTTP/1.1 200"))
        << path;
  }
  EXPECT_THAT(Post(server->port(), "/scheduler/filter", ""),
              StartsWith("HTTP/1.1 200"));
}

// / lists the pages, /metrics and /healthz; a page's bad query value is a
// 400 with its message (HTML-escaped), not a 200.
TEST_F(HttpServerTest, IndexListsThePagesAndABadQueryIsA400) {
  auto server = Start(HttpServer::Options());
  ASSERT_NE(server, nullptr);
  const std::string index = Get(server->port(), "/", "");
  EXPECT_THAT(index, StartsWith("HTTP/1.1 200"));
  for (const char* path : {"/calibration", "/energy", "/metrics", "/healthz"}) {
    EXPECT_THAT(index, HasSubstr(absl::StrCat("<a href=\"", path, "\">")))
        << path;
  }
  const std::string bad = Get(server->port(), "/energy?arch=foo", "");
  EXPECT_THAT(bad, StartsWith("HTTP/1.1 400"));
  EXPECT_THAT(bad, HasSubstr("<p>arch = 'foo' &lt;unknown&gt;</p>"));
  EXPECT_THAT(Get(server->port(), "/energy?arch=ampere", ""),
              StartsWith("HTTP/1.1 200"));
}

}  // namespace
}  // namespace headroom
