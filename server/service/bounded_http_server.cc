#include "server/service/bounded_http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/x509.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"

namespace headroom {
namespace {

// httplib's accept loop hands each socket to a task queue; this one runs the
// hand-over inline, and process_and_close_socket returns at once.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// Waits until `fd` is ready for `events` (or hung up) before `deadline`.
bool Wait(int fd, short events, absl::Time deadline) {
  // Bounded by the deadline: each pass either returns or waits it down.
  for (int pass = 0; pass < 1000; ++pass) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) return false;
    pollfd entry{fd, events, 0};
    const int ready =
        ::poll(&entry, 1, static_cast<int>(std::min<int64_t>(ms, INT_MAX)));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
  return false;
}

// Handshakes `ssl` over the non-blocking `fd` before `deadline`.
bool Handshake(SSL* ssl, int fd, absl::Time deadline) {
  for (int pass = 0; pass < 1000; ++pass) {
    const int done = SSL_accept(ssl);
    if (done == 1) return true;
    const int error = SSL_get_error(ssl, done);
    if (error == SSL_ERROR_WANT_READ) {
      if (!Wait(fd, POLLIN, deadline)) return false;
    } else if (error == SSL_ERROR_WANT_WRITE) {
      if (!Wait(fd, POLLOUT, deadline)) return false;
    } else {
      return false;
    }
  }
  return false;
}

// The connection the calling thread serves (null off connection threads).
thread_local void* current_connection = nullptr;
// Set by CloseAfterAnswer for the request being answered.
thread_local bool close_after_answer = false;

// Closes our side for writing, then reads and drops what the peer still
// sends (a refused request's unread body) for a moment: closing a socket
// with unread bytes resets the connection, and the peer may then lose the
// answer it was sent.
void DrainBeforeClose(int fd) {
  ::shutdown(fd, SHUT_WR);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(250);
  char sink[16384];
  for (int i = 0; i < 64 && Wait(fd, POLLIN, deadline); ++i) {
    const ssize_t got = ::recv(fd, sink, sizeof(sink), 0);
    if (got <= 0 && !(got < 0 && (errno == EAGAIN || errno == EINTR))) break;
  }
}

int ClampToInt(size_t size) {
  return static_cast<int>(std::min<size_t>(size, INT_MAX));
}

}  // namespace

// One connection's bytes, plain or TLS over a non-blocking socket; every
// wait ends at the request's read or write deadline.
class BoundedHttpServer::Stream : public httplib::Stream {
 public:
  Stream(int fd, SSL* ssl, absl::Duration request_timeout)
      : fd_(fd), ssl_(ssl), request_timeout_(request_timeout) {}

  // A request has begun: it must arrive by `read_deadline`; `on_answer`
  // runs at its answer's first write.
  void BeginRequest(absl::Time read_deadline, std::function<void()> on_answer) {
    read_deadline_ = read_deadline;
    answering_ = false;
    on_answer_ = std::move(on_answer);
  }
  // Whether a byte (or the end) can be read before `deadline`.
  bool WaitReadable(absl::Time deadline) const {
    return Buffered() || Wait(fd_, POLLIN, deadline);
  }

