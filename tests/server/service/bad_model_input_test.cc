// Bad model input sent to a real planner (PlannerApp on 127.0.0.1 port 0):
// every request gets a clear error naming what is wrong or the limit, and
// the server answers the next call.

#include <fcntl.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "core/frontends/onnx_import.h"
#include "core/frontends/onnx_strip.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/gzip_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "tests/core/frontends/onnx_test_graphs.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::headroom::testing::GraphBuilder;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

// The planner keeps at most this much gRPC buffer memory in this test, so
// the 2 GB message costs it 64 MiB at most.
constexpr int64_t kGrpcMemoryBytes = int64_t{64} << 20;

// Peak resident memory of this process (server and client), in bytes.
int64_t PeakRssBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      return std::stoll(line.substr(6)) * 1024;
    }
  }
  return 0;
}

class BadModelInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PlannerConfig config = ::headroom::testing::TestPlannerConfig();
    config.http_listen = "";
    config.grpc_memory_bytes = kGrpcMemoryBytes;
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = app->release();
  }
  static void TearDownTestSuite() {
    delete app_;
    app_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(app_, nullptr);
    channel_ =
        grpc::CreateChannel(Address(), grpc::InsecureChannelCredentials());
    stub_ = v1::Fit::NewStub(channel_);
  }

  static std::string Address() {
    return "127.0.0.1:" + std::to_string(app_->grpc_port());
  }

  grpc::Status Call(const v1::CheckFitRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::CheckFitResponse response;
    return stub_->CheckFit(&context, request, &response);
  }

  // A request for a model given by its source; one batch, one card.
  static v1::CheckFitRequest Request() {
    v1::CheckFitRequest request;
    request.add_batches(8);
    request.add_targets()->set_gpu("L4");
    return request;
  }

  // Ping and a CheckFit of a template both answer.
  void ExpectServing(const std::string& after) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::PingResponse pong;
    EXPECT_TRUE(stub_->Ping(&context, v1::PingRequest(), &pong).ok())
        << "Ping after " << after;
    v1::CheckFitRequest request = Request();
    request.mutable_model()->set_template_("bert-base");
    EXPECT_TRUE(Call(request).ok()) << "CheckFit after " << after;
  }

  static PlannerApp* app_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Fit::Stub> stub_;
};

PlannerApp* BadModelInputTest::app_ = nullptr;

// A small valid graph: x [batch, 16] -> Linear 16x4.
std::string SmallGraph() {
  GraphBuilder g("small");
  g.Output(g.Linear(g.Input("x", {"batch", 16}), 16, 4, true, "/fc"));
  return g.Serialize();
}

TEST_F(BadModelInputTest, OnnxGraphIsConverted) {
  v1::CheckFitRequest request = Request();
  request.mutable_model()->set_onnx(SmallGraph());
  grpc::ClientContext context;
  v1::CheckFitResponse response;
  ASSERT_TRUE(stub_->CheckFit(&context, request, &response).ok());
  EXPECT_EQ(response.params(), 68u);
  EXPECT_EQ(response.model(), "small");
  EXPECT_THAT(
      response.assumptions(),
      ::testing::Contains("batch axis: symbolic dimension 'batch' (x axis 0)"));
}

// GPT-2 as torch.onnx writes it (tests/data/onnx), read as `headroom fit
// --onnx` reads a file: 222 KB without its weights, well inside the limit.
TEST_F(BadModelInputTest, TorchExportOfGpt2FitsInARequest) {
  const std::string path = kRoot + "/tests/data/onnx/gpt2-small.onnx.gz";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  google::protobuf::io::FileInputStream file(fd);
  file.SetCloseOnDelete(true);
  google::protobuf::io::GzipInputStream gzip(&file);
  absl::StatusOr<std::string> graph = StripOnnxWeights(&gzip, kMaxOnnxBytes);
  ASSERT_TRUE(graph.ok()) << graph.status();
  v1::CheckFitRequest request = Request();
  request.mutable_model()->set_onnx(*graph);
  request.mutable_setup()->set_positions(1024);
  grpc::ClientContext context;
  v1::CheckFitResponse response;
  const grpc::Status status = stub_->CheckFit(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.params(), 124439808u);
  EXPECT_THAT(
      response.assumptions(),
      ::testing::Contains("symbolic dimension 'seq' bound to 1024 positions"));
}

