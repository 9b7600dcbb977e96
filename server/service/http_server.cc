#include "server/service/http_server.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "pages/energy_plot.h"
#include "prometheus/text_serializer.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// A rendered page, or its error as a short HTML page with the status the
// error's code means (PageRenderer).
void AnswerPage(const absl::StatusOr<std::string>& page,
                httplib::Response& response) {
  if (page.ok()) {
    response.set_content(*page, "text/html; charset=utf-8");
    return;
  }
  const absl::StatusCode code = page.status().code();
  response.status = code == absl::StatusCode::kInvalidArgument ? 400
                    : code == absl::StatusCode::kNotFound      ? 404
                                                               : 500;
  response.set_content(
      absl::StrCat("<!doctype html><html><body><p>",
                   EscapeHtml(std::string(page.status().message())),
                   "</p></body></html>\n"),
      "text/html; charset=utf-8");
}

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

struct FreeContext {
  void operator()(SSL_CTX* context) const { SSL_CTX_free(context); }
};

// The server side of TLS: the planner's pair and, with a client CA, client
// certificates asked for but not required (so that /healthz answers
// without one; Admit refuses the other routes) and verified when sent.
absl::StatusOr<SSL_CTX*> TlsContext(const HttpServer::Tls& tls) {
  std::unique_ptr<SSL_CTX, FreeContext> context(
      SSL_CTX_new(TLS_server_method()));
  if (context == nullptr) {
    return absl::InternalError("cannot make an OpenSSL context for HTTPS");
  }
  SSL_CTX_set_min_proto_version(context.get(), TLS1_2_VERSION);
  SSL_CTX_set_options(context.get(),
                      SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(context.get(), tls.cert.c_str()) !=
          1 ||
      SSL_CTX_use_PrivateKey_file(context.get(), tls.key.c_str(),
                                  SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_check_private_key(context.get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert = ", tls.cert, ", --tls_key = ", tls.key,
        ": cannot load them as a PEM certificate chain and its key"));
  }
  if (!tls.client_ca.empty()) {
    if (SSL_CTX_load_verify_locations(context.get(), tls.client_ca.c_str(),
                                      nullptr) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("--tls_client_ca = ", tls.client_ca,
                       ": cannot load it as PEM CA certificates"));
    }
    if (STACK_OF(X509_NAME)* names =
            SSL_load_client_CA_file(tls.client_ca.c_str());
        names != nullptr) {
      SSL_CTX_set_client_CA_list(context.get(), names);
    }
    SSL_CTX_set_verify(context.get(), SSL_VERIFY_PEER, nullptr);
  }
  ERR_clear_error();
  return context.release();
}

}  // namespace

