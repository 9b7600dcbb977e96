#include "core/evidence/run_checks.h"

#include <string>
#include <tuple>
#include <vector>

#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "io/catalog_files.h"
#include "io/files.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

class RunChecksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto catalog = LoadModelCatalog(kRoot + "/models");
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = std::move(*catalog);
  }

  // A bert-base run on an L4 as a worker stores one.
  static v1::MeasuredRun BertOnL4() {
    v1::MeasuredRun run;
    run.set_template_("bert-base");
    run.set_gpu("L4");
    run.set_batch(8);
    run.set_params(31120896);
    run.set_measured_peak_gb(1.2);
    run.set_step_seconds(0.25);
    run.set_timed_steps(10);
    run.set_energy_j(10 * 0.25 * 60);  // 60 W
    return run;
  }

  std::string Refused(const v1::MeasuredRun& run) {
    const absl::Status status = CheckMeasuredRun(run, catalog_, "runs[0]");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
  }

  ModelCatalog catalog_;
};

// Every shipped run (the reference's and our harness's) passes: the checks
// refuse nothing a real measurement holds.
TEST_F(RunChecksTest, ShippedRunsPass) {
  for (const char* file :
       {"/data/memory-runs.jsonl", "/data/harness-runs.jsonl"}) {
    auto runs = LoadRunsJsonl(kRoot + file);
    ASSERT_TRUE(runs.ok()) << runs.status();
    ASSERT_GT(runs->size(), 100u);
    for (size_t i = 0; i < runs->size(); ++i) {
      EXPECT_TRUE(CheckMeasuredRun((*runs)[i], catalog_, "run").ok())
          << file << " line " << i + 1 << ": "
          << CheckMeasuredRun((*runs)[i], catalog_, "run");
    }
  }
  EXPECT_TRUE(CheckMeasuredRun(BertOnL4(), catalog_, "run").ok());
}

// Issue 32: a Refit stored 4294967295 GPUs, an unknown parallel enum and
// params 1 for bert-base, all of which CheckFit refuses. Each is refused by
// the row and the field.
TEST_F(RunChecksTest, RefusesWhatCheckFitRefuses) {
  v1::MeasuredRun run = BertOnL4();
  run.mutable_setup()->set_gpus(4294967295u);
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].setup.gpus = 4294967295 is invalid; allowed "
                        "0 or 1 (one GPU) .. 512"));
  run = BertOnL4();
  run.mutable_setup()->set_parallel(
      static_cast<v1::TrainingSetup::Parallel>(99));
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].setup.parallel = 99 is invalid"));
  run = BertOnL4();
  run.mutable_setup()->set_precision(
      static_cast<v1::TrainingSetup::Precision>(42));
  EXPECT_THAT(Refused(run), HasSubstr("runs[0].setup.precision = 42"));
  run = BertOnL4();
  run.set_params(1);
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].params = 1 is not the model's count: "
                        "template 'bert-base' has 31120896 parameters; "
                        "allowed within 2 % of it"));
  run.set_params(32054522);  // 3 % more
  EXPECT_THAT(Refused(run), HasSubstr("runs[0].params = 32054522"));
  run.set_params(31432104);  // 1 % more
  EXPECT_TRUE(CheckMeasuredRun(run, catalog_, "runs[0]").ok());
}

// Issue 32: a worker stored energy 1e300 J and a step of 1e9 s, and an
// answer then said 3.3e299 J per step. Each is out of the table's range,
// and energy a card could not draw over its steps is refused too.
TEST_F(RunChecksTest, RefusesEnergyAndTimeNoCardProduces) {
  v1::MeasuredRun run = BertOnL4();
  run.set_energy_j(1e300);
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].energy_j = 1e+300 is out of range; allowed "
                        "[0, 6.3072e+10] J"));
  run = BertOnL4();
  run.set_step_seconds(1e9);
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].step_seconds = 1e+09 is out of range; "
                        "allowed (0, 86400] s"));
  run = BertOnL4();
  run.set_energy_j(1e6);  // 1 MJ over 2.5 s
  EXPECT_THAT(Refused(run), HasSubstr("is a mean 400000 W per GPU"));
  run = BertOnL4();
  run.set_timed_steps(4294967295u);
  EXPECT_THAT(Refused(run), HasSubstr("runs[0].timed_steps = 4294967295"));
}

