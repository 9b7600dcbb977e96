#include "server/service/access.h"

#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <array>
#include <cctype>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/server_context.h"
#include "server/service/grpc_status.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

using grpc::experimental::InterceptionHookPoints;

struct MethodNeed {
  absl::string_view method;
  Need need;
};

// Every method of headroom.v1 (a test checks the list against the protos).
constexpr MethodNeed kNeeds[] = {
    {"/headroom.v1.Fit/CheckFit", Need::kRead},
    {"/headroom.v1.Calibration/GetCalibration", Need::kRead},
    {"/headroom.v1.Fit/Ping", Need::kAnyone},
    {"/headroom.v1.Calibration/Refit", Need::kAdmin},
    {"/headroom.v1.Calibration/ListFactorSets", Need::kRead},
    {"/headroom.v1.Calibration/PromoteFactorSet", Need::kAdmin},
    {"/headroom.v1.Density/RankDensity", Need::kRead},
    {"/headroom.v1.Density/SubmitDensityRuns", Need::kOperator},
    {"/headroom.v1.Energy/EstimateEnergy", Need::kRead},
    {"/headroom.v1.Energy/TrainEnergy", Need::kRead},
    {"/headroom.v1.Energy/PlotEnergy", Need::kRead},
    {"/headroom.v1.Energy/RefitEnergy", Need::kAdmin},
    {"/headroom.v1.Energy/ListEnergyCurveSets", Need::kRead},
    {"/headroom.v1.Energy/PromoteEnergyCurveSet", Need::kAdmin},
    {"/headroom.v1.Microbatch/PlanMicrobatch", Need::kRead},
    {"/headroom.v1.Microbatch/PutAutotuneRecord", Need::kOperator},
    {"/headroom.v1.Microbatch/ListAutotuneRecords", Need::kRead},
    {"/headroom.v1.Microbatch/DropAutotuneRecord", Need::kOperator},
    {"/headroom.v1.Fleet/Connect", Need::kWorker},
    {"/headroom.v1.Fleet/ListWorkers", Need::kRead},
    {"/headroom.v1.Fleet/SubmitProbe", Need::kOperator},
    {"/headroom.v1.Fleet/SubmitAutotune", Need::kOperator},
    {"/headroom.v1.Fleet/SubmitEnergyProbe", Need::kOperator},
    {"/headroom.v1.Fleet/WatchProbe", Need::kRead},
    {"/headroom.v1.Fleet/CancelProbe", Need::kOperator},
    {"/headroom.v1.Fleet/ListProbes", Need::kRead},
    // gRPC's own: health for probes and load balancers, reflection for
    // grpcurl (it describes the API, nothing stored).
    {"/grpc.health.v1.Health/Check", Need::kAnyone},
    {"/grpc.health.v1.Health/Watch", Need::kAnyone},
    {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
     Need::kRead},
};

std::string Sha256Hex(absl::string_view text) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest.data(), &length, EVP_sha256(),
             nullptr);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
          c == '.' || c == '@')) {
      return false;
    }
  }
  return true;
}

// Logs mutating calls and refusals when their status is sent.
class AuditInterceptor : public grpc::experimental::Interceptor {
 public:
  AuditInterceptor(const Access* access,
                   grpc::experimental::ServerRpcInfo* info)
      : access_(access), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) final {
    if (methods->QueryInterceptionHookPoint(
            InterceptionHookPoints::PRE_SEND_STATUS)) {
      const grpc::Status status = methods->GetSendStatus();
      const std::string method = info_->method();
      const bool refused =
          status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
          status.error_code() == grpc::StatusCode::PERMISSION_DENIED;
      if ((refused || Mutates(method)) && info_->server_context() != nullptr) {
        const Caller caller = access_->Identify(*info_->server_context());
        std::string message = status.error_message();
        if (message.size() > 200) message.resize(200);
        auto level =
            refused || !status.ok() ? spdlog::level::warn : spdlog::level::info;
        int64_t suppressed = 0;
        // Per outcome, method and caller: one caller's flood hides no
        // other's refusals.
        const std::string kind = absl::StrCat(GrpcCodeName(status.error_code()),
                                              " ", method.substr(0, 128), " ",
                                              caller.Name().substr(0, 128));
        if (refused && !access_->AdmitRefusalLine(kind, &suppressed)) {
          methods->Proceed();
          return;
        }
        if (suppressed > 0) {
          spdlog::warn(
              "event=log_suppressed kind=audit method={} identity={} "
              "outcome={} count={} message=\"suppressed {} similar\"",
              method, caller.Name(), GrpcCodeName(status.error_code()),
              suppressed, suppressed);
        }
        spdlog::log(level,
                    "event=audit method={} identity={} peer={} outcome={} "
                    "message=\"{}\"",
                    method, caller.Name(), caller.peer,
                    GrpcCodeName(status.error_code()), message);
      }
    }
    methods->Proceed();
  }

 private:
  const Access* access_;
  grpc::experimental::ServerRpcInfo* info_;
};

