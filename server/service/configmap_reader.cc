#include "server/service/configmap_reader.h"

#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "simdjson.h"

namespace headroom {
namespace {

// client-go's in-cluster defaults: kubernetes/client-go rest/config.go
// (InClusterConfig) @ 32ce75a7d6bc6960fd048d3d1e3b34185418d8c8.
constexpr char kServiceAccountToken[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/token";
constexpr char kServiceAccountCa[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

namespace od = simdjson::ondemand;

// As InClusterConfig: "https://" + net.JoinHostPort(host, port), which puts
// an IPv6 host in brackets. Empty when either variable is unset.
std::string InClusterUrl() {
  const char* host = std::getenv("KUBERNETES_SERVICE_HOST");
  const char* port = std::getenv("KUBERNETES_SERVICE_PORT");
  if (host == nullptr || port == nullptr || *host == '\0' || *port == '\0') {
    return "";
  }
  const absl::string_view h(host);
  return absl::StrCat("https://", absl::StrContains(h, ':') ? "[" : "", h,
                      absl::StrContains(h, ':') ? "]" : "", ":", port);
}

ConfigMapReaderOptions Resolved(ConfigMapReaderOptions options) {
  if (options.api_url.empty()) options.api_url = InClusterUrl();
  if (options.token_file.empty()) options.token_file = kServiceAccountToken;
  if (options.ca_file.empty()) options.ca_file = kServiceAccountCa;
  if (!options.clock) options.clock = [] { return absl::Now(); };
  return options;
}

// Names as the API server validates them: kubernetes/apimachinery
// pkg/util/validation/validation.go @
// eed236ceee2c19c2753a3d93ac0631dc20750454 (IsDNS1123Label for a
// namespace, IsDNS1123Subdomain for an object's name, IsConfigMapKey).
bool IsLabel(absl::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!absl::ascii_islower(c) && !absl::ascii_isdigit(c) && c != '-') {
      return false;
    }
  }
  return s.front() != '-' && s.back() != '-';
}

bool IsSubdomain(absl::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (absl::string_view label : absl::StrSplit(s, '.')) {
    if (!IsLabel(label)) return false;
  }
  return true;
}

bool IsConfigMapKey(absl::string_view s) {
  if (s.empty() || s.size() > 253 || s == "." || absl::StartsWith(s, "..")) {
    return false;
  }
  for (char c : s) {
    if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') {
      return false;
    }
  }
  return true;
}

absl::Status CheckNames(const std::string& ns, const std::string& name,
                        const std::string& key) {
  if (!IsLabel(ns)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConfigMap namespace \"", absl::CEscape(ns.substr(0, 80)),
        "\" is not a Kubernetes namespace name (lower-case letters, digits "
        "and '-', at most 63)"));
  }
  if (!IsSubdomain(name)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConfigMap name \"", absl::CEscape(name.substr(0, 80)), "\" in ", ns,
        " is not a Kubernetes object name (lower-case letters, digits, '-' "
        "and '.', at most 253)"));
  }
  if (!IsConfigMapKey(key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ConfigMap ", ns, "/", name, " key \"",
        absl::CEscape(key.substr(0, 80)),
        "\" is not a ConfigMap key (letters, digits, '-', '_' and '.', at "
        "most 253, not starting with '..')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadToken(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  if (!in || !(text << in.rdbuf())) {
    return absl::UnavailableError(
        absl::StrCat("cannot read the Kubernetes API token file ", path));
  }
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

absl::string_view Absl(std::string_view text) {
  return absl::string_view(text.data(), text.size());
}

// The `data` and `binaryData` of a ConfigMap's JSON; UNAVAILABLE naming
// `what` when the body is not one.
absl::StatusOr<std::map<std::string, std::string>> ParseConfigMap(
    const std::string& body, const std::string& what) {
  const auto bad = [&](absl::string_view why) {
    return absl::UnavailableError(absl::StrCat(
        what, ": the Kubernetes API's answer is not a ConfigMap (", why, ")"));
  };
  const simdjson::padded_string padded(body);
  od::parser parser;
  od::document doc;
  od::object root;
  if (parser.iterate(padded).get(doc) || doc.get_object().get(root)) {
    return bad("not a JSON object");
  }
  std::map<std::string, std::string> data;
  bool is_configmap = false;
  for (auto field : root) {
    std::string_view key;
    if (field.unescaped_key().get(key)) return bad("not JSON");
    if (key == "kind") {
      std::string_view kind;
      if (field.value().get_string().get(kind)) return bad("kind");
      is_configmap = kind == "ConfigMap";
      continue;
    }
    if (key != "data" && key != "binaryData") continue;
    const bool binary = key == "binaryData";
    od::object entries;
    if (field.value().get_object().get(entries)) return bad(Absl(key));
    for (auto entry : entries) {
      std::string_view name, value;
      if (entry.unescaped_key().get(name) ||
          entry.value().get_string().get(value)) {
        return bad(absl::StrCat(Absl(key),
                                " holds a value that is not a "
                                "string"));
      }
      std::string text(value);
      if (binary && !absl::Base64Unescape(Absl(value), &text)) {
        return bad(absl::StrCat("binaryData.", Absl(name), " is not base64"));
      }
      data[std::string(name)] = std::move(text);
    }
  }
  // The iteration stops early on a malformed document; so does this check.
  if (!is_configmap) return bad("no \"kind\": \"ConfigMap\"");
  return data;
}

}  // namespace

ConfigMapReader::ConfigMapReader(ConfigMapReaderOptions options)
    : options_(Resolved(std::move(options))) {}

absl::Time ConfigMapReader::Now() const { return options_.clock(); }

