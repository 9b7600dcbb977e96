#ifndef HEADROOM_CLIENT_RPC_H_
#define HEADROOM_CLIENT_RPC_H_

// What every CLI command that talks to the planner shares.

#include <memory>
#include <ostream>

#include "absl/status/statusor.h"
#include "client/commands.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "headroom/v1/planner.pb.h"

namespace headroom::cli {

// Channel arguments every CLI channel uses (16 MiB answers).
grpc::ChannelArguments ChannelArgs();
// The channel main opened (TLS, token), or plaintext for Options built
// elsewhere (tests).
std::shared_ptr<grpc::Channel> Connect(const Options& options);
void SetDeadline(grpc::ClientContext& context, const Options& options);
// Exit code 3 with "cannot reach the planner" when it is down, else 1 with
// the server's message.
int FailRpc(std::ostream& err, const Options& options,
            const grpc::Status& status);
// The model, setup and batches (and targets, when --gpu names any) from
// the flags; INVALID_ARGUMENT names the flag.
absl::StatusOr<v1::CheckFitRequest> FitRequest(const Options& options,
                                               bool require_targets = true);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_RPC_H_
