#ifndef HEADROOM_TESTS_SUPPORT_POSTGRES_H_
#define HEADROOM_TESTS_SUPPORT_POSTGRES_H_

// PostgreSQL for tests: the server a test run was given, a private database
// per test that is dropped afterwards, and the skip-or-fail rule.
//
//   TEST(MyTest, UsesPostgres) {
//     HEADROOM_SKIP_WITHOUT_POSTGRES();
//     auto db = testing::TemporaryPostgresDatabase::Create();
//     ASSERT_TRUE(db.ok()) << db.status();
//     ... OpenStore((*db)->url()) ...
//   }
//
// scripts/test-postgres.sh starts a throwaway server; scripts/test.sh sets
// HEADROOM_TEST_PG_URL to it. Needs libpq (the test links headroom_store).

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace headroom::testing {

// The server the tests use: env HEADROOM_TEST_PG_URL (a postgresql:// URL
// or key=value string naming a database to connect to for CREATE
// DATABASE), "" when unset.
inline std::string PostgresServerUrl() {
  const char* url = std::getenv("HEADROOM_TEST_PG_URL");
  return url == nullptr ? "" : url;
}

// Whether a missing server fails tests instead of skipping them: env CI is
// "true", where the PostgreSQL tests must really run.
inline bool PostgresRequired() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

// Runs `sql` on the database at `url`; returns the first column of the
// first row of its last result ("" when it has none).
inline absl::StatusOr<std::string> RunSql(const std::string& url,
                                          const std::string& sql) {
  std::unique_ptr<PGconn, void (*)(PGconn*)> conn(PQconnectdb(url.c_str()),
                                                  &PQfinish);
  if (conn == nullptr || PQstatus(conn.get()) != CONNECTION_OK) {
    return absl::UnavailableError(
        absl::StrCat("test PostgreSQL unreachable: ",
                     conn ? PQerrorMessage(conn.get()) : "out of memory"));
  }
  PQsetNoticeProcessor(
      conn.get(), [](void*, const char*) {}, nullptr);
  std::unique_ptr<PGresult, void (*)(PGresult*)> result(
      PQexec(conn.get(), sql.c_str()), &PQclear);
  const ExecStatusType status = PQresultStatus(result.get());
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    return absl::InternalError(absl::StrCat("test SQL failed: ", sql, ": ",
                                            PQerrorMessage(conn.get())));
  }
  if (PQntuples(result.get()) == 0 || PQnfields(result.get()) == 0) return "";
  return std::string(PQgetvalue(result.get(), 0, 0));
}

// A database of its own on the test server, created by Create and dropped
// (WITH (FORCE): connections still open are ended) when this goes away.
// Names are unique across processes (pid, counter, random), so tests may
// run in parallel against one server.
class TemporaryPostgresDatabase {
 public:
  // Creates the database on the server at `server_url`. UNAVAILABLE when
  // the server cannot be reached.
  static absl::StatusOr<std::unique_ptr<TemporaryPostgresDatabase>> Create(
      const std::string& server_url = PostgresServerUrl()) {
    static std::atomic<int> counter{0};
    const std::string name =
        absl::StrCat("headroom_test_", getpid(), "_", counter++, "_",
                     absl::Hex(std::random_device()(), absl::kZeroPad8));
    const absl::StatusOr<std::string> created =
        RunSql(server_url, absl::StrCat("CREATE DATABASE \"", name, "\""));
    if (!created.ok()) return created.status();
    return std::unique_ptr<TemporaryPostgresDatabase>(
        new TemporaryPostgresDatabase(server_url, name));
  }

  ~TemporaryPostgresDatabase() {
    (void)RunSql(server_url_, absl::StrCat("DROP DATABASE IF EXISTS \"", name_,
                                           "\" WITH (FORCE)"));
  }
  TemporaryPostgresDatabase(const TemporaryPostgresDatabase&) = delete;
  TemporaryPostgresDatabase& operator=(const TemporaryPostgresDatabase&) =
      delete;

  // The database's URL, in the server URL's form (postgresql://.. or
  // key=value): what OpenStore and the planner's --db take.
  const std::string& url() const { return url_; }
  // The database's name.
  const std::string& name() const { return name_; }

 private:
  TemporaryPostgresDatabase(std::string server_url, std::string name)
      : server_url_(std::move(server_url)),
        name_(std::move(name)),
        url_(WithDatabase(server_url_, name_)) {}

  // `server_url` with its database replaced by `name`.
  static std::string WithDatabase(const std::string& server_url,
                                  const std::string& name) {
    const size_t scheme = server_url.find("://");
    if (scheme == std::string::npos) {
      return absl::StrCat(server_url, " dbname=", name);  // the last one wins
    }
    const size_t query = server_url.find('?', scheme + 3);
    const size_t path = server_url.find('/', scheme + 3);
    const size_t authority_end =
        path != std::string::npos && path < query ? path : query;
    std::string url = server_url.substr(0, authority_end);
    absl::StrAppend(&url, "/", name);
    if (query != std::string::npos) url += server_url.substr(query);
    return url;
  }

  const std::string server_url_;
  const std::string name_;
  const std::string url_;
};

}  // namespace headroom::testing

// In a test body or SetUp: skips the test, saying why, when no PostgreSQL
// server is configured (HEADROOM_TEST_PG_URL unset), but fails it under
// CI=true.
#define HEADROOM_SKIP_WITHOUT_POSTGRES()                                    \
  do {                                                                      \
    if (::headroom::testing::PostgresServerUrl().empty()) {                 \
      if (::headroom::testing::PostgresRequired()) {                        \
        GTEST_FAIL() << "CI=true but HEADROOM_TEST_PG_URL is unset: "       \
                        "scripts/test.sh starts PostgreSQL and sets it";    \
      }                                                                     \
      GTEST_SKIP() << "HEADROOM_TEST_PG_URL is unset (scripts/test-"        \
                      "postgres.sh start prints a URL for it): PostgreSQL " \
                      "test skipped";                                       \
    }                                                                       \
  } while (0)

#endif  // HEADROOM_TESTS_SUPPORT_POSTGRES_H_
