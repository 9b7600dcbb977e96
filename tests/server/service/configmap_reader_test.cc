// ConfigMapReader against a loopback httplib server playing the Kubernetes
// API (GET /api/v1/namespaces/{ns}/configmaps/{name}), on 127.0.0.1 and a
// port the kernel picks.

#include "server/service/configmap_reader.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

// A ConfigMap as the API server answers it (kind, apiVersion, metadata,
// data; binaryData base64). "recipe.yaml" holds a two-line torchtune-like
// file; "blob" holds base64("hi\n") = "aGkK".
constexpr char kTrainConfigMap[] = R"({
  "kind": "ConfigMap",
  "apiVersion": "v1",
  "metadata": {"name": "llama-lora", "namespace": "ml",
               "resourceVersion": "42"},
  "data": {"recipe.yaml": "model:\n  lora_rank: 16\n", "notes": "x"},
  "binaryData": {"blob": "aGkK"}
})";

class FakeApi {
 public:
  FakeApi() {
    server_.Get(R"(/api/v1/namespaces/([^/]+)/configmaps/([^/]+))",
                [this](const httplib::Request& req, httplib::Response& res) {
                  Answer(req, res);
                });
    port_ = server_.bind_to_any_port("127.0.0.1");
    // The socket listens from bind on: requests queue until the loop runs.
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before the loop runs would be lost, and join would wait.
    while (!server_.is_running()) std::this_thread::yield();
  }
  ~FakeApi() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int requests() const { return requests_.load(); }
  std::string last_authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  void Answer(const httplib::Request& req, httplib::Response& res) {
    ++requests_;
    {
      absl::MutexLock lock(&mu_);
      authorization_ = req.get_header_value("Authorization");
    }
    const std::string ns = req.matches[1], name = req.matches[2];
    if (ns == "ml" && name == "llama-lora") {
      res.set_content(kTrainConfigMap, "application/json");
    } else if (ns == "ml" && name == "huge") {
      // 2 MiB of data: over the reader's 1 MiB cap.
      res.set_content(absl::StrCat(R"({"kind":"ConfigMap","data":{"a":")",
                                   std::string(2 << 20, 'x'), R"("}})"),
                      "application/json");
    } else if (ns == "ml" && name == "garbled") {
      res.set_content(R"({"kind":"ConfigMap","data":{"a": 1)",
                      "application/json");
    } else if (ns == "secret") {
      res.status = 403;
      res.set_content(R"({"kind":"Status","code":403})", "application/json");
    } else {
      res.status = 404;
      res.set_content(R"({"kind":"Status","reason":"NotFound","code":404})",
                      "application/json");
    }
  }

  httplib::Server server_;
  int port_ = -1;
  std::thread thread_;
  std::atomic<int> requests_{0};
  absl::Mutex mu_;
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

class ConfigMapReaderTest : public ::testing::Test {
 protected:
  ConfigMapReaderTest() {
    // One file per test process: ctest runs this suite's tests side by
    // side, and one's destructor must not remove another's token.
    token_file_ = ::testing::TempDir() + "configmap_reader_token-" +
                  std::to_string(getpid());
    std::ofstream(token_file_) << "sa-token-123\n";
  }
  ~ConfigMapReaderTest() override { std::remove(token_file_.c_str()); }

  ConfigMapReaderOptions Options() {
    ConfigMapReaderOptions options;
    options.api_url = api_.url();
    options.token_file = token_file_;
    options.ca_file = "/nonexistent/ca.crt";  // plain http: never read
    options.timeout = absl::Seconds(5);
    options.ttl = absl::Seconds(30);
    options.max_entries = 2;
    options.max_bytes = size_t{1} << 20;
    options.clock = [this] { return now_; };
    return options;
  }

  FakeApi api_;
  std::string token_file_;
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
};

TEST_F(ConfigMapReaderTest, ReadsAKeyAndSendsTheTokenAsBearer) {
  ConfigMapReader reader(Options());
  auto value = reader.Read("ml", "llama-lora", "recipe.yaml");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, "model:\n  lora_rank: 16\n");
  // The token file's line without its newline.
  EXPECT_EQ(api_.last_authorization(), "Bearer sa-token-123");
  auto blob = reader.Read("ml", "llama-lora", "blob");
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ(*blob, "hi\n");  // base64 "aGkK"
}

