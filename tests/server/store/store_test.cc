// Factor sets, runs, energy curves and density runs, against every store.

#include <tuple>

#include "gtest/gtest.h"
#include "tests/server/store/store_fixture.h"

namespace headroom {
namespace {

class StoreTest : public StoreFixture {};
HEADROOM_INSTANTIATE_FOR_EVERY_STORE(StoreTest);

v1::FactorSet Set(double optimizer) {
  v1::FactorSet set;
  set.mutable_factors()->set_optimizer(optimizer);
  set.set_k95(1.4);
  return set;
}

TEST_P(StoreTest, VersionsFactorSetsAndKeepsCurrent) {
  auto store = Open();
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

TEST_P(StoreTest, VersionsEnergyCurveSets) {
  auto store = Open();
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

// Energy runs (issue 21): stored once per key, in the order stored, the
// simulated ones only when asked, counted with how many are simulated.
TEST_P(StoreTest, StoresEnergyRunsOncePerKeyAndFiltersSimulated) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->CountEnergyRuns(), (std::pair<int64_t, int64_t>{0, 0}));
  const auto run = [](const std::string& quant, bool simulated, double j) {
    v1::EnergyRun r;
    r.set_model("llama-1b");
    r.set_params_b(1.1);
    r.set_gpu("L4");
    r.set_arch("ada");
    r.set_quant(quant);
    r.set_tokens_generated(128);
    r.set_energy_j(j);
    r.set_simulated(simulated);
    r.set_worker("w-1");
    r.set_framework("torch 2.5.1");
    return r;
  };
  EXPECT_TRUE(*(*store)->AddEnergyRun("p-1/a/1/0/fp16", run("fp16", true, 60)));
  EXPECT_TRUE(*(*store)->AddEnergyRun("p-1/a/1/0/nf4", run("nf4", true, 80)));
  EXPECT_TRUE(
      *(*store)->AddEnergyRun("p-2/b/1/0/fp16", run("fp16", false, 61)));
  // The same key again (a re-sent result) keeps the first run.
  EXPECT_FALSE(*(*store)->AddEnergyRun("p-1/a/1/0/nf4", run("nf4", true, 99)));
  EXPECT_EQ(*(*store)->CountEnergyRuns(), (std::pair<int64_t, int64_t>{3, 2}));
  auto all = (*store)->ListEnergyRuns(true, 100);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].quant(), "fp16");
  EXPECT_EQ((*all)[1].energy_j(), 80);
  EXPECT_EQ((*all)[1].framework(), "torch 2.5.1");
  EXPECT_EQ((*all)[2].energy_j(), 61);
  auto real = (*store)->ListEnergyRuns(false, 100);
  ASSERT_TRUE(real.ok());
  ASSERT_EQ(real->size(), 1u);
  EXPECT_FALSE((*real)[0].simulated());
  EXPECT_EQ((*store)->ListEnergyRuns(true, 2)->size(), 2u);
}

// Energy curve sets roll back like factor sets: a promotion is recorded in
// the history, a set is read by version, and listing pages in storage order.
TEST_P(StoreTest, PromotesListsAndRecordsEnergyCurveSets) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::EnergyCurveSet curves;
  curves.set_model("test");
  for (int i = 0; i < 3; ++i) {
    curves.set_trained_on("set " + std::to_string(i + 1));
    ASSERT_TRUE((*store)->AddEnergyCurveSet(curves, i != 1).ok());
  }
  EXPECT_EQ(*(*store)->EnergyCurveHistory(),
            (std::vector<std::string>{"ec-1", "ec-3"}));
  ASSERT_TRUE((*store)->SetCurrentEnergyCurveSet("ec-2").ok());
  EXPECT_EQ((*(*store)->CurrentEnergyCurveSet())->version(), "ec-2");
  EXPECT_EQ(*(*store)->EnergyCurveHistory(),
            (std::vector<std::string>{"ec-1", "ec-3", "ec-2"}));
  const absl::Status unknown = (*store)->SetCurrentEnergyCurveSet("ec-9");
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ((*(*store)->CurrentEnergyCurveSet())->version(), "ec-2");
  EXPECT_EQ((*store)->GetEnergyCurveSet("ec-3")->trained_on(), "set 3");
  EXPECT_EQ((*store)->GetEnergyCurveSet("ec-9").status().code(),
            absl::StatusCode::kNotFound);

  // A page of `limit` sets after the version `after`.
  const auto list =
      [&](const std::string& after,
          int limit) -> absl::StatusOr<std::vector<v1::EnergyCurveSet>> {
    PageSpec spec;
    spec.after = after;
    spec.max_entries = limit;
    auto page = (*store)->ListEnergyCurveSets(spec);
    if (!page.ok()) return page.status();
    return page->entries;
  };
  auto first = list("", 2);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->size(), 2u);
  EXPECT_EQ((*first)[0].version(), "ec-1");
  EXPECT_EQ((*first)[1].version(), "ec-2");
  auto rest = list("ec-2", 2);
  ASSERT_EQ(rest->size(), 1u);
  EXPECT_EQ((*rest)[0].version(), "ec-3");
  EXPECT_TRUE(list("ec-3", 2)->empty());
  EXPECT_EQ(list("ec-7", 2).status().code(), absl::StatusCode::kNotFound);
}

TEST_P(StoreTest, StoresDensityRunsById) {
  auto store = Open();
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

TEST_P(StoreTest, PersistsAcrossReopen) {
  {
    auto store = Open();
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
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*(*store)->CurrentFactorSet())->version(), "fs-1");
  auto runs = (*store)->ListRuns();
  ASSERT_EQ(runs->size(), 2u);
  EXPECT_TRUE((*runs)[0].has_measured_peak_gb());
  EXPECT_FALSE((*runs)[0].has_oom_on_gb());
}

