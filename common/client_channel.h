#ifndef HEADROOM_COMMON_CLIENT_CHANNEL_H_
#define HEADROOM_COMMON_CLIENT_CHANNEL_H_

// The one way the CLI, the worker and the benchmarks reach the planner:
// plaintext or TLS (with a client certificate for mTLS), and a bearer token
// sent on every call.

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"

namespace headroom {

struct ChannelSecurity {
  // PEM file of the CA that signed the planner's certificate; empty means
  // plaintext (and then tls_cert / tls_key must be empty too).
  std::string tls_ca;
  // PEM files of this client's certificate and key, for a planner that
  // requires client certificates (--tls_client_ca). Both or neither.
  std::string tls_cert;
  std::string tls_key;
  // Sent as "authorization: Bearer <token>" on every call; empty sends none.
  std::string token;
};

// Fills unset fields from HEADROOM_TLS_CA, HEADROOM_TLS_CERT,
// HEADROOM_TLS_KEY and HEADROOM_TOKEN, so flags win over the environment.
void SecurityFromEnvironment(ChannelSecurity* security);

// A channel to `target` with `security`. Errors name the flag: a file that
// cannot be read, a certificate without its key, a client certificate
// without --tls_ca.
absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(
    const std::string& target, const ChannelSecurity& security,
    grpc::ChannelArguments args);

}  // namespace headroom

#endif  // HEADROOM_COMMON_CLIENT_CHANNEL_H_
