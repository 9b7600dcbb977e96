#ifndef HEADROOM_SERVER_SERVICE_CONFIGMAP_READER_H_
#define HEADROOM_SERVER_SERVICE_CONFIGMAP_READER_H_

// Reads one key of a Kubernetes ConfigMap through the API server, for the
// scheduler extender's `headroom.dev/job` annotation (`name/key` of a
// ConfigMap in the pod's namespace holding the job's config file). One GET
// /api/v1/namespaces/{ns}/configmaps/{name} with the planner's
// ServiceAccount token (it needs `get` on configmaps there:
// deploy/k8s/planner-rbac.yaml), answered from a small cache for `ttl`.

#include <cstddef>
#include <functional>
#include <list>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace headroom {

struct ConfigMapReaderOptions {
  // The API server, "https://host:port" (or "http://..." for tests). Empty:
  // in-cluster, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
  std::string api_url;
  // The bearer token, read on every request to the API (the kubelet
  // rewrites a projected token before it expires). Empty: the Pod's
  // ServiceAccount token. A file that cannot be read is UNAVAILABLE.
  std::string token_file;
  // The CA that signed the API server's certificate (https only). Empty:
  // the ServiceAccount's ca.crt.
  std::string ca_file;
  // Longest wait to connect, and for each read or write on the connection.
  absl::Duration timeout = absl::Seconds(2);
  // How long an answer (a ConfigMap's keys, or its absence) is reused.
  absl::Duration ttl = absl::Seconds(30);
  // ConfigMaps cached at once; at the limit the oldest answer is dropped.
  size_t max_entries = 64;
  // Longest API answer read; a longer one is INVALID_ARGUMENT. The API
  // server stores at most 1 MiB of data per ConfigMap, and `kubectl apply`
  // copies the data into an annotation, so a full one answers ~2 MiB.
  size_t max_bytes = size_t{1} << 20;
  // The clock the TTL is measured on; null is absl::Now.
  std::function<absl::Time()> clock;
};

class ConfigMapReader {
 public:
  explicit ConfigMapReader(ConfigMapReaderOptions options);
  ConfigMapReader(const ConfigMapReader&) = delete;
  ConfigMapReader& operator=(const ConfigMapReader&) = delete;

  // The value of `key` in ConfigMap `ns`/`name` (from `data`, or decoded
  // from `binaryData`). Errors name the ConfigMap and the key:
  // INVALID_ARGUMENT for a namespace, name or key Kubernetes would not
  // accept and for an answer over max_bytes; NOT_FOUND for a missing
  // ConfigMap or key; PERMISSION_DENIED when the API refuses the token;
  // UNAVAILABLE when the API cannot be reached, answers another status or
  // a body that is not a ConfigMap. Thread-safe; the API call runs
  // without the lock held.
  absl::StatusOr<std::string> Read(const std::string& ns,
                                   const std::string& name,
                                   const std::string& key);

  // API requests made so far (cache misses), for tests and metrics.
  size_t requests() const;

 private:
  // One ConfigMap as last read: its keys, or found = false for a 404.
  struct Entry {
    absl::Time fetched;
    bool found = false;
    std::map<std::string, std::string> data;
  };
  using CacheKey = std::pair<std::string, std::string>;  // ns, name

  absl::StatusOr<Entry> Fetch(const std::string& ns, const std::string& name);
  // `key`'s value in `entry`, or NOT_FOUND naming what is missing.
  static absl::StatusOr<std::string> ValueOf(const Entry& entry,
                                             const std::string& ns,
                                             const std::string& name,
                                             const std::string& key);
  absl::Time Now() const;
  void Remember(const CacheKey& id, Entry entry);

  const ConfigMapReaderOptions options_;
  mutable absl::Mutex mu_;
  std::map<CacheKey, Entry> cache_ ABSL_GUARDED_BY(mu_);
  // Cache keys, oldest answer first.
  std::list<CacheKey> order_ ABSL_GUARDED_BY(mu_);
  size_t requests_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_CONFIGMAP_READER_H_