// Issue 30: a run keeps its reserved, device and context figures and its
// phases through the store and a reopen, exactly as reported.
TEST_P(StoreTest, KeepsTheDeviceMemoryFiguresAndPhasesOfARun) {
  v1::MeasuredRun run;
  run.set_template_("bert-base");
  run.set_batch(16);
  run.set_measured_peak_gb(4.5);
  run.set_peak_reserved_gb(5.25);
  run.set_device_peak_gb(6.0);
  run.set_device_context_gb(0.625);
  for (const auto& [name, allocated, reserved, device] :
       {std::tuple<const char*, double, double, double>{"load", 0.5, 0.75, 1.5},
        {"step", 4.5, 5.25, 6.0},
        {"eval", 1.25, 5.25, 6.0}}) {
    v1::PhaseMeasurement* phase = run.add_phases();
    phase->set_phase(name);
    phase->set_allocated_gb(allocated);
    phase->set_reserved_gb(reserved);
    phase->set_device_gb(device);
  }
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->AddRuns({run}), 1);
  }
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  auto runs = (*store)->ListRuns();
  ASSERT_TRUE(runs.ok()) << runs.status();
  ASSERT_EQ(runs->size(), 1u);
  const v1::MeasuredRun& back = (*runs)[0];
  EXPECT_DOUBLE_EQ(back.peak_reserved_gb(), 5.25);
  EXPECT_DOUBLE_EQ(back.device_peak_gb(), 6.0);
  EXPECT_DOUBLE_EQ(back.device_context_gb(), 0.625);
  ASSERT_EQ(back.phases_size(), 3);
  EXPECT_EQ(back.phases(2).phase(), "eval");
  EXPECT_DOUBLE_EQ(back.phases(2).allocated_gb(), 1.25);
  EXPECT_DOUBLE_EQ(back.phases(0).device_gb(), 1.5);
  EXPECT_EQ(back.SerializeAsString(), run.SerializeAsString());
}

TEST_P(StoreTest, RefusesNewerSchemaAndKeepsTheData) {
  {
    auto store = Open();
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE((*store)->AddFactorSet(Set(1.2), true).ok());
  }
  ASSERT_TRUE(SetSchemaVersion(99).ok());
  auto refused = Open();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("version 99"), std::string::npos) << message;
  EXPECT_NE(message.find("newer than this planner's " +
                         std::to_string(KnownSchemaVersion())),
            std::string::npos)
      << message;
  // Nothing was lost: with the version put back the data is there.
  ASSERT_TRUE(SetSchemaVersion(KnownSchemaVersion()).ok());
  auto reopened = Open();
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_EQ((*(*reopened)->CurrentFactorSet())->version(), "fs-1");
}

// A schema older than the last one each backend had before SqlStore is
// not guessed at: refused, naming the versions.
TEST_P(StoreTest, RefusesASchemaOlderThanItUpgrades) {
  ASSERT_TRUE(Open().ok());
  ASSERT_TRUE(SetSchemaVersion(2).ok());
  auto refused = Open();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("schema version 2"), std::string::npos) << message;
  EXPECT_NE(message.find("older than the oldest this planner upgrades"),
            std::string::npos)
      << message;
}

TEST_P(StoreTest, UnknownVersionNeverBecomesCurrent) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::MeasuredRun run;
  run.set_template_("bert-base");
  run.set_batch(32);
  ASSERT_EQ(*(*store)->AddRuns({run}), 1);
  // A factor set naming a version that is not stored cannot become
  // current; the failed call leaves no history behind.
  EXPECT_EQ((*store)->SetCurrentFactorSet("fs-1").code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE((*store)->CurrentHistory()->empty());
  EXPECT_EQ((*store)->ListRuns()->size(), 1u);
}

TEST_P(StoreTest, KeepsTheAutotuneCacheByIdAndKey) {
  auto store = Open();
  ASSERT_TRUE(store.ok()) << store.status();
  v1::AutotuneRecord record;
  const std::string key("k\0ey\xff", 5);  // bytes, NUL included
  EXPECT_FALSE(*(*store)->PutAutotuneRecord("a1", key, record));
  EXPECT_TRUE(*(*store)->PutAutotuneRecord("a1", key, record));
  EXPECT_TRUE((*(*store)->FindAutotuneRecord("a1", key)).has_value());
  // Same id, other key bytes: a miss.
  EXPECT_FALSE((*(*store)->FindAutotuneRecord("a1", "key")).has_value());
  EXPECT_FALSE((*(*store)->FindAutotuneRecord("a2", key)).has_value());
  ASSERT_TRUE((*store)->PutAutotuneRecord("a0", "x", record).ok());
  auto entries = (*store)->ListAutotuneRecords();
  ASSERT_TRUE(entries.ok());
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_TRUE((*store)->DropAutotuneRecord("a1", false).ok());
  EXPECT_EQ((*store)->DropAutotuneRecord("a1", false).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->DropAutotuneRecord("a1", true).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ((*store)->ListAutotuneRecords()->size(), 1u);
  // A record a worker measured is dropped only with measured_too.
  v1::AutotuneRecord measured = record;
  measured.set_measured_by_probe("p-7");
  ASSERT_TRUE((*store)->PutAutotuneRecord("m1", "m", measured).ok());
  const absl::Status refused = (*store)->DropAutotuneRecord("m1", false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("measured by probe p-7"), std::string::npos)
      << refused.message();
  EXPECT_EQ((*store)->ListAutotuneRecords()->size(), 2u);
  EXPECT_TRUE((*store)->DropAutotuneRecord("m1", true).ok());
  EXPECT_EQ((*store)->ListAutotuneRecords()->size(), 1u);
}

}  // namespace
}  // namespace headroom