class AuditInterceptorFactoryImpl
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit AuditInterceptorFactoryImpl(const Access* access)
      : access_(access) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) final {
    return new AuditInterceptor(access_, info);
  }

 private:
  const Access* access_;
};

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kReader:
      return "reader";
    case Role::kOperator:
      return "operator";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
  }
  return "reader";
}

bool IssuedForWorkers(absl::string_view pem) {
  // A certificate is a few KiB; anything much larger is not one.
  if (pem.empty() || pem.size() > (1 << 16)) return false;
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), &BIO_free);
  if (bio == nullptr) return false;
  std::unique_ptr<X509, decltype(&X509_free)> cert(
      PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), &X509_free);
  if (cert == nullptr) return false;
  const auto free_usage = [](EXTENDED_KEY_USAGE* usage) {
    sk_ASN1_OBJECT_pop_free(usage, ASN1_OBJECT_free);
  };
  std::unique_ptr<EXTENDED_KEY_USAGE, decltype(free_usage)> usage(
      static_cast<EXTENDED_KEY_USAGE*>(
          X509_get_ext_d2i(cert.get(), NID_ext_key_usage, nullptr, nullptr)),
      free_usage);
  if (usage == nullptr) return false;
  std::unique_ptr<ASN1_OBJECT, decltype(&ASN1_OBJECT_free)> worker(
      OBJ_txt2obj(kWorkerKeyUsageOid, /*no_name=*/1), &ASN1_OBJECT_free);
  if (worker == nullptr) return false;
  for (int i = 0; i < sk_ASN1_OBJECT_num(usage.get()); ++i) {
    if (OBJ_cmp(sk_ASN1_OBJECT_value(usage.get(), i), worker.get()) == 0) {
      return true;
    }
  }
  return false;
}

Need NeedOf(absl::string_view method) {
  for (const MethodNeed& entry : kNeeds) {
    if (entry.method == method) return entry.need;
  }
  return Need::kAdmin;
}

bool Mutates(absl::string_view method) {
  const Need need = NeedOf(method);
  return need == Need::kOperator || need == Need::kAdmin ||
         need == Need::kWorker;
}

absl::StatusOr<std::map<std::string, TokenEntry>> ParseTokens(
    absl::string_view text, absl::string_view source) {
  std::map<std::string, TokenEntry> tokens;
  std::map<std::string, int> names;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    const std::string where = absl::StrCat(source, " line ", line_number);
    if (fields.size() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": has ", fields.size(),
          " fields; each line is NAME ROLE SHA256HEX (the hex SHA-256 of the "
          "token, e.g. from `printf %s TOKEN | sha256sum`)"));
    }
    if (!ValidName(fields[0])) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": name must be 1..64 of A-Z a-z 0-9 - _ . @"));
    }
    TokenEntry entry{std::string(fields[0]), Role::kReader};
    if (fields[1] == "reader") {
      entry.role = Role::kReader;
    } else if (fields[1] == "operator") {
      entry.role = Role::kOperator;
    } else if (fields[1] == "admin") {
      entry.role = Role::kAdmin;
    } else if (fields[1] == "worker") {
      entry.role = Role::kWorker;
      if (absl::StrContains(entry.name, '@')) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": a worker token's name is the worker id it connects as; ",
            entry.name, " has '@', which no worker id has"));
      }
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": role = ", fields[1].substr(0, 32),
                       "; allowed reader, operator, admin, worker"));
    }
    std::string digest = absl::AsciiStrToLower(fields[2]);
    if (digest.size() != 64 ||
        digest.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": the third field must be 64 hex digits (the SHA-256 of the "
          "token, not the token itself)"));
    }
    if (auto [it, inserted] = names.emplace(entry.name, line_number);
        !inserted) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": name ", entry.name, " is also on line ", it->second));
    }
    if (!tokens.emplace(digest, entry).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the same token hash is on an earlier line"));
    }
  }
  return tokens;
}

std::string Caller::WorkerIdentity() const {
  if (worker_certificate) return absl::StrCat("cert:", certificate_name);
  if (token_role == Role::kWorker) return absl::StrCat("token:", token_name);
  return "";
}

std::string Caller::Name() const {
  if (identity.empty()) return "anonymous";
  if (token_name.empty() || absl::StartsWith(identity, "token:")) {
    return identity;
  }
  return absl::StrCat(identity, " token:", token_name);
}