TEST_F(BadModelInputTest, EachBadModelGetsANamedErrorAndTheServerServes) {
  struct Case {
    std::string what;
    v1::CheckFitRequest request;
    std::string says;
  };
  std::vector<Case> cases;
  auto onnx = [&](const std::string& what, const std::string& bytes,
                  const std::string& says) {
    v1::CheckFitRequest r = Request();
    r.mutable_model()->set_onnx(bytes);
    cases.push_back({what, r, says});
  };
  auto hf = [&](const std::string& what, const std::string& json,
                const std::string& says) {
    v1::CheckFitRequest r = Request();
    r.mutable_model()->set_hf_config(json);
    cases.push_back({what, r, says});
  };
  const std::string graph = SmallGraph();
  onnx("truncated ONNX", graph.substr(0, graph.size() / 2),
       "model.onnx: not an ONNX model");
  onnx("ONNX cut by one byte", graph.substr(0, graph.size() - 1),
       "model.onnx: not an ONNX model");
  onnx("not ONNX", "GIF89a\x01\x00\x01\x00 this is an image",
       "model.onnx: not an ONNX model");
  onnx("a config.json as ONNX", R"({"model_type": "gpt2"})",
       "model.onnx: not an ONNX model");
  {
    GraphBuilder g("no-batch");
    const std::string x = g.Input("x", {4, 128});
    g.Input("edge_index", {2, 4}, onnx::TensorProto::INT64);
    g.Output(g.Linear(x, 128, 8, true, "/fc"));
    onnx("ONNX without a batch axis", g.Serialize(),
         "graph inputs have no batch axis");
  }
  {
    GraphBuilder g("dim-zero");
    g.Output(g.Op("Relu", {g.Input("x", {"batch", int64_t{0}})}, "/relu"));
    onnx("ONNX input of size 0", g.Serialize(),
         "graph input 'x' dims[1] = 0 is out of range; allowed "
         "1..4294967296");
  }
  {
    GraphBuilder g("weight-huge");
    const std::string x = g.Input("x", {"batch", 16});
    g.Output(g.Op("MatMul", {x, g.Weight("w", {16, int64_t{1} << 33})}, "/fc"));
    onnx("ONNX weight of 2^33 columns", g.Serialize(),
         "initializer 'w' dims[1] = 8589934592 is out of range");
  }
  hf("config.json that is not JSON", "{\"model_type\": \"llama\", ",
     "model.hf_config: ");
  hf("hidden size 0", R"({"model_type": "llama", "hidden_size": 0})",
     "hidden_size = 0 is out of range");
  hf("10^7 layers", R"({"model_type": "llama", "num_hidden_layers": 10000000})",
     "num_hidden_layers = 10000000 is out of range");
  for (const Case& c : cases) {
    const grpc::Status status = Call(c.request);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.says)) << c.what;
    ExpectServing(c.what);
  }
}

// Messages past each limit: the service's request limit (4 MiB:
// INVALID_ARGUMENT naming both sizes), gRPC's message limit (8 MiB:
// RESOURCE_EXHAUSTED naming both sizes), and a ~2 GB message, which gRPC
// would buffer whole before checking it against the limit: the memory
// quota resets the stream (RESOURCE_EXHAUSTED) once 64 MiB are held. The
// client sends 2 GB of one 1 MiB buffer, referenced again and again, so
// neither side ever holds more than the quota.
TEST_F(BadModelInputTest, OversizedMessagesAreRefusedWithBoundedMemory) {
  static const std::string* chunk = new std::string(1 << 20, 'x');
  auto send = [&](size_t payload_bytes) {
    // CheckFitRequest.model (field 1) holding ModelRef.onnx (field 4).
    auto varint = [](std::string* s, uint64_t v) {
      while (v >= 0x80) {
        s->push_back(static_cast<char>(v | 0x80));
        v >>= 7;
      }
      s->push_back(static_cast<char>(v));
    };
    std::string onnx_header(1, static_cast<char>((4 << 3) | 2));
    varint(&onnx_header, payload_bytes);
    std::string header(1, static_cast<char>((1 << 3) | 2));
    varint(&header, onnx_header.size() + payload_bytes);
    header += onnx_header;
    std::vector<grpc::Slice> slices = {grpc::Slice(header)};
    for (size_t left = payload_bytes; left > 0;) {
      const size_t n = std::min(left, chunk->size());
      slices.emplace_back(chunk->data(), n, grpc::Slice::STATIC_SLICE);
      left -= n;
    }
    grpc::ByteBuffer request(slices.data(), slices.size());
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    grpc::ByteBuffer response;
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    grpc::Status status;
    stub.UnaryCall(&context, "/headroom.v1.Fit/CheckFit", grpc::StubOptions(),
                   &request, &response, [&](grpc::Status s) {
                     std::lock_guard<std::mutex> lock(mu);
                     status = std::move(s);
                     done = true;
                     done_cv.notify_one();
                   });
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
    return status;
  };

  const grpc::Status over_service = send(6 << 20);
  EXPECT_EQ(over_service.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(over_service.error_message(),
              AllOf(HasSubstr("request is 6291466 bytes"),
                    HasSubstr("allowed up to 4194304")));
  ExpectServing("a 6 MiB message");

  const grpc::Status over_grpc = send(9 << 20);
  EXPECT_EQ(over_grpc.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(over_grpc.error_message(),
              HasSubstr("Received message larger than max (9437194 vs. "
                        "8388608)"));
  ExpectServing("a 9 MiB message");

  const int64_t rss_before = PeakRssBytes();
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status two_gb = send(2'000'000'000);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_EQ(two_gb.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << two_gb.error_message();
  EXPECT_LT(seconds, 20.0);
  // The server held no more than its quota (plus slack) of the 2 GB.
  EXPECT_LT(PeakRssBytes() - rss_before, 4 * kGrpcMemoryBytes);
  ExpectServing("a 2 GB message");
}

}  // namespace
}  // namespace headroom
