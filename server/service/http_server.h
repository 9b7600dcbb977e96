#ifndef HEADROOM_SERVER_SERVICE_HTTP_SERVER_H_
#define HEADROOM_SERVER_SERVICE_HTTP_SERVER_H_

// One small HTTP(S) server (cpp-httplib) for / (an index of the pages),
// /metrics (Prometheus text format over the metrics' families), /healthz,
// /calibration (HTML), pages added with HandlePage (/energy) and the POST
// routes of the scheduler extender.
//
// It is no weaker than the gRPC port: /healthz answers anyone; every other
// route needs what a gRPC read needs (Access::AllowHttp: a client
// certificate where the planner requires them, a bearer token in
// `Authorization: Bearer <token>` where reads need one), /metrics unless
// metrics_open. Connections are bounded (BoundedHttpServer): idle or slow
// clients never keep it from answering.

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/collectable.h"
#include "server/service/access.h"
#include "server/service/bounded_http_server.h"

namespace headroom {

class HttpServer {
 public:
  // Returns true while the planner should be reported healthy.
  using HealthCheck = std::function<bool()>;
  // A request's query parameters (the first value of each).
  using Query = std::map<std::string, std::string>;
  // Renders an HTML page on request, given its query; INVALID_ARGUMENT (a
  // query value the page does not know, named with the allowed ones) is
  // answered 400, NOT_FOUND 404, any other error 500, with the message.
  using PageRenderer =
      std::function<absl::StatusOr<std::string>(const Query& query)>;

  // HTTPS: the certificate (chain) and key PEM files; both empty serves
  // plain HTTP. With client_ca (PEM) a client certificate is asked for and,
  // when sent, must be signed by it; routes other than /healthz then refuse
  // a request without one.
  struct Tls {
    std::string cert;
    std::string key;
    std::string client_ca;
  };
  struct Options {
    Tls tls;
    // Who may read what; null lets everyone read everything (tests).
    std::shared_ptr<const Access> access;
    // /metrics answers anyone, as /healthz does; otherwise it needs what
    // reads need.
    bool metrics_open = false;
    BoundedHttpServer::Limits limits;
  };

  // Starts listening on `host:port` ("127.0.0.1:0" picks a free port).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, Options options,
      std::shared_ptr<const prometheus::Collectable> metrics,
      HealthCheck health, PageRenderer calibration_page);

  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The port actually bound.
  int port() const { return port_; }

  // An answer to a POST: status code, JSON body.
  struct Answer {
    int status = 200;
    std::string body;
  };
  using PostHandler = std::function<Answer(const std::string& body)>;
  // Serves POST `path` with `handler` (other methods get 405; bodies over
  // kMaxPostBytes get 413). `handler` runs on the server's threads and must
  // not block for long.
  void HandlePost(const std::string& path, PostHandler handler);
  static constexpr size_t kMaxPostBytes = 64 << 20;
  // Serves GET `path` with the HTML `renderer` returns for its query.
  // `renderer` runs on the server's threads.
  void HandlePage(const std::string& path, PageRenderer renderer);
  // {"Error": message} as JSON (quotes and backslashes escaped, control
  // characters dropped): the body of a refused POST.
  static std::string ErrorBody(const std::string& message);

  // The Prometheus text of the metrics' families.
  std::string MetricsText() const;

  // The connections being served, displaced and refused so far.
  BoundedHttpServer::Counts connection_counts() const {
    return server_->counts();
  }

 private:
  HttpServer(Options options,
             std::shared_ptr<const prometheus::Collectable> metrics,
             HealthCheck health, PageRenderer calibration_page);

  // The POST handler of `path`, or null.
  std::shared_ptr<const PostHandler> PostHandlerFor(
      const std::string& path) const;
  // The page renderer of `path`, or null.
  std::shared_ptr<const PageRenderer> PageFor(const std::string& path) const;
  // /: links to the pages, /metrics and /healthz.
  std::string IndexHtml() const;
  void Route();
  // OK, or why `request` may not have its route (logged as an audit line).
  absl::Status Admit(const httplib::Request& request) const;

  Options options_;
  std::shared_ptr<const prometheus::Collectable> metrics_;
  HealthCheck health_;
  PageRenderer calibration_page_;
  std::unique_ptr<BoundedHttpServer> server_;
  std::thread listener_;
  // Set when the listener's listen_after_bind has returned.
  std::atomic<bool> listener_done_{false};
  int port_ = 0;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<const PostHandler>> post_handlers_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<const PageRenderer>> pages_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_HTTP_SERVER_H_
