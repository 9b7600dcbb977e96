// Databases written before the stores became one SqlStore open and read
// back what they held: a SQLite file made by the schema-9 store (JSON
// bodies) and a PostgreSQL schema 4 made by its old migrations.

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/store/postgres_store.h"
#include "server/store/sqlite_store.h"
#include "tests/server/store/legacy_postgres_schema.h"
#include "tests/server/store/store_dump.h"
#include "tests/support/postgres.h"
#include "tests/support/sqlite_files.h"

namespace headroom {
namespace {

const std::string kData =
    std::string(HEADROOM_SOURCE_DIR) + "/tests/data/store";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The first column of the first row of `sql` on the SQLite file.
std::string SqliteValue(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_stmt* stmt = nullptr;
  std::string value;
  if (sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
      sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    if (text != nullptr) value = reinterpret_cast<const char*>(text);
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return value;
}

TEST(StoreMigrationTest, ASchema9SqliteFileReadsBackWhatItHeld) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() /
      absl::StrCat("headroom-v9-", getpid(), ".db");
  std::filesystem::copy_file(kData + "/v9.db", path,
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(SqliteValue(path, "PRAGMA user_version"), "9");
  {
    auto store = SqliteStore::Open(path.string());
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(testing::DumpStore(**store),
              ReadFile(kData + "/v9.expected.txt"));
    // Dedup survives the re-encoding: the same runs again add nothing.
    auto runs = (*store)->ListRuns();
    ASSERT_TRUE(runs.ok());
    EXPECT_EQ(*(*store)->AddRuns(*runs), 3);
    // Numbering goes on where it was.
    EXPECT_EQ((*store)->AddProbe(v1::Probe())->id(), "p-5");
    EXPECT_EQ((*store)->AddFactorSet(v1::FactorSet(), false)->version(),
              "fs-3");
    // Energy runs (schema 11) start empty and are stored.
    EXPECT_EQ(*(*store)->CountEnergyRuns(),
              (std::pair<int64_t, int64_t>{0, 0}));
    v1::EnergyRun run;
    run.set_gpu("L4");
    run.set_quant("fp16");
    EXPECT_TRUE(*(*store)->AddEnergyRun("k", run));
    EXPECT_EQ((*store)->ListEnergyRuns(false, 10)->size(), 1u);
    // Probes stored before multi-GPU probes (schema 12) need one GPU: the
    // queued p-4 goes to a one-L4 worker.
    auto claimed = (*store)->ClaimProbe("w-1", {"L4"}, {}, 1800000000000, 500);
    ASSERT_TRUE(claimed.ok() && claimed->has_value()) << claimed.status();
    EXPECT_EQ((*claimed)->id(), "p-4");
  }
  EXPECT_EQ(SqliteValue(path,
                        "SELECT group_concat(gpus) FROM "
                        "(SELECT gpus FROM probes ORDER BY seq)"),
            "1,1,1,1,1");
  EXPECT_EQ(SqliteValue(path, "PRAGMA user_version"),
            std::to_string(kSqliteSchemaVersion));
  // Binary bodies where JSON was, every run hashed, each result of p-1 in
  // a row of its own under the key it was stored with.
  EXPECT_EQ(SqliteValue(path,
                        "SELECT COUNT(*) FROM measured_runs WHERE "
                        "body_hash IS NULL OR body LIKE '{%'"),
            "0");
  EXPECT_EQ(SqliteValue(path,
                        "SELECT COUNT(*) FROM factor_sets WHERE "
                        "body LIKE '{%'"),
            "0");
  EXPECT_EQ(SqliteValue(path,
                        "SELECT group_concat(key) FROM "
                        "(SELECT key FROM probe_results ORDER BY seq)"),
            "p-1/a/8,p-1/a/16");
  RemoveSqliteFiles(path.string());
}

std::string Hex(const google::protobuf::Message& message) {
  std::string bytes;
  message.SerializeToString(&bytes);
  return absl::StrCat("decode('", absl::BytesToHexString(bytes), "', 'hex')");
}

TEST(StoreMigrationTest, ASchema4PostgresDatabaseReadsBackWhatItHeld) {
  HEADROOM_SKIP_WITHOUT_POSTGRES();
  auto database = testing::TemporaryPostgresDatabase::Create();
  ASSERT_TRUE(database.ok()) << database.status();
  const std::string url = (*database)->url();
  // The schema as the PostgreSQL store of a72e992 made it, and rows as it
  // wrote them: binary bodies, a probe's results inside its body and again
  // in probe_results.
  std::string schema =
      "CREATE TABLE schema_version (version integer PRIMARY KEY, "
      "applied_unix bigint NOT NULL);";
  for (int v = 0; v < kLegacyPostgresVersion; ++v) {
    absl::StrAppend(&schema, testing::kLegacyPostgresMigrations[v],
                    "; INSERT INTO schema_version VALUES (", v + 1, ", 0);");
  }
  ASSERT_TRUE(testing::RunSql(url, schema).ok());
  v1::FactorSet set;
  set.set_version("fs-1");
  set.set_k90(1.17);
  v1::MeasuredRun run;
  run.set_template_("gpt2");
  run.set_gpu("L4");
  run.set_batch(8);
  run.set_measured_peak_gb(6.5);
  v1::Probe probe;
  probe.set_id("p-1");
  probe.set_state(v1::Probe::SUCCEEDED);
  probe.set_gpu("L4");
  v1::BatchResult result;
  result.set_batch(8);
  result.set_peak_allocated_gb(6.5);
  *probe.add_results() = result;
  ASSERT_TRUE(
      testing::RunSql(
          url,
          absl::StrCat(
              "INSERT INTO factor_sets VALUES (1, 'fs-1', 0, ", Hex(set),
              "); INSERT INTO current_factor_set VALUES (1, 'fs-1');"
              "INSERT INTO current_history (version, changed_unix) VALUES "
              "('fs-1', 0); INSERT INTO measured_runs (template, gpu, batch, "
              "body) VALUES ('gpt2', 'L4', 8, ",
              Hex(run),
              "); INSERT INTO probes (seq, id, state, gpu, worker_pin, "
              "executor, body) VALUES (1, 'p-1', 3, 'L4', '', '', ",
              Hex(probe),
              "); INSERT INTO probe_results VALUES ('p-1/k', 'p-1', ",
              Hex(result), ")"))
          .ok());
  auto store = PostgresStore::Open(url);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*(*store)->CurrentFactorSet())->SerializeAsString(),
            set.SerializeAsString());
  EXPECT_EQ(*(*store)->CurrentHistory(), std::vector<std::string>{"fs-1"});
  auto runs = (*store)->ListRuns();
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].SerializeAsString(), run.SerializeAsString());
  EXPECT_EQ(*(*store)->AddRuns({run}), 1);
  EXPECT_EQ((*store)->GetProbe("p-1")->SerializeAsString(),
            probe.SerializeAsString());
  EXPECT_EQ(*testing::RunSql(url, "SELECT MAX(version) FROM schema_version"),
            std::to_string(kPostgresSchemaVersion));
  // The energy runs table a migration adds, empty.
  EXPECT_EQ(*(*store)->CountEnergyRuns(), (std::pair<int64_t, int64_t>{0, 0}));
  // The probes' GPUs the last migration adds: one for every older probe.
  EXPECT_EQ(*testing::RunSql(url,
                             "SELECT string_agg(gpus::text, ',') FROM "
                             "probes"),
            "1");
  EXPECT_EQ(*testing::RunSql(url,
                             "SELECT string_agg(key, ',') FROM "
                             "probe_results"),
            "p-1/k");
}

}  // namespace
}  // namespace headroom
