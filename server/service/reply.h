#ifndef HEADROOM_SERVER_SERVICE_REPLY_H_
#define HEADROOM_SERVER_SERVICE_REPLY_H_

// Small helpers every callback service here finishes unary calls with.

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/message.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_callback.h"
#include "server/service/grpc_status.h"

namespace headroom {

// Finishes a unary call with `answer`: its status, or OK with the value
// moved into `response`.
template <typename Response>
grpc::ServerUnaryReactor* Reply(grpc::ServerUnaryReactor* reactor,
                                absl::StatusOr<Response> answer,
                                Response* response) {
  if (!answer.ok()) {
    reactor->Finish(ToGrpcStatus(answer.status()));
    return reactor;
  }
  *response = std::move(*answer);
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

// INVALID_ARGUMENT for a request over the size limit, saying both sizes.
inline absl::Status CheckSize(const google::protobuf::Message& request,
                              size_t max_bytes) {
  if (request.ByteSizeLong() <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "request is ", request.ByteSizeLong(), " bytes; allowed up to ",
      max_bytes,
      " (an inline model too large? an ONNX graph is sent without its "
      "weights)"));
}

// Finishes the call with CheckSize's INVALID_ARGUMENT when `request` is over
// `max_bytes` and returns its reactor, for the handler to return; null when
// the request is within the limit.
inline grpc::ServerUnaryReactor* RefuseOversized(
    grpc::CallbackServerContext* context,
    const google::protobuf::Message& request, size_t max_bytes) {
  absl::Status size = CheckSize(request, max_bytes);
  if (size.ok()) return nullptr;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(size));
  return reactor;
}

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_REPLY_H_
