#ifndef HEADROOM_CLIENT_RPC_H_
#define HEADROOM_CLIENT_RPC_H_

// What every CLI command that talks to the planner shares: the channel, the
// one way a unary call is made (CallPlanner, Call), the exit code a failed
// call maps to (FailRpc), and the fit request the model flags build.

#include <memory>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/commands.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "grpcpp/support/channel_arguments.h"
#include "grpcpp/support/status.h"
#include "headroom/v1/planner.pb.h"

namespace headroom::cli {

// Channel arguments every CLI channel uses (16 MiB answers).
grpc::ChannelArguments ChannelArgs();
// The channel main opened (TLS, token), or plaintext for Options built
// elsewhere (tests).
std::shared_ptr<grpc::Channel> Connect(const Options& options);
// The call's deadline: `deadline_factor` times --deadline_ms from now.
void SetDeadline(grpc::ClientContext& context, const Options& options,
                 int deadline_factor = 1);
// Exit code 3 with "cannot reach the planner" when it is down, else 2
// (INVALID_ARGUMENT, NOT_FOUND: what the flags named is wrong) or 1 with the
// server's message.
int FailRpc(std::ostream& err, const Options& options,
            const grpc::Status& status);
// The model, setup and batches (and targets, when --gpu names any) from
// the flags; INVALID_ARGUMENT names the flag.
absl::StatusOr<v1::CheckFitRequest> FitRequest(const Options& options,
                                               bool require_targets = true);

// A unary method of a generated stub, e.g. &v1::Fit::Stub::CheckFit.
template <typename Stub, typename Request, typename Response>
using UnaryMethod = grpc::Status (Stub::*)(grpc::ClientContext*, const Request&,
                                           Response*);

// One unary call to the planner: a stub of the method's service on
// Connect(options), a context with the deadline (SetDeadline), the call.
// The call's status, for a command that treats some failures itself.
template <typename Stub, typename Request, typename Response>
grpc::Status CallPlanner(const Options& options,
                         UnaryMethod<Stub, Request, Response> method,
                         const Request& request, Response* response,
                         int deadline_factor = 1) {
  Stub stub(Connect(options));
  grpc::ClientContext context;
  SetDeadline(context, options, deadline_factor);
  return (stub.*method)(&context, request, response);
}

// CallPlanner with the failure mapped: kExitAnswer when the call succeeded,
// else FailRpc's exit code, its message written to `err`. As in
//   if (int code = Call(options, &v1::Fit::Stub::CheckFit, request,
//                       &response, err); code != kExitAnswer) return code;
template <typename Stub, typename Request, typename Response>
int Call(const Options& options, UnaryMethod<Stub, Request, Response> method,
         const Request& request, Response* response, std::ostream& err) {
  const grpc::Status status = CallPlanner(options, method, request, response);
  return status.ok() ? kExitAnswer : FailRpc(err, options, status);
}

// Most pages a listing is followed for before the CLI gives up.
inline constexpr int kMaxListPages = 10000;

// Calls a List method, e.g. &v1::Fleet::Stub::ListWorkers, page after page
// until next_page_token is empty, merging every page into `*all` (lists
// concatenate), so a listing prints as one response. Each page has its own
// deadline. The first failed call's status; OUT_OF_RANGE past
// kMaxListPages pages.
template <typename Stub, typename Request, typename Response>
grpc::Status ListAllPages(const Options& options,
                          UnaryMethod<Stub, Request, Response> method,
                          Request request, Response* all) {
  Stub stub(Connect(options));
  all->Clear();
  for (int i = 0; i < kMaxListPages; ++i) {
    grpc::ClientContext context;
    SetDeadline(context, options);
    Response page;
    const grpc::Status status = (stub.*method)(&context, request, &page);
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
