#include "common/client_channel.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

absl::Status Open(const ChannelSecurity& security) {
  return OpenChannel("127.0.0.1:1", security, grpc::ChannelArguments())
      .status();
}

TEST(ClientChannelTest, PlaintextOpensWithoutConnecting) {
  EXPECT_TRUE(Open(ChannelSecurity()).ok());
  ChannelSecurity token;
  token.token = "t0ken";
  EXPECT_TRUE(Open(token).ok());
}

TEST(ClientChannelTest, ErrorsNameTheFlags) {
  ChannelSecurity cert_only;
  cert_only.tls_ca = "ca.pem";
  cert_only.tls_cert = "client.pem";
  EXPECT_THAT(Open(cert_only).message(), HasSubstr("--tls_key"));

  ChannelSecurity no_ca;
  no_ca.tls_cert = "client.pem";
  no_ca.tls_key = "client.key";
  EXPECT_THAT(Open(no_ca).message(), HasSubstr("--tls_ca"));

  ChannelSecurity line_break;
  line_break.token = "abc\r\nx-injected: 1";
  EXPECT_THAT(Open(line_break).message(), HasSubstr("--token"));

  ChannelSecurity missing_file;
  missing_file.tls_ca = "/no/such/ca.pem";
  const absl::Status status = Open(missing_file);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("tls_ca"));
}

TEST(ClientChannelTest, FlagsWinOverTheEnvironment) {
  ::setenv("HEADROOM_TOKEN", "from-env", 1);
  ::setenv("HEADROOM_TLS_CA", "/env/ca.pem", 1);
  ChannelSecurity security;
  security.token = "from-flag";
  SecurityFromEnvironment(&security);
  EXPECT_EQ(security.token, "from-flag");
  EXPECT_EQ(security.tls_ca, "/env/ca.pem");
  ::unsetenv("HEADROOM_TOKEN");
  ::unsetenv("HEADROOM_TLS_CA");
}

}  // namespace
}  // namespace headroom