  bool is_readable() const override { return WaitReadable(read_deadline_); }
  bool is_writable() const override {
    return Wait(fd_, POLLOUT,
                answering_ ? write_deadline_ : absl::Now() + request_timeout_);
  }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (begin_ == end_) {
      if (size >= sizeof(buffer_)) return Receive(ptr, size);
      const ssize_t got = Receive(buffer_, sizeof(buffer_));
      if (got <= 0) return got;
      begin_ = 0;
      end_ = static_cast<size_t>(got);
    }
    const size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!answering_) {
      answering_ = true;
      write_deadline_ = absl::Now() + request_timeout_;
      if (on_answer_) on_answer_();
    }
    for (int pass = 0; pass < 1000; ++pass) {
      if (ssl_ != nullptr) {
        const int sent = SSL_write(ssl_, ptr, ClampToInt(size));
        if (sent > 0) return sent;
        if (!WaitFor(SSL_get_error(ssl_, sent), write_deadline_)) {
          return Failed();
        }
      } else {
        const ssize_t sent = ::send(fd_, ptr, size, MSG_NOSIGNAL);
        if (sent >= 0) return sent;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (!Wait(fd_, POLLOUT, write_deadline_)) return Failed();
      }
    }
    return -1;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(false, ip, port);
  }
  socket_t socket() const override { return fd_; }

  // Whether a read or a write failed (past its deadline, or a TLS error):
  // the connection ends after this request (httplib may still answer 400).
  bool failed() const { return failed_; }

 private:
  // A read or write that cannot go on: the connection ends after this
  // request.
  ssize_t Failed() {
    failed_ = true;
    return -1;
  }

  bool Buffered() const {
    return begin_ < end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0);
  }

  // After an SSL call failed with `error`: waits for what it wants, false
  // when it cannot go on.
  bool WaitFor(int error, absl::Time deadline) const {
    if (error == SSL_ERROR_WANT_READ) return Wait(fd_, POLLIN, deadline);
    if (error == SSL_ERROR_WANT_WRITE) return Wait(fd_, POLLOUT, deadline);
    return false;
  }

  ssize_t Receive(char* to, size_t size) {
    for (int pass = 0; pass < 1000; ++pass) {
      if (ssl_ != nullptr) {
        const int got = SSL_read(ssl_, to, ClampToInt(size));
        if (got > 0) return got;
        const int error = SSL_get_error(ssl_, got);
        if (error == SSL_ERROR_ZERO_RETURN) return 0;
        if (!WaitFor(error, read_deadline_)) return Failed();
      } else {
        const ssize_t got = ::recv(fd_, to, size, 0);
        if (got >= 0) return got;
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (!Wait(fd_, POLLIN, read_deadline_)) return Failed();
      }
    }
    return -1;
  }

  void Address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    auto* raw = reinterpret_cast<sockaddr*>(&address);
    if ((peer ? ::getpeername(fd_, raw, &length)
              : ::getsockname(fd_, raw, &length)) != 0) {
      return;
    }
    char host[NI_MAXHOST];
    char service[NI_MAXSERV];
    if (::getnameinfo(raw, length, host, sizeof(host), service, sizeof(service),
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host;
      if (!absl::SimpleAtoi(service, &port)) port = -1;
    }
  }

  const int fd_;
  SSL* const ssl_;
  const absl::Duration request_timeout_;
  absl::Time read_deadline_ = absl::InfiniteFuture();
  absl::Time write_deadline_ = absl::InfiniteFuture();
  bool answering_ = false;
  bool failed_ = false;
  std::function<void()> on_answer_;
  char buffer_[16384];
  size_t begin_ = 0;
  size_t end_ = 0;
};

BoundedHttpServer::BoundedHttpServer(Limits limits, SSL_CTX* tls)
    : limits_(limits), tls_(tls) {
  new_task_queue = [] { return new InlineQueue(); };
}

BoundedHttpServer::~BoundedHttpServer() {
  CloseConnections();
  if (tls_ != nullptr) SSL_CTX_free(tls_);
}

int BoundedHttpServer::Bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host)
                              : (bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return -1;
  return ::listen(svr_sock_, 1024) == 0 ? bound : -1;
}

bool BoundedHttpServer::process_and_close_socket(socket_t sock) {
  Reap();
  const int flags = ::fcntl(sock, F_GETFL, 0);
  if (flags < 0 || ::fcntl(sock, F_SETFL, flags | O_NONBLOCK) != 0) {
    ::close(sock);
    return false;
  }
  // An answer is headers then a body, written apart: with Nagle's algorithm
  // the body's last partial segment waits for the peer's ACK of the first,
  // which a client that has nothing more to send delays (about 40 ms on
  // Linux; the extender's 30 KB prioritize answers took 48 ms instead of 6).
  // httplib leaves TCP_NODELAY off (CPPHTTPLIB_TCP_NODELAY false, and its
  // accept loop sets only timeouts on a new socket: httplib.h, Server::
  // listen_internal @ v0.11.4, 7992b148969fbf8093230b37a6a36c2f61135937).
  const int no_delay = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &no_delay, sizeof(no_delay));
  absl::MutexLock lock(&mu_);
  if (closing_) {
    ::close(sock);
    return false;
  }
  size_t live = 0;
  size_t threads = 0;
  // The one to close at the limit: waiting before reading, then the
  // longest waiting or reading; never one being answered.
  Connection* victim = nullptr;
  for (Connection& connection : connections_) {
    if (connection.phase == Phase::kDone) continue;
    ++threads;
    if (connection.evicted) continue;
    ++live;
    if (connection.phase == Phase::kAnswering) continue;
    const auto rank = [](const Connection& c) {
      return std::make_pair(c.phase != Phase::kWaiting, c.since);
    };
    if (victim == nullptr || rank(connection) < rank(*victim)) {
      victim = &connection;
    }
  }
  if (live >= limits_.max_connections) {
    // Closed connections end within moments; threads stay bounded anyway.
    if (victim == nullptr || threads >= 2 * limits_.max_connections) {
      ++refused_;
      ::close(sock);
      return false;
    }
    ::shutdown(victim->fd, SHUT_RDWR);
    victim->evicted = true;
    ++evicted_;
  }
  Connection& connection = connections_.emplace_back();
  connection.fd = sock;
  connection.since = absl::Now();
  connection.thread = std::thread([this, raw = &connection] { Serve(raw); });
  return true;
}