absl::StatusOr<std::shared_ptr<const Access>> Access::Create(
    const Options& options) {
  std::map<std::string, TokenEntry> tokens;
  if (!options.tokens_file.empty()) {
    std::ifstream in(options.tokens_file, std::ios::binary);
    if (!in) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokens_file = ", options.tokens_file, ": cannot open the file"));
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (text.str().size() > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tokens_file = ", options.tokens_file, ": over 1 MiB"));
    }
    auto parsed = ParseTokens(
        text.str(), absl::StrCat("--tokens_file ", options.tokens_file));
    if (!parsed.ok()) return parsed.status();
    tokens = *std::move(parsed);
  }
  return std::make_shared<const Access>(options, std::move(tokens));
}

Access::Access(Options options, std::map<std::string, TokenEntry> tokens)
    : options_(std::move(options)), tokens_(std::move(tokens)) {
  open_ = !options_.tls && options_.tokens_file.empty() && tokens_.empty();
}

Caller Access::Identify(const grpc::ServerContextBase& context) const {
  Caller caller;
  caller.peer = context.peer();
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    const std::vector<grpc::string_ref> names =
        auth->FindPropertyValues("x509_common_name");
    if (!names.empty()) {
      caller.has_certificate = true;
      caller.certificate_name =
          std::string(names.front().data(), names.front().size());
      caller.identity = absl::StrCat("cert:", caller.certificate_name);
    }
  }
  const auto& metadata = context.client_metadata();
  const auto header = metadata.find("authorization");
  if (header != metadata.end()) {
    IdentifyToken(
        absl::string_view(header->second.data(), header->second.size()),
        &caller);
  }
  return caller;
}

void Access::IdentifyToken(absl::string_view authorization,
                           Caller* caller) const {
  if (!absl::ConsumePrefix(&authorization, "Bearer ") &&
      !absl::ConsumePrefix(&authorization, "bearer ")) {
    caller->presented_unknown_token = true;
    return;
  }
  const auto token = tokens_.find(Sha256Hex(authorization));
  if (token == tokens_.end()) {
    caller->presented_unknown_token = true;
    return;
  }
  caller->token_role = token->second.role;
  caller->token_name = token->second.name;
  if (caller->identity.empty()) {
    caller->identity = absl::StrCat("token:", token->second.name);
  }
}

absl::Status Access::Allow(const Caller& caller,
                           absl::string_view method) const {
  const Need need = NeedOf(method);
  if (need == Need::kAnyone || open_) return absl::OkStatus();
  if (caller.presented_unknown_token) {
    return absl::UnauthenticatedError(
        "the bearer token is not in the planner's --tokens_file (check "
        "--token or HEADROOM_TOKEN)");
  }
  if (need == Need::kRead) {
    if (!options_.require_token_for_reads || caller.has_certificate ||
        (caller.token_role.has_value() &&
         *caller.token_role >= Role::kReader)) {
      return absl::OkStatus();
    }
    if (caller.token_role.has_value()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "this planner requires a token for reads (role reader or above); "
          "token ",
          caller.token_name, " has role ", RoleName(*caller.token_role),
          ", which only connects a worker"));
    }
    return absl::UnauthenticatedError(
        "this planner requires a token for reads: pass --token or "
        "HEADROOM_TOKEN (role reader or above)");
  }
  if (need == Need::kWorker) return AllowWorker(caller);
  const Role required = need == Need::kAdmin ? Role::kAdmin : Role::kOperator;
  if (tokens_.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        method,
        " changes state and this planner has no --tokens_file: every "
        "mutating call is refused (give it a tokens file with an ",
        RoleName(required), " token)"));
  }
  if (!caller.token_role.has_value()) {
    return absl::UnauthenticatedError(
        absl::StrCat(method, " needs a bearer token with role ",
                     RoleName(required), ": pass --token or HEADROOM_TOKEN"));
  }
  if (*caller.token_role < required) {
    return absl::PermissionDeniedError(absl::StrCat(
        method, " needs role ", RoleName(required), "; token ",
        caller.token_name, " has role ", RoleName(*caller.token_role)));
  }
  return absl::OkStatus();
}

absl::Status Access::AllowWorker(const Caller& caller) const {
  const std::string needs = absl::StrCat(
      "/headroom.v1.Fleet/Connect needs a worker credential: a client "
      "certificate issued for workers (extended key usage ",
      kWorkerKeyUsageOid,
      ", as scripts/dev-certs.sh issues worker-ID.pem; its CN is the worker "
      "id) or a token of role worker, named for the worker id "
      "(--token_file)");
  if (caller.worker_certificate && caller.token_role == Role::kWorker &&
      caller.certificate_name != caller.token_name) {
    return absl::PermissionDeniedError(
        absl::StrCat("the worker certificate names worker ",
                     caller.certificate_name, " and the worker token worker ",
                     caller.token_name, "; a connection is one worker"));
  }
  if (!caller.WorkerIdentity().empty()) return absl::OkStatus();
  if (caller.token_role.has_value()) {
    return absl::PermissionDeniedError(
        absl::StrCat(needs, "; token ", caller.token_name, " has role ",
                     RoleName(*caller.token_role)));
  }
  if (caller.has_certificate) {
    return absl::PermissionDeniedError(
        absl::StrCat(needs, "; the client certificate (CN ",
                     caller.certificate_name, ") is not issued for workers"));
  }
  return absl::UnauthenticatedError(needs);
}

