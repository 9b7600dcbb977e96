#ifndef HEADROOM_CLIENT_RPC_H_
#define HEADROOM_CLIENT_RPC_H_

// What every CLI command that talks to the planner shares.

#include <memory>
#include <ostream>
#include <string>

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

// Most pages a listing is followed for before the CLI gives up.
inline constexpr int kMaxListPages = 10000;

// Calls a List RPC, `call(context, request, page)`, page after page until
// next_page_token is empty, merging every page into `*all` (lists
// concatenate), so a listing prints as one response. Each page has its own
// deadline. The first failed call's status; OUT_OF_RANGE past
// kMaxListPages pages.
template <typename Request, typename Response, typename Call>
grpc::Status ListAllPages(const Options& options, Request request,
                          const Call& call, Response* all) {
  all->Clear();
  for (int i = 0; i < kMaxListPages; ++i) {
    grpc::ClientContext context;
    SetDeadline(context, options);
    Response page;
    const grpc::Status status = call(&context, request, &page);
    if (!status.ok()) return status;
    const std::string next = page.next_page_token();
    all->MergeFrom(page);
    all->clear_next_page_token();
    if (next.empty()) return grpc::Status::OK;
    request.set_page_token(next);
  }
  return grpc::Status(grpc::StatusCode::OUT_OF_RANGE,
                      "the listing has more than 10000 pages; the CLI stops "
                      "there");
}

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_RPC_H_
