#ifndef HEADROOM_TESTS_SUPPORT_LOOPBACK_H_
#define HEADROOM_TESTS_SUPPORT_LOOPBACK_H_

// Loopback helpers the tests and benchmarks share: a plain HTTP GET (for
// /metrics, /healthz, /calibration), a POST (the scheduler extender) and a
// free TCP port. Loopback only;
// every read bounded in count and time.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace headroom::testing {

// A TCP connection to 127.0.0.1:port, connected (its descriptor, or -1);
// reads on it time out after 5 s. The caller closes it.
inline int OpenLoopbackConnection(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Sends `request` as it is to 127.0.0.1:port; the whole response ("" on
// error).
inline std::string HttpRaw(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    size_t sent = 0;
    for (int i = 0; i < 10000 && sent < request.size(); ++i) {
      const ssize_t n = write(fd, request.data() + sent, request.size() - sent);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    if (sent == request.size()) {
      char buffer[8192];
      for (int i = 0; i < 100000; ++i) {
        const ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n <= 0) break;
        response.append(buffer, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return response;
}

// GET http://127.0.0.1:port/path; the whole response ("" on error).
inline std::string HttpGet(int port, const std::string& path) {
  return HttpRaw(port, "GET " + path +
                           " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                           "close\r\n\r\n");
}

// POST `body` (JSON) to http://127.0.0.1:port/path; the whole response
// ("" on error).
inline std::string HttpPost(int port, const std::string& path,
                            const std::string& body) {
  return HttpRaw(port, "POST " + path +
                           " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: "
                           "close\r\nContent-Type: application/json\r\n"
                           "Content-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body);
}

// The body of an HTTP response (after the blank line).
inline std::string HttpBody(const std::string& response) {
  const size_t at = response.find("\r\n\r\n");
  return at == std::string::npos ? "" : response.substr(at + 4);
}

// A loopback TCP port free right now (0 on error), for a process that must
// know its address before it starts (and again when it restarts).
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

// A free loopback port other than `taken` (0 when none came up in 20
// tries): the same free port can come back twice (the first was closed),
// and gRPC binds with SO_REUSEPORT, so a second listener must not share it.
inline int FreeLoopbackPortOtherThan(int taken) {
  for (int i = 0; i < 20; ++i) {
    const int port = FreeLoopbackPort();
    if (port != 0 && port != taken) return port;
  }
  return 0;
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_LOOPBACK_H_
