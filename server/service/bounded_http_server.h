#ifndef HEADROOM_SERVER_SERVICE_BOUNDED_HTTP_SERVER_H_
#define HEADROOM_SERVER_SERVICE_BOUNDED_HTTP_SERVER_H_

// A cpp-httplib server that owns its connections, so that no number of idle
// or slow clients can keep it from answering. httplib's accept loop hands
// each accepted socket to this server at once (it never waits on a client);
// each connection then runs on a thread of its own, at most max_connections
// at a time, and every wait on the client has a deadline:
//   - a new connection (its TLS handshake included) and a kept-alive one
//     waiting for its next request get idle_timeout;
//   - a request's headers and body must all arrive within request_timeout
//     of its first byte, and its answer must be written within
//     request_timeout of its first byte written (a trickling client is cut
//     there, however often it sends a byte).
// At the limit a new connection closes the connection that has waited
// longest for a request (idle, or still handshaking or sending one); when
// every connection is being answered, the new one is closed at once.
//
// TLS (an SSL_CTX given at construction) is done here too, on the
// connection's thread, and a handler can ask whether its request came with a
// client certificate the context verified (VerifiedClient).

#include <httplib.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace headroom {

class BoundedHttpServer : public httplib::Server {
 public:
  struct Limits {
    // Connections served at once; more displace idle ones or are closed.
    size_t max_connections = 256;
    // Longest a connection may wait for its first (or next) request, and
    // longest a TLS handshake may take.
    absl::Duration idle_timeout = absl::Seconds(2);
    // Longest a request may take to arrive from its first byte, and its
    // answer to be written from its first byte.
    absl::Duration request_timeout = absl::Seconds(10);
    // Requests served on one kept-alive connection before it is closed.
    int max_requests_per_connection = 100;
  };

  // `tls` null serves plain HTTP; otherwise the server takes ownership of
  // the context and handshakes every connection with it.
  BoundedHttpServer(Limits limits, SSL_CTX* tls);
  // Closes every connection and waits for their threads (CloseConnections).
  ~BoundedHttpServer() override;
  BoundedHttpServer(const BoundedHttpServer&) = delete;
  BoundedHttpServer& operator=(const BoundedHttpServer&) = delete;

  bool is_valid() const override { return true; }

  // As httplib's Get and Post (which they hide), and from the moment
  // `handler` starts, its connection counts as being answered: a new
  // connection never displaces it.
  BoundedHttpServer& Get(const std::string& pattern, Handler handler);
  BoundedHttpServer& Post(const std::string& pattern, Handler handler);

  // Binds `host:port` (port 0: any free port) and listens with a backlog
  // of 1024 (httplib's is 5: a burst of connections would wait for SYN
  // retransmits). The port bound, or -1.
  int Bind(const std::string& host, int port);

  // Shuts every open connection down and waits for their threads. Call it
  // after stop() has ended the accept loop (no new connection comes).
  void CloseConnections();

  // The subject common name of the client certificate `request`'s TLS
  // connection presented and the server's context verified; nullopt for
  // plain HTTP, no certificate, or a certificate without a common name.
  static std::optional<std::string> VerifiedClient(
      const httplib::Request& request);

  // From a handler: closes the connection once this answer is written (a
  // request refused before its body was read leaves that body unread).
  static void CloseAfterAnswer();

  struct Counts {
    size_t open = 0;       // connections being served now
    uint64_t evicted = 0;  // closed to make room for a new one
    uint64_t refused = 0;  // closed at once (every slot answering)
  };
  Counts counts() const;

 private:
  enum class Phase { kWaiting, kReading, kAnswering, kDone };
  struct Connection {
    int fd = -1;
    Phase phase = Phase::kWaiting;
    absl::Time since;
    bool evicted = false;
    std::thread thread;
  };
  class Stream;

  // Called by httplib's accept loop (through the inline task queue) with
  // each accepted socket: admits it (closing another or it at the limit)
  // and starts its thread. Never blocks on the client.
  bool process_and_close_socket(socket_t sock) override;
  // The connection's thread: handshake, then requests until idle, closed,
  // or max_requests_per_connection.
  void Serve(Connection* connection);
  void SetPhase(Connection* connection, Phase phase);
  // `handler`, marking the calling connection as being answered first.
  Handler Answering(Handler handler);
  // Joins the threads of finished connections.
  void Reap();

  const Limits limits_;
  SSL_CTX* const tls_;
  mutable absl::Mutex mu_;
  std::list<Connection> connections_ ABSL_GUARDED_BY(mu_);
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_BOUNDED_HTTP_SERVER_H_
