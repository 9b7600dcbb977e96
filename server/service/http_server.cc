#include "server/service/http_server.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "prometheus/text_serializer.h"

namespace headroom {
namespace {

// "host:port" or "[v6]:port" into host and port.
bool SplitListen(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  absl::string_view h(listen.data(), colon);
  if (absl::ConsumePrefix(&h, "[") && !absl::ConsumeSuffix(&h, "]")) {
    return false;
  }
  *host = std::string(h);
  return absl::SimpleAtoi(absl::string_view(listen).substr(colon + 1), port) &&
         *port >= 0 && *port <= 65535;
}

}  // namespace

HttpServer::HttpServer(std::shared_ptr<const prometheus::Collectable> metrics,
                       HealthCheck health, PageRenderer calibration_page)
    : metrics_(std::move(metrics)),
      health_(std::move(health)),
      calibration_page_(std::move(calibration_page)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, Tls tls,
    std::shared_ptr<const prometheus::Collectable> metrics, HealthCheck health,
    PageRenderer calibration_page) {
  std::string host;
  int port = 0;
  if (!SplitListen(listen, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address ", listen.substr(0, 200),
                     " is not HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464)"));
  }
  std::unique_ptr<HttpServer> server(new HttpServer(
      std::move(metrics), std::move(health), std::move(calibration_page)));
  const bool https = !tls.cert.empty();
  if (https) {
    auto ssl =
        std::make_unique<httplib::SSLServer>(tls.cert.c_str(), tls.key.c_str());
    if (!ssl->is_valid()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_cert = ", tls.cert, ", --tls_key = ", tls.key,
          ": cannot load them as a PEM certificate chain and its key"));
    }
    server->server_ = std::move(ssl);
  } else {
    server->server_ = std::make_unique<httplib::Server>();
  }
  // Four threads: scrapes, health checks and the scheduler extender's
  // calls (which answer within their budget) do not queue behind one
  // another.
  server->server_->new_task_queue = [] { return new httplib::ThreadPool(4); };
  server->server_->set_payload_max_length(kMaxPostBytes);
  server->server_->set_read_timeout(10, 0);
  server->server_->set_write_timeout(10, 0);
  server->Route();
  const int bound =
      port == 0 ? server->server_->bind_to_any_port(host)
                : (server->server_->bind_to_port(host, port) ? port : -1);
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP", https ? "S" : "", " on ", listen,
                     " (address in use or not local?)"));
  }
  server->port_ = bound;
  server->listener_ = std::thread(
      [raw = server->server_.get(), done = &server->listener_done_] {
        raw->listen_after_bind();
        done->store(true);
      });
  // Bound and listening already: connections queue until the first accept.
  return server;
}

void HttpServer::Route() {
  server_->Get("/metrics",
               [this](const httplib::Request&, httplib::Response& response) {
                 response.set_content(
                     MetricsText(), "text/plain; version=0.0.4; charset=utf-8");
               });
  server_->Get("/healthz",
               [this](const httplib::Request&, httplib::Response& response) {
                 const bool healthy = health_();
                 response.status = healthy ? 200 : 503;
                 response.set_content(healthy ? "ok\n" : "not serving\n",
                                      "text/plain; charset=utf-8");
               });
  server_->Get("/calibration", [this](const httplib::Request& request,
                                      httplib::Response& response) {
    Query query;
    for (const auto& [key, value] : request.params) query.emplace(key, value);
    response.set_content(calibration_page_(query), "text/html; charset=utf-8");
  });
  server_->Post(".*", [this](const httplib::Request& request,
                             httplib::Response& response) {
    const std::shared_ptr<const PostHandler> handler =
        PostHandlerFor(request.path);
    if (handler == nullptr) {
      response.status = 404;
      response.set_content(ErrorBody("no such path"), "application/json");
      return;
    }
    const Answer answer = (*handler)(request.body);
    response.status = answer.status;
    response.set_content(answer.body, "application/json");
  });
  // A GET of a POST route says so; anything else is not here.
  server_->Get(".*", [this](const httplib::Request& request,
                            httplib::Response& response) {
    if (const std::shared_ptr<const PageRenderer> page = PageFor(request.path);
        page != nullptr) {
      Query query;
      for (const auto& [key, value] : request.params) query.emplace(key, value);
      response.set_content((*page)(query), "text/html; charset=utf-8");
      return;
    }
    const bool post = PostHandlerFor(request.path) != nullptr;
    response.status = post ? 405 : 404;
    response.set_content(ErrorBody(post ? "use POST" : "no such path"),
                         "application/json");
  });
  // A body over the limit is refused from its headers, before it is read.
  server_->set_pre_routing_handler([](const httplib::Request& request,
                                      httplib::Response& response) {
    const std::string length = request.get_header_value("Content-Length");
    uint64_t bytes = 0;
    if (length.empty() || !absl::SimpleAtoi(length, &bytes) ||
        bytes <= kMaxPostBytes) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    response.status = 413;
    response.set_header("Connection", "close");
    response.set_content(ErrorBody(absl::StrCat(
                             "the body must have a Content-Length of at most ",
                             kMaxPostBytes, " bytes")),
                         "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  server_->set_error_handler([](const httplib::Request&,
                                httplib::Response& response) {
    if (response.status == 413) {
      response.set_content(ErrorBody(absl::StrCat("the body must be at most ",
                                                  kMaxPostBytes, " bytes")),
                           "application/json");
    }
  });
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
  absl::MutexLock lock(&mu_);
  post_handlers_[path] =
      std::make_shared<const PostHandler>(std::move(handler));
}

void HttpServer::HandlePage(const std::string& path, PageRenderer renderer) {
  absl::MutexLock lock(&mu_);
  pages_[path] = std::make_shared<const PageRenderer>(std::move(renderer));
}

std::shared_ptr<const HttpServer::PageRenderer> HttpServer::PageFor(
    const std::string& path) const {
  absl::MutexLock lock(&mu_);
  auto it = pages_.find(path);
  return it == pages_.end() ? nullptr : it->second;
}

std::shared_ptr<const HttpServer::PostHandler> HttpServer::PostHandlerFor(
    const std::string& path) const {
  absl::MutexLock lock(&mu_);
  auto it = post_handlers_.find(path);
  return it == post_handlers_.end() ? nullptr : it->second;
}

HttpServer::~HttpServer() {
  if (server_ != nullptr) {
    // httplib's stop() does nothing until listen_after_bind has marked the
    // server running (cpp-httplib #1645): a server destroyed right after
    // Start would leave its listener in accept() for ever. Wait for that
    // mark, or for the listener to have ended by itself.
    while (listener_.joinable() && !server_->is_running() &&
           !listener_done_.load()) {
      std::this_thread::yield();
    }
    server_->stop();
  }
  if (listener_.joinable()) listener_.join();
}

std::string HttpServer::MetricsText() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(metrics_->Collect());
}

}  // namespace headroom
