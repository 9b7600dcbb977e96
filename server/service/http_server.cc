#include "server/service/http_server.h"

#include <civetweb.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace headroom {
namespace {

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 413:
      return "Payload Too Large";
    default:
      return "Service Unavailable";
  }
}

void Reply(mg_connection* conn, int code, const char* content_type,
           const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            code, Reason(code), content_type, body.size());
  mg_write(conn, body.data(), body.size());
}

int PostRoute(mg_connection* conn, void* data) {
  const auto* server = static_cast<const HttpServer*>(data);
  const mg_request_info* request = mg_get_request_info(conn);
  const HttpServer::PostHandler* handler =
      server->PostHandlerFor(request->local_uri);
  if (handler == nullptr) {
    Reply(conn, 404, "application/json", HttpServer::ErrorBody("no such path"));
    return 404;
  }
  if (std::string(request->request_method) != "POST") {
    Reply(conn, 405, "application/json", HttpServer::ErrorBody("use POST"));
    return 405;
  }
  if (request->content_length < 0 ||
      static_cast<uint64_t>(request->content_length) >
          HttpServer::kMaxPostBytes) {
    Reply(conn, 413, "application/json",
          HttpServer::ErrorBody(
              absl::StrCat("the body must have a Content-Length of at "
                           "most ",
                           HttpServer::kMaxPostBytes, " bytes")));
    return 413;
  }
  std::string body(static_cast<size_t>(request->content_length), '\0');
  size_t read = 0;
  while (read < body.size()) {
    const int n = mg_read(conn, body.data() + read, body.size() - read);
    if (n <= 0) break;
    read += static_cast<size_t>(n);
  }
  body.resize(read);
  const HttpServer::Answer answer = (*handler)(body);
  Reply(conn, answer.status, "application/json", answer.body);
  return answer.status;
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
  // Four threads: scrapes, health checks and the scheduler extender's
  // calls (which answer within their budget) do not queue behind one
  // another.
  const char* options[] = {"listening_ports", listen.c_str(), "num_threads",
                           "4", nullptr};
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

std::string HttpServer::ErrorBody(const std::string& message) {
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    escaped += c;
  }
  return "{\"Error\":\"" + escaped + "\"}";
}

void HttpServer::HandlePost(const std::string& path, PostHandler handler) {
  post_handlers_[path] = std::move(handler);
  mg_set_request_handler(context_, path.c_str(), PostRoute, this);
}

const HttpServer::PostHandler* HttpServer::PostHandlerFor(
    const std::string& path) const {
  auto it = post_handlers_.find(path);
  return it == post_handlers_.end() ? nullptr : &it->second;
}

HttpServer::~HttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

std::string HttpServer::MetricsText() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(registry_->Collect());
}

}  // namespace headroom
