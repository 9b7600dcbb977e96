// What only PostgreSQL has to get right: several connections (processes,
// replicas) on one database at once, migrations racing, connections lost.

#include "server/store/postgres_store.h"

#include <algorithm>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"
#include "tests/support/postgres.h"

namespace headroom {
namespace {

class PostgresStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HEADROOM_SKIP_WITHOUT_POSTGRES();
    auto database = testing::TemporaryPostgresDatabase::Create();
    ASSERT_TRUE(database.ok()) << database.status();
    database_ = std::move(*database);
  }

  const std::string& url() const { return database_->url(); }

  std::string Sql(const std::string& sql) {
    auto value = testing::RunSql(url(), sql);
    EXPECT_TRUE(value.ok()) << value.status();
    return value.ok() ? *value : "";
  }

  std::unique_ptr<testing::TemporaryPostgresDatabase> database_;
};

v1::Probe L4Probe() {
  v1::Probe probe;
  probe.set_gpu("L4");
  probe.set_template_("gpt2");
  probe.mutable_request()->add_batches(8);
  return probe;
}

TEST_F(PostgresStoreTest, ConcurrentClaimersGetEachProbeOnce) {
  constexpr int kProbes = 60;
  auto a = PostgresStore::Open(url());
  auto b = PostgresStore::Open(url());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  for (int i = 0; i < kProbes; ++i) ASSERT_TRUE((*a)->AddProbe(L4Probe()).ok());

  // Two connections (as two planners would have), two threads on each.
  absl::Mutex mu;
  std::vector<std::string> claimed;
  int errors = 0;
  std::vector<std::thread> threads;
  for (PostgresStore* store : {a->get(), a->get(), b->get(), b->get()}) {
    threads.emplace_back([&, store, worker = threads.size()] {
      for (int i = 0; i <= kProbes; ++i) {  // bounded: at most every probe
        auto probe = store->ClaimProbe(absl::StrCat("w", worker), {"L4"}, {},
                                       1000, 60000);
        absl::MutexLock lock(&mu);
        if (!probe.ok()) ++errors;
        if (!probe.ok() || !probe->has_value()) return;
        EXPECT_EQ((*probe)->attempts(), 1u) << (*probe)->id();
        claimed.push_back((*probe)->id());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(errors, 0);
  std::sort(claimed.begin(), claimed.end());
  EXPECT_EQ(std::adjacent_find(claimed.begin(), claimed.end()), claimed.end())
      << "a probe was claimed twice";
  EXPECT_EQ(claimed.size(), static_cast<size_t>(kProbes));
  EXPECT_EQ((*b)->ListProbes(v1::Probe::RUNNING, -1)->size(),
            static_cast<size_t>(kProbes));
  EXPECT_FALSE((*(*b)->ClaimProbe("late", {"L4"}, {}, 1000, 60000)));
}

TEST_F(PostgresStoreTest, VersionsAreNumberedOnceAcrossConnections) {
  constexpr int kEach = 10;
  auto a = PostgresStore::Open(url());
  auto b = PostgresStore::Open(url());
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::thread> threads;
  for (PostgresStore* store : {a->get(), b->get()}) {
    threads.emplace_back([store] {
      for (int i = 0; i < kEach; ++i) {
        EXPECT_TRUE(store->AddFactorSet(v1::FactorSet(), true).ok());
        EXPECT_TRUE(store->AddProbe(L4Probe()).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  auto sets = (*a)->ListFactorSets();
  ASSERT_TRUE(sets.ok());
  ASSERT_EQ(sets->size(), 2u * kEach);
  for (int i = 0; i < 2 * kEach; ++i) {
    EXPECT_EQ((*sets)[i].version(), absl::StrCat("fs-", i + 1));
  }
  EXPECT_EQ((*a)->ListProbes(v1::Probe::QUEUED, -1)->size(), 2u * kEach);
  EXPECT_EQ((*a)->CurrentHistory()->size(), 2u * kEach);
}

TEST_F(PostgresStoreTest, StoresOpeningTogetherMigrateOnce) {
  constexpr int kStores = 4;
  std::vector<absl::StatusOr<std::unique_ptr<PostgresStore>>> stores(kStores);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStores; ++i) {
    threads.emplace_back([&, i] { stores[i] = PostgresStore::Open(url()); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const auto& store : stores) ASSERT_TRUE(store.ok()) << store.status();
  // One row per migration applied: each ran once.
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM schema_version"),
            std::to_string(kPostgresSchemaVersion));
  EXPECT_EQ(Sql("SELECT MAX(version) FROM schema_version"),
            std::to_string(kPostgresSchemaVersion));
  for (const auto& store : stores) {
    ASSERT_TRUE((*store)->AddProbe(L4Probe()).ok());
  }
  EXPECT_EQ((*stores[0])->ListProbes(v1::Probe::QUEUED, 10)->size(),
            static_cast<size_t>(kStores));
}

TEST_F(PostgresStoreTest, RefusesNewerSchemaChangingNothing) {
  // A database a newer planner created: its schema_version only.
  Sql("CREATE TABLE schema_version (version integer PRIMARY KEY, "
      "applied_unix bigint NOT NULL); "
      "INSERT INTO schema_version VALUES (" +
      std::to_string(kPostgresSchemaVersion + 1) + ", 0)");
  auto refused = PostgresStore::Open(url());
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(
      refused.status().message().find(absl::StrCat(
          "schema version ", kPostgresSchemaVersion + 1, " (host=127.0.0.1")),
      std::string::npos)
      << refused.status();
  EXPECT_NE(refused.status().message().find(absl::StrCat(
                "newer than this planner's ", kPostgresSchemaVersion)),
            std::string::npos)
      << refused.status();
  // No table was created and the version is as it was.
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM pg_tables WHERE schemaname = 'public'"),
            "1");
  EXPECT_EQ(Sql("SELECT string_agg(version::text, ',') FROM schema_version"),
            std::to_string(kPostgresSchemaVersion + 1));
}

// Callers beyond the pool's connections wait for one rather than fail,
// and each transaction runs on the connection it started on.
TEST_F(PostgresStoreTest, CallersShareAPoolOfConnections) {
  constexpr int kThreads = 6, kEach = 10;
  auto store = PostgresStore::Open(url(), /*pool=*/2);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(Sql("SELECT COUNT(*) FROM pg_stat_activity WHERE datname = "
                "current_database() AND application_name = "
                "'headroom-planner'"),
            "2");
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        EXPECT_TRUE((*store)->AddProbe(L4Probe()).ok());
        EXPECT_TRUE((*store)->ListProbes(v1::Probe::QUEUED, 5).ok());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  auto probes = (*store)->ListProbes(v1::Probe::QUEUED, -1);
  ASSERT_TRUE(probes.ok());
  EXPECT_EQ(probes->size(), static_cast<size_t>(kThreads * kEach));
  EXPECT_EQ(probes->front().id(), absl::StrCat("p-", kThreads * kEach));
}

TEST_F(PostgresStoreTest, ReconnectsWhenTheConnectionDrops) {
  auto store = PostgresStore::Open(url());
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->AddFactorSet(v1::FactorSet(), true).ok());
  // The server ends every other connection to this database (a restart,
  // a failover, an idle timeout would too).
  Sql("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
      "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  // A read and a write each reconnect and go through.
  auto current = (*store)->CurrentFactorSet();
  ASSERT_TRUE(current.ok()) << current.status();
  EXPECT_EQ((*current)->version(), "fs-1");
  Sql("SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity "
      "WHERE datname = current_database() AND pid <> pg_backend_pid()");
  auto added = (*store)->AddFactorSet(v1::FactorSet(), false);
  ASSERT_TRUE(added.ok()) << added.status();
  EXPECT_EQ(added->version(), "fs-2");
  EXPECT_EQ((*store)->ListFactorSets()->size(), 2u);
}

}  // namespace
}  // namespace headroom
