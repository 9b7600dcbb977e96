#ifndef HEADROOM_SERVER_SERVICE_ACCESS_H_
#define HEADROOM_SERVER_SERVICE_ACCESS_H_

// Who may call what. A caller is known by its client certificate (mTLS) and
// by its bearer token (`authorization: Bearer <token>`), checked against the
// tokens file; every method needs a role (reader, operator, admin, or
// worker for Fleet.Connect). Every handler asks `Check` first, and the audit
// interceptor logs each mutating call and each refusal with the caller, the
// peer and the outcome.
//
// Modes: with neither TLS nor a tokens file the planner is open (it listens
// on loopback only, see PlannerApp) and every caller is admin and may
// connect as any worker. With a tokens file, a call needs a token of the
// method's role (reads are open unless require_token_for_reads). With TLS
// but no tokens file, every mutating call is refused; a worker with a
// worker certificate may still connect.
//
// Workers (issue 32): connecting needs a worker credential, bound to one
// worker id: a client certificate issued for workers (extended key usage
// kWorkerKeyUsageOid; its CN is the worker id) or a token of role worker
// (its NAME in the tokens file is the worker id). An operator's or admin's
// token and any other certificate are not workers.

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

// reader < operator < admin are ordered: each may do what the ones below it
// may. worker stands apart, below reader: it may only connect as the one
// worker id its token is named for (and call what anyone may).
enum class Role { kWorker = 0, kReader = 1, kOperator = 2, kAdmin = 3 };
absl::string_view RoleName(Role role);

// The extended key usage that marks a client certificate as issued for a
// Headroom worker (scripts/dev-certs.sh puts it on worker certificates,
// never on the operator's). An OID under the 2.25 arc (ITU-T X.667: a UUID
// as an integer, here a50520bd-df44-4086-9eac-e3fb46e97321), which needs no
// registration and collides with no one's.
inline constexpr char kWorkerKeyUsageOid[] =
    "2.25.219349244869131494077330307785983357729";

// Whether `pem`, one PEM certificate, carries kWorkerKeyUsageOid in its
// extended key usage; false for anything that does not parse.
bool IssuedForWorkers(absl::string_view pem);

// What a method needs. kWorker is Fleet.Connect: a worker credential (a
// worker certificate or a worker token), bound to one worker id.
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
// SHA-256 of the token), ROLE one of reader, operator, admin, worker; blank
// lines and `#` comments allowed. A worker token's NAME is the worker id it
// connects as (so it holds no '@'). Errors name `source`, the line and what
// is wrong. Keyed by the lower-case hex digest.
absl::StatusOr<std::map<std::string, TokenEntry>> ParseTokens(
    absl::string_view text, absl::string_view source);

// Who is calling. `identity` is "cert:<subject CN>" for a verified client
// certificate, else "token:<name>" for a known token, else "" (anonymous).
struct Caller {
  std::string identity;
  std::string peer;
  bool has_certificate = false;
  // The verified certificate carries kWorkerKeyUsageOid: set by Check for
  // Fleet.Connect only (Identify leaves it false).
  bool worker_certificate = false;
  std::string certificate_name;    // its subject CN
  std::optional<Role> token_role;  // set for a known token
  std::string token_name;          // its name in the tokens file
  bool presented_unknown_token = false;
  // The worker this caller may connect as: "cert:<CN>" for a worker
  // certificate, else "token:<name>" for a worker token, else "".
  std::string WorkerIdentity() const;
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

  // Who the call is from, as its transport and metadata say (without
  // worker_certificate, which Check decides for Fleet.Connect).
  Caller Identify(const grpc::ServerContextBase& context) const;
  // OK, UNAUTHENTICATED (no or unknown token) or PERMISSION_DENIED (naming
  // the role required) for `caller` calling `method`. Fleet.Connect is
  // allowed with a worker credential only (a worker certificate and a
  // worker token together must name the same worker).
  absl::Status Allow(const Caller& caller, absl::string_view method) const;
  // Whether `caller` holds `role` (everyone does on an open planner): for
  // the parts of a call only some roles may ask for (PutAutotuneRecord's
  // force). `role` is reader, operator or admin.
  bool Holds(const Caller& caller, Role role) const {
    return open_ ||
           (caller.token_role.has_value() && *caller.token_role >= role);
  }
  // Identify, then Allow; `caller` (optional) receives who it was.
  absl::Status Check(const grpc::ServerContextBase& context,
                     absl::string_view method, Caller* caller = nullptr) const;

  // For an HTTP request, which has no gRPC context: who it is from, given
  // its `Authorization` header ("" when absent; the same tokens as gRPC's
  // `authorization: Bearer <token>`), the subject common name of the client
  // certificate its TLS connection presented and the CA verified (nullopt
  // when none), and its peer address (for logs).
  Caller IdentifyHttp(absl::string_view authorization,
                      const std::optional<std::string>& certificate_name,
                      std::string peer) const;
  // OK, UNAUTHENTICATED or PERMISSION_DENIED for `caller` asking for the HTTP
  // `route` (a path, named in the message) that needs `need`. The rules are
  // Allow's, and where the planner requires client certificates every route
  // but a kAnyone one needs one, as the gRPC port's handshake does.
  absl::Status AllowHttp(const Caller& caller, absl::string_view route,
                         Need need) const;

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
  // The token of an `authorization` value ("Bearer <token>") into `caller`:
  // its role and name, or presented_unknown_token.
  void IdentifyToken(absl::string_view authorization, Caller* caller) const;
  // Allow for Fleet.Connect on a planner that is not open.
  absl::Status AllowWorker(const Caller& caller) const;

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
