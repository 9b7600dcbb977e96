#ifndef HEADROOM_SERVER_SERVICE_HTTP_SERVER_H_
#define HEADROOM_SERVER_SERVICE_HTTP_SERVER_H_

// One small HTTP server (CivetWeb) for /metrics (Prometheus text format over
// the registry), /healthz and /calibration (HTML).

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/registry.h"

struct mg_context;

namespace headroom {

class HttpServer {
 public:
  // Returns true while the planner should be reported healthy.
  using HealthCheck = std::function<bool()>;
  // Renders an HTML page on request.
  using PageRenderer = std::function<std::string()>;

  // Starts listening on `host:port` ("127.0.0.1:0" picks a free port).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::string& listen, std::shared_ptr<prometheus::Registry> registry,
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
  // kMaxPostBytes get 413). Call before requests arrive; `handler` runs on
  // the server's threads and must not block for long.
  void HandlePost(const std::string& path, PostHandler handler);
  static constexpr size_t kMaxPostBytes = 64 << 20;
  // {"Error": message} as JSON (quotes and backslashes escaped, control
  // characters dropped): the body of a refused POST.
  static std::string ErrorBody(const std::string& message);

  // For the C callback: the handler of a registered path.
  const PostHandler* PostHandlerFor(const std::string& path) const;

  // Handlers; public for the C callbacks.
  std::string MetricsText() const;
  bool Healthy() const { return health_(); }
  std::string CalibrationPage() const { return calibration_page_(); }

 private:
  HttpServer(std::shared_ptr<prometheus::Registry> registry, HealthCheck health,
             PageRenderer calibration_page)
      : registry_(std::move(registry)),
        health_(std::move(health)),
        calibration_page_(std::move(calibration_page)) {}

  std::shared_ptr<prometheus::Registry> registry_;
  HealthCheck health_;
  PageRenderer calibration_page_;
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::map<std::string, PostHandler> post_handlers_;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_HTTP_SERVER_H_
