// OpenStore sends each location to its store.

#include "server/store/open_store.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/store/sqlite_store.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/support/sqlite_files.h"

namespace headroom {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A SQLite path of this test's own, with no file there yet.
std::string FreshPath(const std::string& name) {
  const std::string path = ::testing::TempDir() + "/open-store-" +
                           std::to_string(getpid()) + "-" + name + ".db";
  RemoveSqliteFiles(path);
  return path;
}

// Copies the database at `from` and its write-ahead log to `to`.
void CopySqliteFiles(const std::string& from, const std::string& to) {
  for (const char* suffix : {"", "-wal"}) {
    std::filesystem::copy_file(
        from + suffix, to + suffix,
        std::filesystem::copy_options::overwrite_existing);
  }
}

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

TEST(OpenStoreTest, MissingFileIsANewStoreWithoutDbInit) {
  const std::string path = FreshPath("missing");
  auto store = OpenStore(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->AddFactorSet(v1::FactorSet(), true)->version(), "fs-1");
  store->reset();
  RemoveSqliteFiles(path);
}

TEST(OpenStoreTest, EmptyFileIsRefusedUnlessDbInit) {
  const std::string path = FreshPath("empty");
  std::ofstream(path).close();
  ASSERT_EQ(std::filesystem::file_size(path), 0u);
  auto refused = OpenStore(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("--db " + path + " is an empty file (0 bytes)"),
                    HasSubstr("--db_init")));
  // Refusing wrote nothing: the file is still empty.
  EXPECT_EQ(std::filesystem::file_size(path), 0u);

  auto made = OpenStore(path, 4, /*init_empty_file=*/true);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_EQ((*made)->AddFactorSet(v1::FactorSet(), true)->version(), "fs-1");
  made->reset();
  // Now a store: it opens without the flag and keeps what was written.
  auto reopened = OpenStore(path);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  auto current = (*reopened)->CurrentFactorSet();
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_EQ((*current)->version(), "fs-1");
  reopened->reset();
  RemoveSqliteFiles(path);
}

TEST(OpenStoreTest, CorruptIndexPageIsRefusedAtOpenNamingDbAndTheCheck) {
  const std::string path = FreshPath("corrupt");
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), true).ok());
  }  // Closed: checkpointed into the file, the log removed.
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
  // One index's root page, and the page size.
  int64_t page_bytes = 0;
  int64_t index_page = 0;
  std::string index_name;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(
                  db,
                  "SELECT name, rootpage, (SELECT page_size FROM "
                  "pragma_page_size) FROM sqlite_master WHERE type = 'index' "
                  "AND rootpage > 1 ORDER BY rootpage DESC LIMIT 1",
                  -1, &stmt, nullptr),
              SQLITE_OK);
    ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW) << "the store has no index";
    index_name = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    index_page = sqlite3_column_int64(stmt, 1);
    page_bytes = sqlite3_column_int64(stmt, 2);
    sqlite3_finalize(stmt);
    sqlite3_close(db);
  }
  ASSERT_GT(page_bytes, 0);
  {
    // Garbage over the index's root page, as a torn or bit-rotted write
    // leaves it.
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp((index_page - 1) * page_bytes);
    const std::string garbage(static_cast<size_t>(page_bytes), '\xa5');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
    ASSERT_TRUE(file.good());
  }
  auto refused = OpenStore(path);
  ASSERT_FALSE(refused.ok())
      << "index " << index_name << " page " << index_page;
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(refused.status().message()),
              AllOf(HasSubstr("--db " + path + " is corrupt"),
                    HasSubstr("PRAGMA quick_check says: "),
                    HasSubstr("Page " + std::to_string(index_page))));
  RemoveSqliteFiles(path);
}

TEST(OpenStoreTest, RecoveredWriteAheadLogIsLoggedWithItsSize) {
  const std::string path = FreshPath("wal-live");
  const std::string crashed = FreshPath("wal-crashed");
  {
    auto store = OpenStore(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), true).ok());
    // The files as a planner killed now leaves them: the write is in the
    // log only.
    CopySqliteFiles(path, crashed);
    // A log another connection has open is read, not recovered: nothing
    // is logged.
    std::ostringstream live_log;
    auto live_sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(live_log);
    spdlog::default_logger()->sinks().push_back(live_sink);
    auto second = OpenStore(path);
    spdlog::default_logger()->sinks().pop_back();
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_THAT(live_log.str(),
                ::testing::Not(HasSubstr("event=store_wal_recovered")));
  }
  const uintmax_t wal_bytes = std::filesystem::file_size(crashed + "-wal");
  ASSERT_GT(wal_bytes, 32u);

  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  auto store = OpenStore(crashed);
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(log.str(),
              AllOf(HasSubstr("event=store_wal_recovered db=" + crashed),
                    HasSubstr("wal_bytes=" + std::to_string(wal_bytes))));
  // Replayed: the write is there.
  auto current = (*store)->CurrentFactorSet();
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_EQ((*current)->version(), "fs-1");
  store->reset();

  // A store closed cleanly has no log to replay: nothing is logged.
  std::ostringstream clean_log;
  auto clean_sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(clean_log);
  spdlog::default_logger()->sinks().push_back(clean_sink);
  auto clean = OpenStore(path);
  spdlog::default_logger()->sinks().pop_back();
  ASSERT_TRUE(clean.ok()) << clean.status();
  EXPECT_THAT(clean_log.str(),
              ::testing::Not(HasSubstr("event=store_wal_recovered")));
  clean->reset();
  RemoveSqliteFiles(path);
  RemoveSqliteFiles(crashed);
}

}  // namespace
}  // namespace headroom
