// The Fleet.Connect protocol on a loopback server with a recording handler
// in place of the FleetService: messages are handed over in read order on
// the executor, replies go back on the stream, an empty message ends it
// with INVALID_ARGUMENT and nothing after it is handled, and the handler
// hears of the end last.

#include "server/service/fleet/worker_stream.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::ElementsAre;

class RecordingHandler : public WorkerStreamHandler {
 public:
  void OnHello(WorkerStream* stream, const v1::WorkerHello& hello) override {
    Record("hello " + hello.worker_id());
    v1::PlannerMessage welcome;
    welcome.mutable_welcome()->set_heartbeat_ms(1234);
    stream->Enqueue(std::move(welcome));
  }
  void OnHeartbeat(WorkerStream*, const v1::Heartbeat& heartbeat) override {
    Record("heartbeat " + heartbeat.assignment_id());
  }
  void OnSamples(WorkerStream*, const v1::SampleBatch& samples) override {
    Record("samples " + samples.probe_id());
  }
  void OnResult(WorkerStream*, const v1::ProbeResult& result) override {
    Record("result " + result.key());
  }
  void OnStreamDone(WorkerStream*) override { Record("done"); }

  // What was handled, once "done" is (bounded wait).
  std::vector<std::string> WaitForDone() {
    absl::MutexLock lock(&mu_);
    auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !handled_.empty() && handled_.back() == "done";
    };
    mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(30));
    return handled_;
  }

 private:
  void Record(std::string what) {
    absl::MutexLock lock(&mu_);
    handled_.push_back(std::move(what));
  }

  absl::Mutex mu_;
  std::vector<std::string> handled_ ABSL_GUARDED_BY(mu_);
};

class TestFleet final : public v1::Fleet::CallbackService {
 public:
  TestFleet(WorkerStreamHandler* handler, BackgroundWorker* executor)
      : handler_(handler), executor_(executor) {}
  grpc::ServerBidiReactor<v1::WorkerMessage, v1::PlannerMessage>* Connect(
      grpc::CallbackServerContext* context) override {
    return new WorkerStream(handler_, executor_, context->peer(), "",
                            /*max_unhandled=*/64);
  }

 private:
  WorkerStreamHandler* handler_;
  BackgroundWorker* executor_;
};

class WorkerStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port, 0);
    stub_ = v1::Fleet::NewStub(
        grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  RecordingHandler handler_;
  BackgroundWorker executor_{2};
  TestFleet service_{&handler_, &executor_};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Fleet::Stub> stub_;
};

TEST_F(WorkerStreamTest, MessagesAreHandledInOrderAndRepliesComeBack) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  auto stream = stub_->Connect(&context);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id("w-1");
  ASSERT_TRUE(stream->Write(hello));
  v1::PlannerMessage reply;
  ASSERT_TRUE(stream->Read(&reply));
  EXPECT_EQ(reply.welcome().heartbeat_ms(), 1234);
  for (int i = 0; i < 3; ++i) {
    v1::WorkerMessage heartbeat;
    heartbeat.mutable_heartbeat()->set_assignment_id("a" + std::to_string(i));
    ASSERT_TRUE(stream->Write(heartbeat));
  }
  v1::WorkerMessage samples;
  samples.mutable_samples()->set_probe_id("p-1");
  ASSERT_TRUE(stream->Write(samples));
  v1::WorkerMessage result;
  result.mutable_result()->set_key("k-1");
  ASSERT_TRUE(stream->Write(result));
  ASSERT_TRUE(stream->WritesDone());
  for (int i = 0; i < 100 && stream->Read(&reply); ++i) {
  }
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_THAT(handler_.WaitForDone(),
              ElementsAre("hello w-1", "heartbeat a0", "heartbeat a1",
                          "heartbeat a2", "samples p-1", "result k-1", "done"));
}

TEST_F(WorkerStreamTest, AnEmptyMessageEndsTheStreamAndNothingAfterIsHandled) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  auto stream = stub_->Connect(&context);
  v1::WorkerMessage heartbeat;
  heartbeat.mutable_heartbeat()->set_assignment_id("before");
  ASSERT_TRUE(stream->Write(heartbeat));
  ASSERT_TRUE(stream->Write(v1::WorkerMessage()));
  heartbeat.mutable_heartbeat()->set_assignment_id("after");
  // The write may fail once the planner has ended the stream.
  (void)stream->Write(heartbeat);
  (void)stream->WritesDone();
  v1::PlannerMessage reply;
  for (int i = 0; i < 100 && stream->Read(&reply); ++i) {
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "empty WorkerMessage; send hello, heartbeat, samples or result");
  EXPECT_THAT(handler_.WaitForDone(), ElementsAre("heartbeat before", "done"));
}

}  // namespace
}  // namespace headroom
