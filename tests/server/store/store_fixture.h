#ifndef HEADROOM_TESTS_SERVER_STORE_STORE_FIXTURE_H_
#define HEADROOM_TESTS_SERVER_STORE_STORE_FIXTURE_H_

// Runs a store test against every Store implementation: a parameterized
// fixture whose Open() gives a new store on the test's own database (a
// temporary SQLite file, or a temporary PostgreSQL database), so reopening
// reaches the same data.

#include <sqlite3.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <ostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/store/postgres_store.h"
#include "server/store/sqlite_store.h"
#include "tests/support/postgres.h"
#include "tests/support/sqlite_files.h"

namespace headroom {

enum class StoreKind { kSqlite, kPostgres };

// Names the kind in test output and ctest's test names.
inline void PrintTo(StoreKind kind, std::ostream* out) {
  *out << (kind == StoreKind::kSqlite ? "Sqlite" : "Postgres");
}

class StoreFixture : public ::testing::TestWithParam<StoreKind> {
 protected:
  void SetUp() override {
    if (GetParam() == StoreKind::kPostgres) {
      HEADROOM_SKIP_WITHOUT_POSTGRES();
      auto database = testing::TemporaryPostgresDatabase::Create();
      ASSERT_TRUE(database.ok()) << database.status();
      postgres_ = std::move(*database);
      return;
    }
    static std::atomic<int> counter{0};
    sqlite_path_ =
        std::filesystem::temp_directory_path() /
        absl::StrCat("headroom-store-test-", getpid(), "-", counter++, ".db");
    RemoveSqliteFiles();
  }

  void TearDown() override {
    if (!sqlite_path_.empty()) RemoveSqliteFiles();
  }

  // A new store on this test's database: the data earlier stores wrote.
  absl::StatusOr<std::unique_ptr<Store>> Open() {
    if (postgres_ != nullptr) {
      auto store = PostgresStore::Open(postgres_->url());
      if (!store.ok()) return store.status();
      return std::unique_ptr<Store>(std::move(*store));
    }
    auto store = SqliteStore::Open(sqlite_path_.string());
    if (!store.ok()) return store.status();
    return std::unique_ptr<Store>(std::move(*store));
  }

  // Sets the database's schema version behind the stores' backs.
  absl::Status SetSchemaVersion(int version) {
    if (postgres_ != nullptr) {
      return testing::RunSql(
                 postgres_->url(),
                 absl::StrCat("DELETE FROM schema_version WHERE version > ",
                              version, "; INSERT INTO schema_version VALUES (",
                              version, ", 0) ON CONFLICT DO NOTHING"))
          .status();
    }
    sqlite3* db = nullptr;
    const std::string sql = absl::StrCat("PRAGMA user_version=", version, ";");
    const bool ok =
        sqlite3_open(sqlite_path_.c_str(), &db) == SQLITE_OK &&
        sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) == SQLITE_OK;
    sqlite3_close(db);
    return ok ? absl::OkStatus() : absl::InternalError("PRAGMA failed");
  }

  // Runs `sql` on this test's database behind the stores' backs.
  absl::Status ExecSql(const std::string& sql) {
    if (postgres_ != nullptr) {
      return testing::RunSql(postgres_->url(), sql).status();
    }
    sqlite3* db = nullptr;
    char* error = nullptr;
    const bool ok =
        sqlite3_open(sqlite_path_.c_str(), &db) == SQLITE_OK &&
        sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) == SQLITE_OK;
    const std::string message = error ? error : "";
    sqlite3_free(error);
    sqlite3_close(db);
    return ok ? absl::OkStatus() : absl::InternalError(message);
  }

  // The schema version this build writes for the store under test.
  int KnownSchemaVersion() const {
    return postgres_ != nullptr ? kPostgresSchemaVersion : kSqliteSchemaVersion;
  }

 private:
  void RemoveSqliteFiles() {
    headroom::RemoveSqliteFiles(sqlite_path_.string());
  }

  std::filesystem::path sqlite_path_;
  std::unique_ptr<testing::TemporaryPostgresDatabase> postgres_;
};

// "Sqlite" or "Postgres", for test names.
inline std::string StoreKindName(
    const ::testing::TestParamInfo<StoreKind>& info) {
  return info.param == StoreKind::kSqlite ? "Sqlite" : "Postgres";
}

}  // namespace headroom

// Instantiates `fixture`'s TEST_Ps for every store.
#define HEADROOM_INSTANTIATE_FOR_EVERY_STORE(fixture)      \
  INSTANTIATE_TEST_SUITE_P(                                \
      Stores, fixture,                                     \
      ::testing::Values(::headroom::StoreKind::kSqlite,    \
                        ::headroom::StoreKind::kPostgres), \
      ::headroom::StoreKindName)

#endif  // HEADROOM_TESTS_SERVER_STORE_STORE_FIXTURE_H_