// Peaks are bounded by the catalog card, read as GiB: a sim L4 that said
// it had 1024 GB stored 900 GB peaks.
TEST_F(RunChecksTest, PeaksAreBoundedByTheCatalogCard) {
  v1::MeasuredRun run = BertOnL4();
  run.set_measured_peak_gb(900);
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].measured_peak_gb = 900 is out of range; "
                        "allowed (0, 25.7688] GB (L4 has 24 GB"));
  run.set_measured_peak_gb(25);
  EXPECT_TRUE(CheckMeasuredRun(run, catalog_, "runs[0]").ok());
  run.set_device_peak_gb(1e300);
  EXPECT_THAT(Refused(run), HasSubstr("runs[0].device_peak_gb = 1e+300"));
  run = BertOnL4();
  run.mutable_setup()->set_gpus(2);
  run.add_rank_peaks_gb(1.2);
  run.add_rank_peaks_gb(500);
  EXPECT_THAT(Refused(run), HasSubstr("runs[0].rank_peaks_gb[1] = 500"));
  run.clear_rank_peaks_gb();
  run.add_rank_peaks_gb(1.2);
  EXPECT_THAT(Refused(run), HasSubstr("needs one per rank"));
}

// Issue 30: the allocator reserves at least what it allocated and the
// device holds at least what was reserved, over the run and in each phase.
// A run out of that order is refused naming both fields and values,
// whichever path it arrives by.
TEST_F(RunChecksTest, MemoryFiguresFollowTheDevicesOrder) {
  v1::MeasuredRun run = BertOnL4();  // 1.2 GB allocated
  run.set_peak_reserved_gb(1.5);
  run.set_device_peak_gb(2.0);
  run.set_device_context_gb(0.5);
  for (const auto& [name, allocated, reserved, device] :
       {std::tuple<const char*, double, double, double>{"load", 0.25, 0.25,
                                                        0.75},
        {"first-step", 1.2, 1.5, 2.0},
        {"eval", 0.5, 1.5, 2.0}}) {
    v1::PhaseMeasurement& phase = *run.add_phases();
    phase.set_phase(name);
    phase.set_allocated_gb(allocated);
    phase.set_reserved_gb(reserved);
    phase.set_device_gb(device);
  }
  EXPECT_TRUE(CheckMeasuredRun(run, catalog_, "runs[0]").ok())
      << CheckMeasuredRun(run, catalog_, "runs[0]");

  v1::MeasuredRun bad = run;
  bad.set_peak_reserved_gb(1.1);
  EXPECT_THAT(Refused(bad),
              HasSubstr("runs[0].peak_reserved_gb = 1.1 is below "
                        "runs[0].measured_peak_gb = 1.2; the caching "
                        "allocator reserves at least what it allocated"));
  bad = run;
  bad.set_device_peak_gb(1.4);
  EXPECT_THAT(Refused(bad),
              HasSubstr("runs[0].device_peak_gb = 1.4 is below "
                        "runs[0].peak_reserved_gb = 1.5; the device holds at "
                        "least what the allocator reserved"));
  bad = run;
  bad.mutable_phases(2)->set_reserved_gb(0.4);
  EXPECT_THAT(Refused(bad),
              HasSubstr("runs[0].phases[2].reserved_gb = 0.4 is below "
                        "runs[0].phases[2].allocated_gb = 0.5"));
  bad = run;
  bad.mutable_phases(0)->set_device_gb(0.2);
  EXPECT_THAT(Refused(bad),
              HasSubstr("runs[0].phases[0].device_gb = 0.2 is below "
                        "runs[0].phases[0].reserved_gb = 0.25"));
  bad = run;
  bad.mutable_phases(1)->set_phase("warmup");
  EXPECT_THAT(Refused(bad),
              HasSubstr("runs[0].phases[1].phase = \"warmup\" is unknown; "
                        "allowed load, first-step, step, eval, generate, "
                        "save"));
  bad = run;
  bad.mutable_phases(2)->set_phase("first-step");
  EXPECT_THAT(Refused(bad), HasSubstr("runs[0].phases[2].phase = "
                                      "\"first-step\" is measured twice"));
  bad = run;
  bad.mutable_phases(1)->set_device_gb(1e300);
  EXPECT_THAT(Refused(bad), HasSubstr("runs[0].phases[1].device_gb = 1e+300 "
                                      "is out of range"));
  bad = run;
  bad.set_device_context_gb(-1);
  EXPECT_THAT(Refused(bad), HasSubstr("runs[0].device_context_gb = -1"));
  bad = run;
  bad.set_peak_reserved_gb(900);
  EXPECT_THAT(Refused(bad), HasSubstr("runs[0].peak_reserved_gb = 900 is out "
                                      "of range"));
}

