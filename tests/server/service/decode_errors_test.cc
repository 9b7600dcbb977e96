// Requests whose bytes do not decode, sent with a raw client (GenericStub,
// hand-made bytes) to a real planner on 127.0.0.1: every headroom.v1 method
// that reads its request first answers INVALID_ARGUMENT saying why, never
// gRPC's bare UNIMPLEMENTED, and the planner keeps serving.

#include "server/service/decode_errors.h"

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::testing::AllOf;
using ::testing::HasSubstr;

void Varint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>(value | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

std::string Tag(int field, int wire_type) {
  std::string tag;
  Varint(&tag, (static_cast<uint64_t>(field) << 3) | wire_type);
  return tag;
}

std::string LengthDelimited(int field, const std::string& payload) {
  std::string out = Tag(field, 2);
  Varint(&out, payload.size());
  return out + payload;
}

// Bytes of a `type` whose first string field (looked for through its
// message fields, three deep at most) holds invalid UTF-8; none when it
// has no string field that near.
std::optional<std::string> InvalidUtf8(const Descriptor* type, int depth = 0) {
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      return LengthDelimited(field->number(), "ok \xff\xfe");
    }
  }
  if (depth >= 3) return std::nullopt;
  for (int i = 0; i < type->field_count(); ++i) {
    const FieldDescriptor* field = type->field(i);
    if (field->type() != FieldDescriptor::TYPE_MESSAGE) continue;
    if (std::optional<std::string> inner =
            InvalidUtf8(field->message_type(), depth + 1)) {
      return LengthDelimited(field->number(), *inner);
    }
  }
  return std::nullopt;
}

// Any message: an unknown group nested `depth` deep. Protobuf parses an
// unknown group as it parses a message, under the same limit of 100.
std::string NestedGroups(int depth) {
  std::string out;
  for (int i = 0; i < depth; ++i) out += Tag(5000, 3);
  for (int i = 0; i < depth; ++i) out += Tag(5000, 4);
  return out;
}

class DecodeErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    PlannerConfig config = ::headroom::testing::TestPlannerConfig();
    config.http_listen = "";
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
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials());
  }

  // Sends `bytes` as the request of `method` and waits for its status.
  grpc::Status Send(const std::string& method, const std::string& bytes) {
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::GenericStub stub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    grpc::ByteBuffer response;
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    grpc::Status status;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     std::lock_guard<std::mutex> lock(mu);
                     status = std::move(s);
                     done = true;
                     done_cv.notify_one();
                   });
    std::unique_lock<std::mutex> lock(mu);
    done_cv.wait(lock, [&] { return done; });
    return status;
  }

  void ExpectServing(const std::string& after) {
    auto stub = v1::Fit::NewStub(channel_);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    request.add_targets()->set_gpu("L4");
    v1::CheckFitResponse response;
    const grpc::Status status = stub->CheckFit(&context, request, &response);
    EXPECT_TRUE(status.ok())
        << "CheckFit after " << after << ": " << status.error_message();
  }

  static PlannerApp* app_;
  std::shared_ptr<grpc::Channel> channel_;
};

PlannerApp* DecodeErrorsTest::app_ = nullptr;

TEST_F(DecodeErrorsTest, InvalidUtf8AndDeepNestingAreInvalidArgument) {
  // CheckFitRequest.model (1) -> ModelRef.template (1), not UTF-8.
  const std::string bad_template =
      LengthDelimited(1, LengthDelimited(1, "bert\xff\xfe"));
  // CheckFitRequest.model.spec.layers[0].block.layers[0].block ... : 60
  // Layer-Block pairs, 123 messages deep.
  v1::Layer layer;
  layer.mutable_linear()->set_in_features(4);
  layer.mutable_linear()->set_out_features(4);
  for (int i = 0; i < 60; ++i) {
    v1::Layer outer;
    *outer.mutable_block()->add_layers() = std::move(layer);
    layer = std::move(outer);
  }
  v1::CheckFitRequest deep;
  deep.mutable_model()->mutable_spec()->set_name("deep");
  *deep.mutable_model()->mutable_spec()->add_layers() = layer;
  deep.add_batches(1);
  deep.add_targets()->set_gpu("L4");
  for (const std::string& bytes :
       {bad_template, deep.SerializeAsString(), NestedGroups(101)}) {
    const grpc::Status status = Send("/headroom.v1.Fit/CheckFit", bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << status.error_message();
    EXPECT_EQ(status.error_message(),
              UndecodableRequestMessage("/headroom.v1.Fit/CheckFit"));
    EXPECT_THAT(status.error_message(),
                AllOf(HasSubstr("valid UTF-8"), HasSubstr("nest at most 100")));
  }
  // The limit itself still decodes: 99 groups inside the request.
  const grpc::Status within =
      Send("/headroom.v1.Fit/CheckFit", NestedGroups(99));
  EXPECT_NE(within.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_THAT(within.error_message(), HasSubstr("model is empty"));
  ExpectServing("undecodable CheckFit requests");
}

TEST_F(DecodeErrorsTest, EveryMethodThatReadsItsRequestFirstSaysWhy) {
  int methods = 0;
  int utf8_checked = 0;
  for (const char* name :
       {"headroom.v1.Fit", "headroom.v1.Calibration", "headroom.v1.Energy",
        "headroom.v1.Density", "headroom.v1.Microbatch", "headroom.v1.Fleet"}) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
            name);
    ASSERT_NE(service, nullptr) << name;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* method = service->method(i);
      // A stream's messages are read by its handler (decode_errors.h).
      if (method->client_streaming()) continue;
      const std::string path =
          absl::StrCat("/", service->full_name(), "/", method->name());
      ++methods;
      std::vector<std::string> inputs = {NestedGroups(150)};
      if (std::optional<std::string> utf8 = InvalidUtf8(method->input_type())) {
        inputs.push_back(*utf8);
        ++utf8_checked;
      }
      for (const std::string& bytes : inputs) {
        const grpc::Status status = Send(path, bytes);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << path << ": " << status.error_message();
        EXPECT_EQ(status.error_message(), UndecodableRequestMessage(path))
            << path;
      }
    }
  }
  EXPECT_GE(methods, 25);
  EXPECT_GE(utf8_checked, 10) << utf8_checked;
  ExpectServing("undecodable requests to every method");
}

TEST_F(DecodeErrorsTest, UnknownMethodsStayUnimplemented) {
  const grpc::Status status = Send("/headroom.v1.Fit/NoSuchMethod", "");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace headroom
