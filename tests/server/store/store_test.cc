#include "server/store/sqlite_store.h"

#include <sqlite3.h>

#include <filesystem>

#include "gtest/gtest.h"

namespace headroom {
namespace {

std::string TempDb(const std::string& name) {
  const auto path =
      std::filesystem::temp_directory_path() /
      (name + "-" +
       std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "-" +
       std::to_string(getpid()) + ".db");
  std::filesystem::remove(path);
  return path.string();
}

v1::FactorSet Set(double optimizer) {
  v1::FactorSet set;
  set.mutable_factors()->set_optimizer(optimizer);
  set.set_k95(1.4);
  return set;
}

TEST(SqliteStoreTest, VersionsFactorSetsAndKeepsCurrent) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok()) << store.status();
  auto none = (*store)->CurrentFactorSet();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  auto first = (*store)->AddFactorSet(Set(1.1), true);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->version(), "fs-1");
  auto second = (*store)->AddFactorSet(Set(1.3), false);
  EXPECT_EQ(second->version(), "fs-2");
  auto current = (*store)->CurrentFactorSet();
  ASSERT_TRUE(current.ok() && current->has_value());
  EXPECT_EQ((*current)->version(), "fs-1");
  EXPECT_DOUBLE_EQ((*current)->factors().optimizer(), 1.1);
  EXPECT_EQ((*store)->ListFactorSets()->size(), 2u);
  ASSERT_TRUE((*store)->SetCurrentFactorSet("fs-2").ok());
  EXPECT_EQ((*(*store)->CurrentFactorSet())->version(), "fs-2");
  EXPECT_EQ(*(*store)->CurrentHistory(),
            (std::vector<std::string>{"fs-1", "fs-2"}));
  EXPECT_EQ((*store)->SetCurrentFactorSet("fs-7").code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->GetFactorSet("fs-9").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(SqliteStoreTest, VersionsEnergyCurveSets) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE((*(*store)->CurrentEnergyCurveSet()).has_value());
  v1::EnergyCurveSet curves;
  curves.set_model("test");
  EXPECT_EQ((*store)->AddEnergyCurveSet(curves, true)->version(), "ec-1");
  EXPECT_EQ((*store)->AddEnergyCurveSet(curves, false)->version(), "ec-2");
  EXPECT_EQ((*(*store)->CurrentEnergyCurveSet())->version(), "ec-1");
  EXPECT_EQ((*store)->AddEnergyCurveSet(curves, true)->version(), "ec-3");
  EXPECT_EQ((*(*store)->CurrentEnergyCurveSet())->version(), "ec-3");
  // Factor-set numbering is its own.
  EXPECT_EQ((*store)->AddFactorSet(Set(1.0), true)->version(), "fs-1");
}

TEST(SqliteStoreTest, StoresDensityRunsById) {
  auto store = SqliteStore::Open(":memory:");
  ASSERT_TRUE(store.ok());
  v1::DensityRawRun a;
  a.set_id("mlp|float32|Tween|lr=1");
  a.set_arch("mlp");
  a.set_dtype("float32");
  a.set_mode("Tween");
  a.set_ram_kib(4);
  v1::DensityRawRun b = a;
  b.set_id("lstm|int8|Step|lr=1");
  b.set_arch("lstm");
  b.set_dtype("int8");
  b.set_mode("Step");
  EXPECT_EQ(*(*store)->AddDensityRuns({a, b}), 2);
  a.set_ram_kib(8);  // a re-measure replaces the stored run
  EXPECT_EQ(*(*store)->AddDensityRuns({a}), 2);
  auto mlp = (*store)->ListDensityRuns("mlp", "", "");
  ASSERT_EQ(mlp->size(), 1u);
  EXPECT_DOUBLE_EQ((*mlp)[0].ram_kib(), 8);
  EXPECT_EQ((*store)->ListDensityRuns("", "int8", "Step")->size(), 1u);
  EXPECT_EQ((*store)->ListDensityRuns("", "", "")->size(), 2u);
  EXPECT_TRUE((*store)->ListDensityRuns("gru", "", "")->empty());
}

TEST(SqliteStoreTest, PersistsAcrossReopen) {
  const std::string path = TempDb("persist");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AddFactorSet(Set(1.2), true).ok());
    v1::MeasuredRun run;
    run.set_template_("bert-base");
    run.set_batch(32);
    run.set_measured_peak_gb(2.27);
    v1::MeasuredRun other = run;
    other.set_batch(8);
    // An identical run is stored once.
    EXPECT_EQ(*(*store)->AddRuns({run, other, run}), 2);
    EXPECT_EQ(*(*store)->AddRuns({other}), 2);
  }
  auto store = SqliteStore::Open(path);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*(*store)->CurrentFactorSet())->version(), "fs-1");
  auto runs = (*store)->ListRuns();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_TRUE((*runs)[0].has_measured_peak_gb());
  EXPECT_FALSE((*runs)[0].has_oom_on_gb());
  std::filesystem::remove(path);
}

TEST(SqliteStoreTest, RefusesNewerSchemaAndKeepsTheFile) {
  const std::string path = TempDb("newer");
  {
    auto store = SqliteStore::Open(path);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->AddFactorSet(Set(1.2), true).ok());
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(
      sqlite3_exec(db, "PRAGMA user_version=99;", nullptr, nullptr, nullptr),
      SQLITE_OK);
  sqlite3_close(db);
  auto refused = SqliteStore::Open(path);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("newer"), std::string::npos);
  // Nothing was lost: with the version put back the data is there.
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  const std::string restore =
      "PRAGMA user_version=" + std::to_string(kSqliteSchemaVersion) + ";";
  sqlite3_exec(db, restore.c_str(), nullptr, nullptr, nullptr);
  sqlite3_close(db);
  auto reopened = SqliteStore::Open(path);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ((*(*reopened)->CurrentFactorSet())->version(), "fs-1");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace headroom
