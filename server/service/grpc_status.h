#ifndef HEADROOM_SERVER_SERVICE_GRPC_STATUS_H_
#define HEADROOM_SERVER_SERVICE_GRPC_STATUS_H_

// The one place an absl::Status becomes a grpc::Status.

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace headroom {

grpc::Status ToGrpcStatus(const absl::Status& status);

// go-grpc-prometheus spelling of a code ("OK", "InvalidArgument", ...).
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_GRPC_STATUS_H_