void BoundedHttpServer::Serve(Connection* connection) {
  // A peer gone mid-answer must not raise SIGPIPE in the process (OpenSSL
  // writes without MSG_NOSIGNAL); blocked here, it stays with this thread.
  sigset_t pipe;
  sigemptyset(&pipe);
  sigaddset(&pipe, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe, nullptr);

  current_connection = connection;
  const int fd = connection->fd;  // set before the thread started
  SSL* ssl = nullptr;
  bool ok = true;
  if (tls_ != nullptr) {
    ssl = SSL_new(tls_);
    ok = ssl != nullptr && SSL_set_fd(ssl, fd) == 1;
    if (ok) {
      SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE |
                            SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
      ok = Handshake(ssl, fd, absl::Now() + limits_.idle_timeout);
    }
  }
  if (ok) {
    Stream stream(fd, ssl, limits_.request_timeout);
    for (int served = 0; served < limits_.max_requests_per_connection;
         ++served) {
      SetPhase(connection, Phase::kWaiting);
      if (!stream.WaitReadable(absl::Now() + limits_.idle_timeout)) break;
      SetPhase(connection, Phase::kReading);
      stream.BeginRequest(
          absl::Now() + limits_.request_timeout,
          [this, connection] { SetPhase(connection, Phase::kAnswering); });
      close_after_answer = false;
      bool closed = false;
      const bool last = served + 1 == limits_.max_requests_per_connection;
      if (!process_request(
              stream, last, closed,
              [ssl](httplib::Request& request) { request.ssl = ssl; }) ||
          closed || close_after_answer || stream.failed()) {
        break;
      }
    }
  }
  if (ssl != nullptr) {
    if (ok) SSL_shutdown(ssl);
    SSL_free(ssl);
  }
  if (close_after_answer) DrainBeforeClose(fd);
  absl::MutexLock lock(&mu_);
  // Closed under the lock: an eviction never shuts a reused descriptor.
  ::close(fd);
  connection->phase = Phase::kDone;
}

void BoundedHttpServer::SetPhase(Connection* connection, Phase phase) {
  absl::MutexLock lock(&mu_);
  connection->phase = phase;
  connection->since = absl::Now();
}

httplib::Server::Handler BoundedHttpServer::Answering(Handler handler) {
  return [this, handler = std::move(handler)](const httplib::Request& request,
                                              httplib::Response& response) {
    if (current_connection != nullptr) {
      SetPhase(static_cast<Connection*>(current_connection), Phase::kAnswering);
    }
    handler(request, response);
  };
}

BoundedHttpServer& BoundedHttpServer::Get(const std::string& pattern,
                                          Handler handler) {
  httplib::Server::Get(pattern, Answering(std::move(handler)));
  return *this;
}

BoundedHttpServer& BoundedHttpServer::Post(const std::string& pattern,
                                           Handler handler) {
  httplib::Server::Post(pattern, Answering(std::move(handler)));
  return *this;
}

void BoundedHttpServer::Reap() {
  std::vector<std::thread> finished;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (it->phase != Phase::kDone) {
        ++it;
        continue;
      }
      finished.push_back(std::move(it->thread));
      it = connections_.erase(it);
    }
  }
  for (std::thread& thread : finished) thread.join();
}

void BoundedHttpServer::CloseConnections() {
  {
    absl::MutexLock lock(&mu_);
    closing_ = true;
    for (Connection& connection : connections_) {
      if (connection.phase != Phase::kDone) {
        ::shutdown(connection.fd, SHUT_RDWR);
      }
    }
    // A connection in a handler ends when the handler returns.
    mu_.Await(absl::Condition(
        +[](std::list<Connection>* all) {
          return std::all_of(all->begin(), all->end(), [](const auto& c) {
            return c.phase == Phase::kDone;
          });
        },
        &connections_));
  }
  Reap();
}

void BoundedHttpServer::CloseAfterAnswer() { close_after_answer = true; }

std::optional<std::string> BoundedHttpServer::VerifiedClient(
    const httplib::Request& request) {
  if (request.ssl == nullptr ||
      SSL_get_verify_result(request.ssl) != X509_V_OK) {
    return std::nullopt;
  }
  X509* certificate = SSL_get1_peer_certificate(request.ssl);
  if (certificate == nullptr) return std::nullopt;
  char name[256];
  const int length = X509_NAME_get_text_by_NID(
      X509_get_subject_name(certificate), NID_commonName, name, sizeof(name));
  X509_free(certificate);
  if (length <= 0) return std::nullopt;
  return std::string(name, static_cast<size_t>(length));
}

BoundedHttpServer::Counts BoundedHttpServer::counts() const {
  absl::MutexLock lock(&mu_);
  Counts counts;
  for (const Connection& connection : connections_) {
    if (connection.phase != Phase::kDone) ++counts.open;
  }
  counts.evicted = evicted_;
  counts.refused = refused_;
  return counts;
}

}  // namespace headroom
