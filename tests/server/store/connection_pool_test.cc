// The pool lends each connection to one caller at a time and says so when
// every one stays busy.

#include "server/store/connection_pool.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

class FakeConnection : public SqlConnection {
 public:
  absl::StatusOr<SqlRows> Query(const char*, const std::string&,
                                const SqlParams&) override {
    return SqlRows();
  }
  absl::Status Script(const char*, const std::string&) override {
    return absl::OkStatus();
  }
  bool Lost() override { return false; }
  absl::Status Reconnect() override { return absl::OkStatus(); }
};

TEST(ConnectionPoolTest, LendsEachConnectionOnceAndTakesItBack) {
  std::vector<std::unique_ptr<SqlConnection>> connections;
  connections.push_back(std::make_unique<FakeConnection>());
  connections.push_back(std::make_unique<FakeConnection>());
  ConnectionPool pool(std::move(connections), absl::Milliseconds(1));
  EXPECT_EQ(pool.size(), 2);
  SqlConnection* first = nullptr;
  {
    auto a = pool.Acquire();
    auto b = pool.Acquire();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_NE(&**a, &**b);
    first = &**a;
    auto busy = pool.Acquire();
    ASSERT_FALSE(busy.ok());
    EXPECT_EQ(busy.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(busy.status().message().find("all 2 store connections"),
              std::string::npos)
        << busy.status();
    EXPECT_NE(busy.status().message().find("--db_pool"), std::string::npos);
  }
  // Both came back: two leases again, one of them the first connection.
  auto a = pool.Acquire();
  auto b = pool.Acquire();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(&**a == first || &**b == first);
}

}  // namespace
}  // namespace headroom
