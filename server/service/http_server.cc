#include "server/service/http_server.h"

#include <civetweb.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace headroom {
namespace {

void Reply(mg_connection* conn, int code, const char* content_type,
           const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            code, code == 200 ? "OK" : "Service Unavailable", content_type,
            body.size());
  mg_write(conn, body.data(), body.size());
}

int MetricsHandler(mg_connection* conn, void* data) {
  const auto* server = static_cast<const HttpServer*>(data);
  Reply(conn, 200, "text/plain; version=0.0.4; charset=utf-8",
        server->MetricsText());
  return 200;
}

int HealthHandler(mg_connection* conn, void* data) {
  const auto* server = static_cast<const HttpServer*>(data);
  const bool healthy = server->Healthy();
  Reply(conn, healthy ? 200 : 503, "text/plain; charset=utf-8",
        healthy ? "ok\n" : "not serving\n");
  return healthy ? 200 : 503;
}

int CalibrationHandler(mg_connection* conn, void* data) {
  const auto* server = static_cast<const HttpServer*>(data);
  Reply(conn, 200, "text/html; charset=utf-8", server->CalibrationPage());
  return 200;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, std::shared_ptr<prometheus::Registry> registry,
    HealthCheck health, PageRenderer calibration_page) {
  std::unique_ptr<HttpServer> server(new HttpServer(
      std::move(registry), std::move(health), std::move(calibration_page)));
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads",
                           "2", nullptr};
  mg_callbacks callbacks{};
  server->context_ = mg_start(&callbacks, nullptr, options);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", listen,
                     " (address in use or not local?)"));
  }
  mg_set_request_handler(server->context_, "/metrics", MetricsHandler,
                         server.get());
  mg_set_request_handler(server->context_, "/healthz", HealthHandler,
                         server.get());
  mg_set_request_handler(server->context_, "/calibration", CalibrationHandler,
                         server.get());
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->context_, 4, ports);
  if (n > 0) server->port_ = ports[0].port;
  return server;
}

HttpServer::~HttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

std::string HttpServer::MetricsText() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_->Collect());
}

}  // namespace headroom
