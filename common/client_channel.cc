#include "common/client_channel.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"

namespace headroom {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " = ", path, ": cannot open the file"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (text.str().find("-----BEGIN") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " = ", path, ": not a PEM file"));
  }
  return text.str();
}

// Adds the bearer token to every call's initial metadata. Call credentials
// would do it only over TLS; a token is also used on loopback plaintext.
class BearerToken : public grpc::experimental::Interceptor {
 public:
  explicit BearerToken(const std::string* header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) final {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(std::string token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) final {
    return new BearerToken(&header_);
  }

 private:
  const std::string header_;
};

void FromEnvironment(const char* variable, std::string* field) {
  if (!field->empty()) return;
  if (const char* value = std::getenv(variable); value != nullptr) {
    *field = value;
  }
}

}  // namespace

void SecurityFromEnvironment(ChannelSecurity* security) {
  FromEnvironment("HEADROOM_TLS_CA", &security->tls_ca);
  FromEnvironment("HEADROOM_TLS_CERT", &security->tls_cert);
  FromEnvironment("HEADROOM_TLS_KEY", &security->tls_key);
  FromEnvironment("HEADROOM_TOKEN", &security->token);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> OpenChannel(
    const std::string& target, const ChannelSecurity& security,
    grpc::ChannelArguments args) {
  if (security.tls_cert.empty() != security.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both (a client "
        "certificate and its key) or neither");
  }
  if (security.tls_ca.empty() && !security.tls_cert.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert needs --tls_ca (the CA of the planner's certificate)");
  }
  if (security.token.find_first_of("\r\n") != std::string::npos) {
    return absl::InvalidArgumentError("--token contains a line break");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (security.tls_ca.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    auto ca = ReadPem(security.tls_ca, "tls_ca");
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
    if (!security.tls_cert.empty()) {
      auto cert = ReadPem(security.tls_cert, "tls_cert");
      if (!cert.ok()) return cert.status();
      auto key = ReadPem(security.tls_key, "tls_key");
      if (!key.ok()) return key.status();
      ssl.pem_cert_chain = *std::move(cert);
      ssl.pem_private_key = *std::move(key);
    }
    credentials = grpc::SslCredentials(ssl);
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!security.token.empty()) {
    interceptors.push_back(
        std::make_unique<BearerTokenFactory>(security.token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, credentials, args, std::move(interceptors));
}

}  // namespace headroom
