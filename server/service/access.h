#ifndef HEADROOM_SERVER_SERVICE_ACCESS_H_
#define HEADROOM_SERVER_SERVICE_ACCESS_H_

// Who may call what. A caller is known by its client certificate (mTLS) and
// by its bearer token (`authorization: Bearer <token>`), checked against the
// tokens file; every method needs a role (reader, operator, admin). Every
// handler asks `Check` first, and the audit interceptor logs each mutating
// call and each refusal with the caller, the peer and the outcome.
//
// Modes: with neither TLS nor a tokens file the planner is open (it listens
// on loopback only, see PlannerApp) and every caller is admin. With a tokens
// file, a call needs a token of the method's role (reads are open unless
// require_token_for_reads). With TLS but no tokens file, every mutating call
// is refused; a worker with a verified client certificate may still connect.

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/server_callback.h"
#include "grpcpp/support/server_interceptor.h"
#include "server/service/rate_limit.h"

namespace grpc {
class ServerContextBase;
}  // namespace grpc

namespace headroom {

// Ordered: a role may do what every role below it may.
enum class Role { kReader = 1, kOperator = 2, kAdmin = 3 };
absl::string_view RoleName(Role role);

// What a method needs. kWorker is Fleet.Connect: a verified client
// certificate, or a token of role operator or above.
enum class Need { kAnyone, kRead, kOperator, kAdmin, kWorker };
// The need of a full method name ("/headroom.v1.Calibration/Refit"); a method
// this table does not know needs admin (fail closed).
Need NeedOf(absl::string_view method);
// Whether calls to `method` change stored state (they are audited).
bool Mutates(absl::string_view method);

struct TokenEntry {
  std::string name;
  Role role;
};
// The tokens file: one line per token, `NAME ROLE SHA256HEX` (the hex
// SHA-256 of the token), blank lines and `#` comments allowed. Errors name
// `source`, the line and what is wrong. Keyed by the lower-case hex digest.
absl::StatusOr<std::map<std::string, TokenEntry>> ParseTokens(
    absl::string_view text, absl::string_view source);

// Who is calling. `identity` is "cert:<subject CN>" for a verified client
// certificate, else "token:<name>" for a known token, else "" (anonymous).
struct Caller {
  std::string identity;
  std::string peer;
  bool has_certificate = false;
  std::optional<Role> token_role;  // set for a known token
  std::string token_name;          // its name in the tokens file
  bool presented_unknown_token = false;
  // For logs: the identity and the token's name ("cert:w1 token:ops"), or
  // "anonymous".
  std::string Name() const;
};

class Access {
 public:
  struct Options {
    std::string tokens_file;  // empty: no tokens
    bool require_token_for_reads = false;
    bool tls = false;           // the planner serves TLS
    bool client_certs = false;  // and requires client certificates
  };
  // Reads the tokens file. Errors name --tokens_file.
  static absl::StatusOr<std::shared_ptr<const Access>> Create(
      const Options& options);
  // For tests: tokens given directly.
  Access(Options options, std::map<std::string, TokenEntry> tokens);

  bool open() const { return open_; }

  // Who the call is from, as its transport and metadata say.
  Caller Identify(const grpc::ServerContextBase& context) const;
  // OK, UNAUTHENTICATED (no or unknown token) or PERMISSION_DENIED (naming
  // the role required) for `caller` calling `method`.
  absl::Status Allow(const Caller& caller, absl::string_view method) const;
  // Whether `caller` holds `role` (everyone does on an open planner): for
  // the parts of a call only some roles may ask for (PutAutotuneRecord's
  // force).
  bool Holds(const Caller& caller, Role role) const {
    return open_ ||
           (caller.token_role.has_value() && *caller.token_role >= role);
  }
  // Identify, then Allow; `caller` (optional) receives who it was.
  absl::Status Check(const grpc::ServerContextBase& context,
                     absl::string_view method, Caller* caller = nullptr) const;

  // Logs every mutating call and every refusal at its end (event=audit);
  // refusals at most kRefusalLinesPerSecond lines a second per outcome,
  // method and caller, then one line saying how many were held back.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
  AuditInterceptorFactory() const;
  static constexpr int kRefusalLinesPerSecond = 10;
  // For the audit interceptor: whether a refusal line of `kind` (outcome,
  // method, caller) may be written now (LogLimiter::Admit).
  bool AdmitRefusalLine(absl::string_view kind, int64_t* suppressed) const {
    return refusal_log_.Admit(kind, suppressed);
  }

 private:
  // The audit interceptor's refusal lines (thread-safe of its own).
  mutable LogLimiter refusal_log_{kRefusalLinesPerSecond};
  Options options_;
  std::map<std::string, TokenEntry> tokens_;
  bool open_ = false;
};

// Whether a listen address ("host:port", "[v6]:port", "unix:path") is
// reachable only from this machine: 127.0.0.0/8, ::1, localhost, a Unix
// socket.
bool IsLoopbackListen(absl::string_view listen);

// For a unary handler's first line: when the caller may not call `method`,
// the default reactor finished with the refusal; else null (and the default
// reactor untouched). A null `access` allows everything (services built
// without one, in tests).
grpc::ServerUnaryReactor* RefuseUnary(const Access* access,
                                      grpc::CallbackServerContext* context,
                                      absl::string_view method);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_ACCESS_H_
