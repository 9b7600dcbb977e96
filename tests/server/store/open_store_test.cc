// OpenStore sends each location to its store.

#include "server/store/open_store.h"

#include "gtest/gtest.h"
#include "server/store/sqlite_store.h"

namespace headroom {
namespace {

TEST(OpenStoreTest, TellsPostgresLocationsFromFiles) {
  EXPECT_TRUE(IsPostgresLocation("postgresql://u@127.0.0.1:55432/db"));
  EXPECT_TRUE(IsPostgresLocation("postgres://127.0.0.1/db"));
  EXPECT_TRUE(IsPostgresLocation("host=127.0.0.1 port=55432 dbname=db"));
  EXPECT_TRUE(IsPostgresLocation("dbname=db"));
  EXPECT_FALSE(IsPostgresLocation(":memory:"));
  EXPECT_FALSE(IsPostgresLocation("headroom.db"));
  EXPECT_FALSE(IsPostgresLocation("/var/lib/headroom/postgres.db"));
}

TEST(OpenStoreTest, FilesAndMemoryOpenSqlite) {
  auto store = OpenStore(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_NE(dynamic_cast<SqliteStore*>(store->get()), nullptr);
  EXPECT_EQ((*store)->AddFactorSet(v1::FactorSet(), true)->version(), "fs-1");
}

TEST(OpenStoreTest, UnreachablePostgresIsUnavailableWithoutThePassword) {
  // Nothing listens on loopback port 1.
  for (const std::string location :
       {"postgresql://planner:s3cret@127.0.0.1:1/headroom",
        "host=127.0.0.1 port=1 user=planner password=s3cret dbname=headroom"}) {
    auto store = OpenStore(location);
    ASSERT_FALSE(store.ok()) << location;
    EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
    const std::string message(store.status().message());
    EXPECT_NE(message.find("host=127.0.0.1 port=1 dbname=headroom"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find("s3cret"), std::string::npos) << message;
  }
}

TEST(OpenStoreTest, MalformedPostgresUrlIsInvalidWithoutThePassword) {
  auto store = OpenStore("postgresql://planner:s3cret@127.0.0.1:1/db?bogus=1");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.status().message().find("s3cret"), std::string::npos);
}

}  // namespace
}  // namespace headroom