// A figure that is absent is not compared: runs stored before issue 30
// (no reserved, context or phases) and an OOM run pass as they did, and a
// phase may carry only the figures it measured.
TEST_F(RunChecksTest, AbsentFiguresAreNotCompared) {
  v1::MeasuredRun run = BertOnL4();
  run.set_device_peak_gb(0.9);  // below allocated: sampled, never compared
  EXPECT_TRUE(CheckMeasuredRun(run, catalog_, "runs[0]").ok());
  run.clear_measured_peak_gb();
  run.set_oom_on_gb(24);
  run.set_peak_reserved_gb(0.5);
  run.set_device_peak_gb(0.75);
  v1::PhaseMeasurement& load = *run.add_phases();
  load.set_phase("load");
  load.set_allocated_gb(0.5);
  load.set_device_gb(0.25);  // no reserved figure between them
  EXPECT_TRUE(CheckMeasuredRun(run, catalog_, "runs[0]").ok())
      << CheckMeasuredRun(run, catalog_, "runs[0]");
}

TEST(PhaseMeasurementNameTest, SpellsJobPhaseAsTheHarnessDoes) {
  EXPECT_EQ(PhaseMeasurementNames(),
            "load, first-step, step, eval, generate, save");
  EXPECT_TRUE(IsPhaseMeasurementName("save"));
  EXPECT_FALSE(IsPhaseMeasurementName("SAVE"));
  EXPECT_FALSE(IsPhaseMeasurementName(""));
}

// A run of an inline spec carries the spec, checked as at import: a count
// that overflows is named, and params must be the spec's own.
TEST_F(RunChecksTest, AnInlineSpecIsCheckedAsAtImport) {
  v1::MeasuredRun run = BertOnL4();
  run.clear_template_();
  v1::ModelSpec& spec = *run.mutable_spec();
  spec.set_name("wide");
  spec.set_positions(1);
  v1::Layer& fc = *spec.add_layers();
  fc.set_name("fc1");
  fc.mutable_linear()->set_in_features(uint64_t{1} << 32);
  fc.mutable_linear()->set_out_features(uint64_t{1} << 32);
  run.set_params(1);
  EXPECT_THAT(Refused(run),
              HasSubstr("runs[0].spec: spec.layers[0]: layer 'fc1' (Linear): "
                        "4294967296 x 4294967296 overflows the parameter "
                        "count"));
  fc.mutable_linear()->set_in_features(1000);
  fc.mutable_linear()->set_out_features(1000);
  run.set_params(CountParams(spec));
  EXPECT_TRUE(CheckMeasuredRun(run, catalog_, "runs[0]").ok());
  run.set_params(31120896);
  EXPECT_THAT(Refused(run), HasSubstr("its spec has "));
}

TEST(CheckEnergyRunTest, AWindowWithinTheTablePasses) {
  v1::EnergyRun run;
  run.set_model("TinyLlama-1.1B");
  run.set_params_b(1.1);
  run.set_gpu("RTX 5090");
  run.set_quant("nf4");
  run.set_tokens_generated(2000);
  run.set_energy_j(3000);
  run.set_idle_w(40);
  run.set_window_s(10);
  EXPECT_TRUE(CheckEnergyRun(run, "energy run").ok());
  run.set_energy_j(1e300);
  EXPECT_EQ(CheckEnergyRun(run, "energy run").message(),
            "energy run (TinyLlama-1.1B).energy_j = 1e+300 is out of range; "
            "allowed (0, 1.728e+08] J");
  run.set_energy_j(3000);
  run.set_tokens_per_s(1e12);
  EXPECT_THAT(CheckEnergyRun(run, "energy run").message(),
              HasSubstr("tokens_per_s = 1e+12 is out of range"));
}

}  // namespace
}  // namespace headroom