TEST_F(ConfigMapReaderTest, MissingKeyNamesTheConfigMapAndItsKeys) {
  ConfigMapReader reader(Options());
  auto value = reader.Read("ml", "llama-lora", "config.yaml");
  ASSERT_EQ(value.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(value.status().message(),
            "ConfigMap ml/llama-lora has no key config.yaml (its keys: blob, "
            "notes, recipe.yaml)");
}

TEST_F(ConfigMapReaderTest, MissingConfigMapIsNotFound) {
  ConfigMapReader reader(Options());
  auto value = reader.Read("ml", "nope", "recipe.yaml");
  ASSERT_EQ(value.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(value.status().message(),
            "ConfigMap ml/nope does not exist (make it with kubectl -n ml "
            "create configmap nope --from-file=recipe.yaml=FILE)");
}

TEST_F(ConfigMapReaderTest, RefusedTokenNamesTheMissingPermission) {
  ConfigMapReader reader(Options());
  auto value = reader.Read("secret", "job", "recipe.yaml");
  ASSERT_EQ(value.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(value.status().message(),
              HasSubstr("needs get on configmaps in namespace secret"));
}

TEST_F(ConfigMapReaderTest, OversizedAnswerIsRefused) {
  ConfigMapReader reader(Options());
  auto value = reader.Read("ml", "huge", "a");
  ASSERT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(value.status().message(),
            "ConfigMap ml/huge: the Kubernetes API's answer is over 1048576 "
            "bytes (the reader's max_bytes)");
}

TEST_F(ConfigMapReaderTest, MalformedAnswerIsUnavailable) {
  ConfigMapReader reader(Options());
  auto value = reader.Read("ml", "garbled", "a");
  ASSERT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(value.status().message(),
              HasSubstr("ConfigMap ml/garbled: the Kubernetes API's answer is "
                        "not a ConfigMap"));
}

TEST_F(ConfigMapReaderTest, CachesAnswersForTheTtlAndBoundsTheCount) {
  ConfigMapReader reader(Options());
  ASSERT_TRUE(reader.Read("ml", "llama-lora", "recipe.yaml").ok());
  // Another key of the same ConfigMap and a repeat: no new request.
  ASSERT_TRUE(reader.Read("ml", "llama-lora", "notes").ok());
  ASSERT_TRUE(reader.Read("ml", "llama-lora", "recipe.yaml").ok());
  EXPECT_EQ(api_.requests(), 1);
  // A 404 is an answer too, cached as one.
  EXPECT_FALSE(reader.Read("ml", "nope", "k").ok());
  EXPECT_FALSE(reader.Read("ml", "nope", "k").ok());
  EXPECT_EQ(api_.requests(), 2);
  // Just before the TTL: still cached; at it: asked again.
  now_ += absl::Seconds(29);
  ASSERT_TRUE(reader.Read("ml", "llama-lora", "notes").ok());
  EXPECT_EQ(api_.requests(), 2);
  now_ += absl::Seconds(1);
  ASSERT_TRUE(reader.Read("ml", "llama-lora", "notes").ok());
  EXPECT_EQ(api_.requests(), 3);
  // max_entries = 2: a third ConfigMap drops the oldest answer (ml/nope,
  // fetched before the refreshed ml/llama-lora).
  EXPECT_FALSE(reader.Read("other", "x", "k").ok());
  EXPECT_EQ(api_.requests(), 4);
  EXPECT_FALSE(reader.Read("ml", "nope", "k").ok());
  EXPECT_EQ(api_.requests(), 5);
  EXPECT_EQ(reader.requests(), 5u);
}

TEST_F(ConfigMapReaderTest, BadNamesNeverReachTheApi) {
  ConfigMapReader reader(Options());
  auto bad_ns = reader.Read("ML", "llama-lora", "recipe.yaml");
  EXPECT_EQ(bad_ns.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_ns.status().message(),
              HasSubstr("ConfigMap namespace \"ML\" is not a Kubernetes "
                        "namespace name"));
  auto bad_name = reader.Read("ml", "../secrets", "recipe.yaml");
  EXPECT_EQ(bad_name.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_key = reader.Read("ml", "llama-lora", "a/b");
  EXPECT_EQ(bad_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_key.status().message(),
              HasSubstr("ConfigMap ml/llama-lora key \"a/b\" is not a "
                        "ConfigMap key"));
  EXPECT_EQ(api_.requests(), 0);
}

TEST_F(ConfigMapReaderTest, UnreachableApiIsUnavailable) {
  ConfigMapReaderOptions options = Options();
  // A loopback port bound but never listened on: connecting is refused.
  const int sock = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(sock, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::getsockname(sock, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  options.api_url = absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port));
  ConfigMapReader reader(options);
  auto value = reader.Read("ml", "llama-lora", "recipe.yaml");
  ::close(sock);
  ASSERT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(value.status().message(),
              HasSubstr("ConfigMap ml/llama-lora: cannot reach the Kubernetes "
                        "API at http://127.0.0.1:"));
}

TEST_F(ConfigMapReaderTest, UnreadableTokenFileIsUnavailable) {
  ConfigMapReaderOptions options = Options();
  options.token_file = "/nonexistent/token";
  ConfigMapReader reader(options);
  auto value = reader.Read("ml", "llama-lora", "recipe.yaml");
  ASSERT_EQ(value.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(value.status().message(),
              HasSubstr("cannot read the Kubernetes API token file "
                        "/nonexistent/token"));
}

// The in-cluster path: HTTPS verified against the CA file. The fake API
// serves scripts/dev-certs.sh's planner.pem (SAN 127.0.0.1) signed by its
// ca.pem.
TEST(ConfigMapReaderTlsTest, VerifiesTheApiServerWithTheCaFile) {
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("headroom-cm-certs-" + std::to_string(getpid()));
  const std::string make = std::string(HEADROOM_SOURCE_DIR) +
                           "/scripts/dev-certs.sh " + dir + " 2>/dev/null";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  httplib::SSLServer server((dir + "/planner.pem").c_str(),
                            (dir + "/planner-key.pem").c_str());
  ASSERT_TRUE(server.is_valid());
  std::atomic<int> requests{0};
  server.Get(R"(/api/v1/namespaces/ml/configmaps/llama-lora)",
             [&](const httplib::Request&, httplib::Response& res) {
               ++requests;
               res.set_content(kTrainConfigMap, "application/json");
             });
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread thread([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::yield();

  const std::string token = dir + "/token-reader";
  ConfigMapReaderOptions options;
  options.api_url = absl::StrCat("https://127.0.0.1:", port);
  options.token_file = token;
  options.ca_file = dir + "/ca.pem";
  options.timeout = absl::Seconds(5);
  ConfigMapReader reader(options);
  auto value = reader.Read("ml", "llama-lora", "recipe.yaml");
  EXPECT_EQ(value.value_or(value.status().ToString()),
            "model:\n  lora_rank: 16\n");

  // Without the CA file no request is made.
  options.ca_file = dir + "/no-such-ca.pem";
  ConfigMapReader without_ca(options);
  auto refused = without_ca.Read("ml", "llama-lora", "recipe.yaml");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("cannot read the Kubernetes API's CA file " + dir +
                        "/no-such-ca.pem"));
  EXPECT_EQ(requests.load(), 1);

  // Another CA's certificate: the handshake fails, nothing is read.
  const std::string other = dir + "-other";
  ASSERT_EQ(std::system((std::string(HEADROOM_SOURCE_DIR) +
                         "/scripts/dev-certs.sh " + other + " 2>/dev/null")
                            .c_str()),
            0);
  options.ca_file = other + "/ca.pem";
  ConfigMapReader wrong_ca(options);
  auto unverified = wrong_ca.Read("ml", "llama-lora", "recipe.yaml");
  EXPECT_EQ(unverified.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(
      unverified.status().message(),
      HasSubstr("cannot reach the Kubernetes API at https://127.0.0.1:"));
  EXPECT_EQ(requests.load(), 1);

  server.stop();
  thread.join();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(other);
}

}  // namespace
}  // namespace headroom