HttpServer::HttpServer(Options options,
                       std::shared_ptr<const prometheus::Collectable> metrics,
                       HealthCheck health, PageRenderer calibration_page)
    : options_(std::move(options)),
      metrics_(std::move(metrics)),
      health_(std::move(health)),
      calibration_page_(std::move(calibration_page)) {}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::string& listen, Options options,
    std::shared_ptr<const prometheus::Collectable> metrics, HealthCheck health,
    PageRenderer calibration_page) {
  std::string host;
  int port = 0;
  if (!SplitListen(listen, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("HTTP listen address ", listen.substr(0, 200),
                     " is not HOST:PORT (e.g. 127.0.0.1:9464, [::1]:9464)"));
  }
  const bool https = !options.tls.cert.empty();
  SSL_CTX* context = nullptr;
  if (https) {
    absl::StatusOr<SSL_CTX*> made = TlsContext(options.tls);
    if (!made.ok()) return made.status();
    context = *made;
  }
  const BoundedHttpServer::Limits limits = options.limits;
  std::unique_ptr<HttpServer> server(
      new HttpServer(std::move(options), std::move(metrics), std::move(health),
                     std::move(calibration_page)));
  // Each connection on a thread of its own, within the limits; the accept
  // loop never waits on a client.
  server->server_ = std::make_unique<BoundedHttpServer>(limits, context);
  server->server_->set_payload_max_length(kMaxPostBytes);
  server->Route();
  const int bound = server->server_->Bind(host, port);
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
  server_->Get("/",
               [this](const httplib::Request&, httplib::Response& response) {
                 response.set_content(IndexHtml(), "text/html; charset=utf-8");
               });
  server_->Get("/calibration", [this](const httplib::Request& request,
                                      httplib::Response& response) {
    Query query;
    for (const auto& [key, value] : request.params) query.emplace(key, value);
    AnswerPage(calibration_page_(query), response);
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
      AnswerPage((*page)(query), response);
      return;
    }
    const bool post = PostHandlerFor(request.path) != nullptr;
    response.status = post ? 405 : 404;
    response.set_content(ErrorBody(post ? "use POST" : "no such path"),
                         "application/json");
  });
  // A caller without what the route needs, and a body over the limit, are
  // refused from the headers, before the body is read.
  server_->set_pre_routing_handler([this](const httplib::Request& request,
                                          httplib::Response& response) {
    if (const absl::Status allowed = Admit(request); !allowed.ok()) {
      const bool denied = allowed.code() == absl::StatusCode::kPermissionDenied;
      response.status = denied ? 403 : 401;
      if (!denied) {
        response.set_header("WWW-Authenticate", "Bearer realm=\"headroom\"");
      }
      response.set_header("Connection", "close");
      BoundedHttpServer::CloseAfterAnswer();
      response.set_content(ErrorBody(std::string(allowed.message())),
                           "application/json");
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string length = request.get_header_value("Content-Length");
    uint64_t bytes = 0;
    if (length.empty() || !absl::SimpleAtoi(length, &bytes) ||
        bytes <= kMaxPostBytes) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    response.status = 413;
    response.set_header("Connection", "close");
    BoundedHttpServer::CloseAfterAnswer();
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

absl::Status HttpServer::Admit(const httplib::Request& request) const {
  if (options_.access == nullptr) return absl::OkStatus();
  const bool known = request.path == "/healthz" || request.path == "/metrics" ||
                     request.path == "/" || request.path == "/calibration" ||
                     PageFor(request.path) != nullptr ||
                     PostHandlerFor(request.path) != nullptr;
  const std::string route = known ? request.path : "this path";
  const Need need = request.path == "/healthz" || (request.path == "/metrics" &&
                                                   options_.metrics_open)
                        ? Need::kAnyone
                        : Need::kRead;
  const Caller caller = options_.access->IdentifyHttp(
      request.get_header_value("Authorization"),
      BoundedHttpServer::VerifiedClient(request),
      absl::StrCat(request.remote_addr, ":", request.remote_port));
  absl::Status allowed = options_.access->AllowHttp(caller, route, need);
  if (!allowed.ok()) {
    // Rate-limited as the gRPC refusals are, per outcome, route and caller.
    const std::string method =
        absl::StrCat("HTTP ", request.method.substr(0, 16), " ",
                     known ? request.path.substr(0, 128) : "(other)");
    const std::string outcome = absl::StatusCodeToString(allowed.code());
    int64_t suppressed = 0;
    if (!options_.access->AdmitRefusalLine(
            absl::StrCat(outcome, " ", method, " ",
                         caller.Name().substr(0, 128)),
            &suppressed)) {
      return allowed;
    }
    if (suppressed > 0) {
      spdlog::warn(
          "event=log_suppressed kind=audit method=\"{}\" identity={} "
          "outcome={} count={} message=\"suppressed {} similar\"",
          method, caller.Name(), outcome, suppressed, suppressed);
    }
    spdlog::warn(
        "event=audit method=\"{}\" identity={} peer={} outcome={} "
        "message=\"{}\"",
        method, caller.Name(), caller.peer, outcome,
        std::string(allowed.message()));
  }
  return allowed;
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
  // Before the routes' state goes: a connection may be in a handler.
  if (server_ != nullptr) server_->CloseConnections();
}

std::string HttpServer::IndexHtml() const {
  std::vector<std::pair<std::string, std::string>> links = {
      {"/calibration",
       "calibration: the factor set's predictions against "
       "measured runs"}};
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [path, renderer] : pages_) links.emplace_back(path, "");
  }
  links.emplace_back("/metrics", "Prometheus metrics");
  links.emplace_back("/healthz", "health: ok while serving");
  std::string html =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>Headroom "
      "planner</title></head><body style=\"font-family:sans-serif\">"
      "<h1>Headroom planner</h1><ul>\n";
  for (const auto& [path, what] : links) {
    absl::StrAppend(&html, "<li><a href=\"", path, "\">", path, "</a>",
                    what.empty() ? "" : absl::StrCat(": ", what), "</li>\n");
  }
  absl::StrAppend(&html,
                  "</ul><p>Questions are asked over gRPC: headroom --help."
                  "</p></body></html>\n");
  return html;
}

std::string HttpServer::MetricsText() const {
  prometheus::TextSerializer serializer;
  return serializer.Serialize(metrics_->Collect());
}

}  // namespace headroom
