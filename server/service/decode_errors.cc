#include "server/service/decode_errors.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace headroom {
namespace {

using grpc::experimental::InterceptionHookPoints;
using grpc::experimental::ServerRpcInfo;

class DecodeErrorInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit DecodeErrorInterceptor(ServerRpcInfo* info)
      : method_(info->method() ? info->method() : ""),
        // Only these read their one request before the handler runs; a
        // stream's reads report a message that did not decode as its end.
        request_first_(info->type() == ServerRpcInfo::Type::UNARY ||
                       info->type() == ServerRpcInfo::Type::SERVER_STREAMING) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) final {
    if (request_first_ && !seen_request_ &&
        methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::POST_RECV_MESSAGE)) {
      seen_request_ = true;
      // The request arrived (this hook point says so) but gRPC has no
      // message for it: Deserialize failed.
      undecodable_ = methods->GetRecvMessage() == nullptr;
    }
    if (undecodable_ && methods->QueryInterceptionHookPoint(
                            InterceptionHookPoints::PRE_SEND_STATUS)) {
      // gRPC's stand-in reactor's answer; anything else is a handler's own.
      const grpc::Status status = methods->GetSendStatus();
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED &&
          status.error_message().empty()) {
        methods->ModifySendStatus(
            grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                         UndecodableRequestMessage(method_)));
      }
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  const bool request_first_;
  bool seen_request_ = false;
  bool undecodable_ = false;
};

class DecodeErrorInterceptorFactoryImpl
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  grpc::experimental::Interceptor* CreateServerInterceptor(
      ServerRpcInfo* info) final {
    return new DecodeErrorInterceptor(info);
  }
};

}  // namespace

std::string UndecodableRequestMessage(const std::string& method) {
  return absl::StrCat(
      "the request to ", method.empty() ? "this method" : method,
      " does not decode as its protobuf message: every string field must be "
      "valid UTF-8, messages may nest at most 100 deep, and the bytes must "
      "be the method's request message as the headroom.v1 protos encode it");
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
DecodeErrorInterceptorFactory() {
  return std::make_unique<DecodeErrorInterceptorFactoryImpl>();
}

}  // namespace headroom
