#ifndef HEADROOM_SERVER_STORE_CONNECTION_POOL_H_
#define HEADROOM_SERVER_STORE_CONNECTION_POOL_H_

// A fixed set of connections, each lent to one caller at a time: a Lease
// is the only way to reach a connection, so code holding one needs no lock
// (and hides none from -Wthread-safety); the pool's own mutex guards only
// which connections are free.

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/store/sql_connection.h"

namespace headroom {

class ConnectionPool {
 public:
  // A connection lent until the lease ends.
  class Lease {
   public:
    Lease(Lease&& other) noexcept
        : pool_(other.pool_), connection_(std::move(other.connection_)) {}
    Lease& operator=(Lease&&) = delete;
    Lease(const Lease&) = delete;
    ~Lease();
    SqlConnection& operator*() const { return *connection_; }
    SqlConnection* operator->() const { return connection_.get(); }

   private:
    friend class ConnectionPool;
    Lease(ConnectionPool* pool, std::unique_ptr<SqlConnection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    ConnectionPool* pool_;
    std::unique_ptr<SqlConnection> connection_;
  };

  // `connections` must not be empty. A caller finding every connection
  // busy waits at most `wait`.
  ConnectionPool(std::vector<std::unique_ptr<SqlConnection>> connections,
                 absl::Duration wait);
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  // A free connection; UNAVAILABLE when none came free within the wait.
  absl::StatusOr<Lease> Acquire();
  int size() const { return size_; }

 private:
  void Release(std::unique_ptr<SqlConnection> connection);

  const int size_;
  const absl::Duration wait_;
  absl::Mutex mu_;
  std::vector<std::unique_ptr<SqlConnection>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_STORE_CONNECTION_POOL_H_
