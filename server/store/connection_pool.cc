#include "server/store/connection_pool.h"

#include "absl/strings/str_cat.h"

namespace headroom {

ConnectionPool::ConnectionPool(
    std::vector<std::unique_ptr<SqlConnection>> connections,
    absl::Duration wait)
    : size_(static_cast<int>(connections.size())),
      wait_(wait),
      free_(std::move(connections)) {}

ConnectionPool::Lease::~Lease() {
  if (connection_ != nullptr) pool_->Release(std::move(connection_));
}

absl::StatusOr<ConnectionPool::Lease> ConnectionPool::Acquire() {
  absl::MutexLock lock(&mu_);
  const auto any_free = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !free_.empty();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&any_free), wait_)) {
    return absl::UnavailableError(
        absl::StrCat("all ", size_, " store connections stayed busy for ",
                     absl::FormatDuration(wait_), "; raise --db_pool"));
  }
  std::unique_ptr<SqlConnection> connection = std::move(free_.back());
  free_.pop_back();
  return Lease(this, std::move(connection));
}

void ConnectionPool::Release(std::unique_ptr<SqlConnection> connection) {
  absl::MutexLock lock(&mu_);
  free_.push_back(std::move(connection));
}

}  // namespace headroom