size_t ConfigMapReader::requests() const {
  absl::MutexLock lock(&mu_);
  return requests_;
}

absl::StatusOr<std::string> ConfigMapReader::Read(const std::string& ns,
                                                  const std::string& name,
                                                  const std::string& key) {
  if (absl::Status names = CheckNames(ns, name, key); !names.ok()) {
    return names;
  }
  const CacheKey id(ns, name);
  {
    absl::MutexLock lock(&mu_);
    auto it = cache_.find(id);
    if (it != cache_.end() && Now() - it->second.fetched < options_.ttl) {
      return ValueOf(it->second, ns, name, key);
    }
  }
  absl::StatusOr<Entry> fetched = Fetch(ns, name);
  if (!fetched.ok()) return fetched.status();
  absl::StatusOr<std::string> value = ValueOf(*fetched, ns, name, key);
  Remember(id, *std::move(fetched));
  return value;
}

absl::StatusOr<std::string> ConfigMapReader::ValueOf(const Entry& entry,
                                                     const std::string& ns,
                                                     const std::string& name,
                                                     const std::string& key) {
  if (!entry.found) {
    return absl::NotFoundError(absl::StrCat(
        "ConfigMap ", ns, "/", name,
        " does not exist (make it with kubectl -n ", ns, " create configmap ",
        name, " --from-file=", key, "=FILE)"));
  }
  auto value = entry.data.find(key);
  if (value == entry.data.end()) {
    std::vector<std::string> keys;
    for (const auto& [k, v] : entry.data) keys.push_back(k);
    return absl::NotFoundError(absl::StrCat(
        "ConfigMap ", ns, "/", name, " has no key ", key, " (its keys: ",
        keys.empty() ? "none" : absl::StrJoin(keys, ", "), ")"));
  }
  return value->second;
}

void ConfigMapReader::Remember(const CacheKey& id, Entry entry) {
  absl::MutexLock lock(&mu_);
  if (cache_.count(id) != 0) {
    order_.remove(id);
  } else {
    while (!order_.empty() && cache_.size() >= options_.max_entries) {
      cache_.erase(order_.front());
      order_.pop_front();
    }
  }
  if (options_.max_entries == 0) return;
  cache_[id] = std::move(entry);
  order_.push_back(id);
}

absl::StatusOr<ConfigMapReader::Entry> ConfigMapReader::Fetch(
    const std::string& ns, const std::string& name) {
  const std::string what = absl::StrCat("ConfigMap ", ns, "/", name);
  {
    absl::MutexLock lock(&mu_);
    ++requests_;
  }
  if (options_.api_url.empty()) {
    return absl::UnavailableError(
        absl::StrCat(what,
                     ": no Kubernetes API to ask (KUBERNETES_SERVICE_HOST and "
                     "KUBERNETES_SERVICE_PORT are unset: not in a cluster)"));
  }
  absl::StatusOr<std::string> token = ReadToken(options_.token_file);
  if (!token.ok()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": ", token.status().message()));
  }
  httplib::Client client(options_.api_url);
  if (!client.is_valid()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": the Kubernetes API URL ", options_.api_url,
                     " is not http(s)://host:port"));
  }
  if (absl::StartsWith(options_.api_url, "https://")) {
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
    if (!std::ifstream(options_.ca_file)) {
      return absl::UnavailableError(
          absl::StrCat(what, ": cannot read the Kubernetes API's CA file ",
                       options_.ca_file));
    }
    client.set_ca_cert_path(options_.ca_file);
    client.enable_server_certificate_verification(true);
#else
    return absl::UnavailableError(
        absl::StrCat(what, ": this build of cpp-httplib has no TLS (https ",
                     options_.api_url, ")"));
#endif
  }
  const auto timeout = absl::ToChronoMicroseconds(options_.timeout);
  client.set_connection_timeout(timeout);
  client.set_read_timeout(timeout);
  client.set_write_timeout(timeout);
  client.set_follow_location(false);

  const httplib::Headers headers = {
      {"Authorization", absl::StrCat("Bearer ", *token)},
      {"Accept", "application/json"}};
  std::string body;
  bool too_big = false;
  const httplib::Result result =
      client.Get(absl::StrCat("/api/v1/namespaces/", ns, "/configmaps/", name),
                 headers, [&](const char* data, size_t length) {
                   if (body.size() + length > options_.max_bytes) {
                     too_big = true;
                     return false;
                   }
                   body.append(data, length);
                   return true;
                 });
  if (too_big) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the Kubernetes API's answer is over ",
                     options_.max_bytes, " bytes (the reader's max_bytes)"));
  }
  if (!result) {
    return absl::UnavailableError(absl::StrCat(
        what, ": cannot reach the Kubernetes API at ", options_.api_url, " (",
        httplib::to_string(result.error()), ")"));
  }
  Entry entry;
  entry.fetched = Now();
  switch (result->status) {
    case 200: {
      absl::StatusOr<std::map<std::string, std::string>> data =
          ParseConfigMap(body, what);
      if (!data.ok()) return data.status();
      entry.found = true;
      entry.data = *std::move(data);
      return entry;
    }
    case 404:
      return entry;
    case 401:
    case 403:
      return absl::PermissionDeniedError(absl::StrCat(
          what, ": the Kubernetes API refused the token (HTTP ", result->status,
          "); the planner's ServiceAccount needs get on "
          "configmaps in namespace ",
          ns, " (deploy/k8s/planner-rbac.yaml)"));
    default:
      return absl::UnavailableError(absl::StrCat(
          what, ": the Kubernetes API answered HTTP ", result->status));
  }
}

}  // namespace headroom