absl::Status Access::Check(const grpc::ServerContextBase& context,
                           absl::string_view method, Caller* caller) const {
  Caller who = Identify(context);
  // Parsing the certificate costs a few microseconds: only Fleet.Connect,
  // the one method it decides, pays them.
  if (who.has_certificate && NeedOf(method) == Need::kWorker) {
    const std::shared_ptr<const grpc::AuthContext> auth =
        context.auth_context();
    const std::vector<grpc::string_ref> pems =
        auth->FindPropertyValues("x509_pem_cert");
    who.worker_certificate =
        !pems.empty() && IssuedForWorkers(absl::string_view(
                             pems.front().data(), pems.front().size()));
  }
  absl::Status allowed = Allow(who, method);
  if (caller != nullptr) *caller = std::move(who);
  return allowed;
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
Access::AuditInterceptorFactory() const {
  return std::make_unique<AuditInterceptorFactoryImpl>(this);
}

bool IsLoopbackListen(absl::string_view listen) {
  if (absl::StartsWith(listen, "unix:") ||
      absl::StartsWith(listen, "unix-abstract:")) {
    return true;
  }
  absl::string_view host = listen;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    if (close == absl::string_view::npos) return false;
    host = host.substr(0, close);
    return host == "::1";
  }
  const size_t colon = host.rfind(':');
  if (colon == absl::string_view::npos) return false;
  host = host.substr(0, colon);
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  // 127.0.0.0/8, written as four decimal parts.
  const std::vector<absl::string_view> parts = absl::StrSplit(host, '.');
  if (parts.size() != 4 || parts[0] != "127") return false;
  for (absl::string_view part : parts) {
    if (part.empty() || part.size() > 3 ||
        part.find_first_not_of("0123456789") != absl::string_view::npos) {
      return false;
    }
  }
  return true;
}

grpc::ServerUnaryReactor* RefuseUnary(const Access* access,
                                      grpc::CallbackServerContext* context,
                                      absl::string_view method) {
  if (access == nullptr) return nullptr;
  absl::Status allowed = access->Check(*context, method);
  if (allowed.ok()) return nullptr;
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(allowed));
  return reactor;
}

Caller Access::IdentifyHttp(absl::string_view authorization,
                            const std::optional<std::string>& certificate_name,
                            std::string peer) const {
  Caller caller;
  caller.peer = std::move(peer);
  if (certificate_name.has_value()) {
    caller.has_certificate = true;
    caller.identity = absl::StrCat("cert:", *certificate_name);
  }
  if (!authorization.empty()) IdentifyToken(authorization, &caller);
  return caller;
}

absl::Status Access::AllowHttp(const Caller& caller, absl::string_view route,
                               Need need) const {
  if (need == Need::kAnyone || open_) return absl::OkStatus();
  if (options_.client_certs && !caller.has_certificate) {
    return absl::UnauthenticatedError(absl::StrCat(
        route,
        " needs a client certificate signed by the planner's --tls_client_ca "
        "(only /healthz answers without one)"));
  }
  if (caller.presented_unknown_token) {
    return absl::UnauthenticatedError(absl::StrCat(
        route,
        ": the Authorization header is not `Bearer <token>` with a token in "
        "the planner's --tokens_file"));
  }
  if (need == Need::kRead) {
    // As Allow: a worker's token connects a worker and reads nothing.
    if (!options_.require_token_for_reads || caller.has_certificate ||
        (caller.token_role.has_value() &&
         *caller.token_role >= Role::kReader)) {
      return absl::OkStatus();
    }
    return absl::UnauthenticatedError(absl::StrCat(
        route,
        ": this planner requires a token for reads: send `Authorization: "
        "Bearer <token>` (role reader or above)"));
  }
  const Role required = need == Need::kAdmin ? Role::kAdmin : Role::kOperator;
  if (need == Need::kWorker || !caller.token_role.has_value() ||
      *caller.token_role < required) {
    return absl::PermissionDeniedError(absl::StrCat(
        route, " needs a bearer token with role ", RoleName(required)));
  }
  return absl::OkStatus();
}

}  // namespace headroom
