#ifndef HEADROOM_SERVER_SERVICE_DECODE_ERRORS_H_
#define HEADROOM_SERVER_SERVICE_DECODE_ERRORS_H_

// A request whose bytes do not decode as its method's protobuf message (a
// string field that is not valid UTF-8, messages nested deeper than
// protobuf's limit of 100, bytes that are not protobuf) never reaches a
// handler. gRPC's callback API then answers UNIMPLEMENTED with no message
// (grpcpp/impl/codegen/server_callback_handlers.h, grpc 1.51: a failed
// Deserialize leaves no reactor, and the stand-in finishes UNIMPLEMENTED,
// ""), which tells the caller nothing. This interceptor, first in the
// server's list, turns that answer into INVALID_ARGUMENT saying why.

#include <memory>
#include <string>

#include "grpcpp/support/server_interceptor.h"

namespace headroom {

// The message an undecodable request to `method` is answered with.
std::string UndecodableRequestMessage(const std::string& method);

// For ServerBuilder: unary and server-streaming calls whose request did not
// decode are answered INVALID_ARGUMENT (UndecodableRequestMessage) instead
// of UNIMPLEMENTED. A stream's later messages are not covered: gRPC reports
// a read that did not decode as the stream's end, which an interceptor
// cannot tell from the caller closing it.
std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
DecodeErrorInterceptorFactory();

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_DECODE_ERRORS_H_
