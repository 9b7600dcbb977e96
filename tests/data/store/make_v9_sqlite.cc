// Writes v9.db and v9.expected.txt (next to it): a SQLite store made by the
// store of commit a72e992 (schema version 9, JSON bodies) holding every
// kind of row, and what that store read back. Not built by CMake: it was
// compiled once against /work/main (that commit) to make the committed
// files; store_migration_test.cc opens v9.db with today's store.

#include <fstream>
#include <iostream>

#include "server/store/sqlite_store.h"
#include "tests/server/store/store_dump.h"

using namespace headroom;  // NOLINT: a one-off tool

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string dir = argv[1];
  auto opened = SqliteStore::Open(dir + "/v9.db");
  if (!opened.ok()) return 1;
  Store& store = **opened;
  v1::FactorSet set;
  set.set_created_unix(1700000000);
  set.mutable_factors()->set_optimizer(1.25);
  set.set_headroom(0.1);
  set.set_trained_on("data/memory-runs.jsonl (3 rows)");
  (void)store.AddFactorSet(set, true);
  set.set_k90(1.17);
  (void)store.AddFactorSet(set, false);
  (void)store.SetCurrentFactorSet("fs-1");
  std::vector<v1::MeasuredRun> runs(3);
  runs[0].set_template_("gpt2");
  runs[0].set_gpu("L4");
  runs[0].set_batch(8);
  runs[0].set_measured_peak_gb(6.5);
  runs[1] = runs[0];
  runs[1].set_batch(16);
  runs[1].set_oom_on_gb(24);
  runs[1].clear_measured_peak_gb();
  runs[2] = runs[0];  // stored once
  (void)store.AddRuns(runs);
  v1::EnergyCurveSet curves;
  curves.set_model("tokens");
  (*curves.mutable_s_cap())["H100"] = 0.5;
  (void)store.AddEnergyCurveSet(curves, true);
  (*curves.mutable_arch_label())["H100"] = "Hopper";
  (void)store.AddEnergyCurveSet(curves, true);
  std::vector<v1::DensityRawRun> density(2);
  density[0].set_id("d-1");
  density[0].set_arch("llama");
  density[0].set_dtype("bf16");
  density[0].set_mode("serve");
  density[1] = density[0];
  density[1].set_id("d-2");
  density[1].set_mode("train");
  (void)store.AddDensityRuns(density);
  v1::Probe probe;
  probe.set_gpu("L4");
  probe.set_template_("gpt2");
  probe.mutable_request()->add_batches(8);
  probe.mutable_request()->add_batches(16);
  probe.set_created_unix_ms(1700000000000);
  for (int i = 0; i < 4; ++i) (void)store.AddProbe(probe);
  auto claimed = store.ClaimProbe("w-1", {"L4"}, {}, 1700000001000, 60000);
  if (!claimed.ok() || !claimed->has_value()) return 1;
  const std::string assignment = (*claimed)->assignment_id();
  v1::BatchResult measured;
  measured.set_batch(8);
  measured.set_peak_allocated_gb(6.5);
  measured.set_step_seconds(0.25);
  measured.set_samples(12);
  v1::MeasuredRun run = runs[0];
  run.set_source("probe p-1 repetition 0");
  run.set_step_seconds(0.25);
  (void)store.RecordProbeResult("p-1", assignment, "w-1", "p-1/a/8", measured,
                                run);
  v1::BatchResult oom;
  oom.set_batch(16);
  oom.set_oom(true);
  (void)store.RecordProbeResult("p-1", assignment, "w-1", "p-1/a/16", oom,
                                std::nullopt);
  (void)store.FinishAssignment("p-1", assignment, v1::Probe::SUCCEEDED, "",
                               "{\"note\": 1}", false);
  (void)store.ClaimProbe("w-2", {"L4"}, {}, 1700000002000, 60000);
  (void)store.CancelProbe("p-3");
  v1::AutotuneRecord record;
  record.set_attention("sdpa");
  (void)store.PutAutotuneRecord("at-1", std::string("k\0ey", 4), record);
  v1::WorkerStatus worker;
  worker.mutable_hello()->set_worker_id("w-1");
  worker.mutable_hello()->set_hostname("node-1");
  worker.set_last_seen_unix_ms(1700000003000);
  (void)store.PutWorker(worker);
  worker.mutable_hello()->set_worker_id("w-2");
  (void)store.PutWorker(worker);
  std::ofstream(dir + "/v9.expected.txt") << testing::DumpStore(store);
  return 0;
}
