// headroom fit's text answer on hand-built responses (the three figures per
// card and batch, every phase with --explain, the setup's bound, the device
// columns of --gpus auto), and the setup flags of issue 30.

#include "client/fit_output.h"

#include <sstream>
#include <string>

#include "client/cli_json.h"
#include "client/commands.h"
#include "client/rpc.h"
#include "client/setup_flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "headroom/v1/model.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void SetFigures(v1::MemoryFigures* f, double allocated, double reserved,
                double device) {
  f->set_allocated_gb(allocated);
  f->set_allocated_upper_gb(allocated * 1.2);
  f->set_reserved_gb(reserved);
  f->set_reserved_upper_gb(reserved * 1.2);
  f->set_device_gb(device);
  f->set_device_upper_gb(device * 1.2);
}

// A 7B QLoRA-like answer at batches 4 and 64 on one 24 GB card: batch 4
// decided by loading (bf16 weights before quantising), batch 64 by the
// step, whose device figure runs past a thousand GB.
v1::CheckFitResponse Answer() {
  v1::CheckFitResponse r;
  r.set_model("qwen2.5-7b");
  r.set_params(7615616512);
  r.set_factor_set_version("fs-1");
  r.set_headroom(1.15);
  r.set_k(1.2);
  r.set_coverage(0.95);
  for (uint32_t batch : {4u, 64u}) {
    v1::BatchEstimate* e = r.add_estimates();
    e->set_batch(batch);
    e->set_peak_gb(batch == 4 ? 9.5 : 1020.25);
    e->set_upper_gb(e->peak_gb() * 1.2);
    e->set_moment("backward start");
    e->set_phase(batch == 4 ? "load" : "step");
    e->mutable_basis()->set_kind(v1::Basis::PRIOR);
  }
  v1::TargetResult* t = r.add_targets();
  t->set_name("L4");
  t->set_memory_gb(24);
  t->set_regime("global");
  t->add_verdicts(v1::FITS);
  t->add_verdicts(v1::DOES_NOT_FIT);
  t->set_max_batch_fits(6);
  t->set_max_batch_not_does_not_fit(9);
  v1::DeviceCosts* d = t->mutable_device();
  d->set_reserved_ratio(1.125);
  d->set_context_gb(0.7);
  d->set_nccl_gb(0);
  d->set_reserved_basis("fitted on 12 torch-harness runs on H200");
  d->set_context_basis("the prior of any GPU");
  v1::TargetBatch* b4 = t->add_batches();
  b4->set_batch(4);
  b4->set_phase("load");
  SetFigures(b4->mutable_figures(), 15.2, 16, 16.5);
  v1::PhaseFigures* load = b4->add_phases();
  load->set_phase("load");
  load->set_holds("weights in bf16 before quantising");
  SetFigures(load->mutable_figures(), 15.2, 16, 16.5);
  v1::PhaseFigures* step = b4->add_phases();
  step->set_phase("step");
  step->set_holds("weights, adapters, optimizer state, activations");
  SetFigures(step->mutable_figures(), 9.5, 10.5, 11);
  v1::TargetBatch* b64 = t->add_batches();
  b64->set_batch(64);
  b64->set_phase("step");
  SetFigures(b64->mutable_figures(), 1020.25, 1147.78, 1148.48);
  v1::SetupKindBound* bound = r.mutable_bound();
  bound->set_kind("1gpu/qlora");
  bound->set_k_allocated(1.19);
  bound->set_k_reserved(1.22);
  bound->set_k_device(1.25);
  bound->set_measurements(14);
  return r;
}

std::string Print(const v1::CheckFitResponse& r, bool explain) {
  std::ostringstream out;
  PrintFit(r, explain, out);
  return out.str();
}

TEST(FitOutputTest, EachCardShowsTheThreeFiguresAndTheDecidingPhase) {
  const std::string text = Print(Answer(), false);
  // Columns as wide as their widest cell: 1148.48 widens the device
  // columns, the rows stay aligned.
  EXPECT_THAT(text,
              HasSubstr("L4 (24.00 GB): batch 4 FITS; batch 64 DOES_NOT_FIT\n"
                        "  batch  allocated GB  reserved GB  device GB  "
                        "device upper GB  phase  verdict\n"
                        "      4         15.20        16.00      16.50"
                        "            19.80  load   FITS\n"
                        "     64       1020.25      1147.78    1148.48"
                        "          1378.18  step   DOES_NOT_FIT\n"
                        "  largest batch FITS: 6; largest batch FITS or "
                        "BORDERLINE: 9\n"));
  EXPECT_THAT(text, HasSubstr("bound: kind 1gpu/qlora, k allocated 1.19, "
                              "reserved 1.22, device 1.25 (14 held-out "
                              "measurements of this kind)\n"));
  EXPECT_THAT(text, HasSubstr("A verdict compares the device upper bound x "
                              "headroom with the card"));
  // The allocator's peak of batch 4 is the load phase's.
  EXPECT_THAT(text, HasSubstr("backward start of the load phase\n"));
  // Without --explain: no phase tables, no device costs.
  EXPECT_THAT(text, Not(HasSubstr("device costs")));
  EXPECT_THAT(text, Not(HasSubstr("holds")));
}

TEST(FitOutputTest, ExplainShowsEveryPhaseAndTheDeviceCosts) {
  const std::string text = Print(Answer(), true);
  EXPECT_THAT(text,
              HasSubstr("  device costs: reserved = allocated x 1.125 (fitted "
                        "on 12 torch-harness runs on H200); device = reserved "
                        "+ CUDA context 0.70 GB (the prior of any GPU) + NCCL "
                        "0.00 GB\n"));
  // The verdict's arithmetic: 16.50 x 1.2 = 19.80, x 1.15 = 22.77 <= 24.
  EXPECT_THAT(text,
              HasSubstr("  batch 4: device upper 19.80 GB x headroom 1.15 = "
                        "22.77 GB on 24.00 GB: FITS, decided by phase load\n"
                        "    phase  allocated  upper  reserved  upper  device"
                        "  upper  holds\n"
                        "    load       15.20  18.24     16.00  19.20   16.50"
                        "  19.80  weights in bf16 before quantising\n"
                        "    step        9.50  11.40     10.50  12.60   11.00"
                        "  13.20  weights, adapters, optimizer state, "
                        "activations\n"));
  EXPECT_THAT(text, HasSubstr("  batch 64: device upper 1378.18 GB x headroom "
                              "1.15 = 1584.90 GB on 24.00 GB: DOES_NOT_FIT, "
                              "decided by phase step\n"));
}

TEST(FitOutputTest, TheBoundSaysWhenItsKIsTheWidestOrUntested) {
  v1::CheckFitResponse r = Answer();
  r.mutable_bound()->set_widest(true);
  r.mutable_bound()->set_measurements(2);
  EXPECT_THAT(Print(r, false),
              HasSubstr("(2 held-out measurements of this kind, too few: the "
                        "widest k of all kinds)\n"));
  r.mutable_bound()->set_untested(true);
  r.mutable_bound()->set_note("no FSDP-QLoRA run yet");
  EXPECT_THAT(
      Print(r, false),
      HasSubstr("device 1.25 (untested: no measurement of this kind, "
                "so no answer on it is FITS); no FSDP-QLoRA run yet\n"));
  // --explain says why a batch whose arithmetic fits is not FITS.
  r.mutable_targets(0)->set_verdicts(0, v1::BORDERLINE);
  EXPECT_THAT(Print(r, true),
              HasSubstr("22.77 GB on 24.00 GB: BORDERLINE (not FITS: nothing "
                        "of the setup's kind has been measured), decided by "
                        "phase load\n"));
  // A kind without k of its own: no zeros printed, its note says which k.
  v1::SetupKindBound* own = r.mutable_bound();
  own->Clear();
  own->set_kind("1gpu/full");
  own->set_note("the prior's held-out k");
  EXPECT_THAT(Print(r, false),
              HasSubstr("\nbound: kind 1gpu/full; the prior's held-out k\n"));
}

// A planner without the device figures: the answer reads as before them.
TEST(FitOutputTest, WithoutDeviceFiguresNothingNewIsPrinted) {
  v1::CheckFitResponse r = Answer();
  r.clear_bound();
  r.mutable_targets(0)->clear_batches();
  r.mutable_targets(0)->clear_device();
  for (v1::BatchEstimate& e : *r.mutable_estimates()) e.clear_phase();
  const std::string text = Print(r, true);
  EXPECT_THAT(text, HasSubstr("L4 (24.00 GB): batch 4 FITS; batch 64 "
                              "DOES_NOT_FIT\n  largest batch FITS: 6;"));
  EXPECT_THAT(text, Not(HasSubstr("allocated")));
  EXPECT_THAT(text, Not(HasSubstr("bound:")));
  EXPECT_THAT(text, Not(HasSubstr("phase")));
}

TEST(FitOutputTest, MinGpusShowsTheDeviceFigureWhereGiven) {
  v1::CheckFitResponse r = Answer();
  v1::MinGpusTarget* t = r.add_min_gpus();
  t->set_target("H100");
  t->set_memory_gb(80);
  v1::MinGpusStrategy* s = t->add_strategies();
  s->set_strategy("fsdp-full");
  s->set_gpus_fits(2);
  s->set_gpus_not_does_not_fit(2);
  s->set_gpus(2);
  s->set_nodes(1);
  s->set_peak_gb(40);
  s->set_device_gb(46.5);
  s->set_device_upper_gb(55.25);
  const std::string text = Print(r, false);
  EXPECT_THAT(text, HasSubstr("collective  device/GPU  device upper\n"));
  EXPECT_THAT(text, HasSubstr("    unfitted       46.50         55.25\n"));
  t->mutable_strategies(0)->clear_device_gb();
  t->mutable_strategies(0)->clear_device_upper_gb();
  EXPECT_THAT(Print(r, false), Not(HasSubstr("device/GPU")));
}

// --json is the response in the CLI's JSON convention: every new field.
TEST(FitOutputTest, JsonCarriesTheFiguresPhasesCostsAndBound) {
  const std::string json = CliJson(Answer());
  for (const char* field :
       {"\"batches\"", "\"deviceUpperGb\"", "\"reservedRatio\"",
        "\"contextBasis\"", "\"holds\"", "\"kDevice\"",
        "\"phase\": \"load\""}) {
    EXPECT_THAT(json, HasSubstr(field));
  }
}

TEST(SetupFlagsTest, PhasesAndTheAllocatorFillTheSetup) {
  Options options;
  options.model = "bert-base";
  options.batch = "8";
  options.gpu = "L4";
  options.setup["expandable_segments"] = "true";
  options.setup["phases"] = "load, first-step,step,eval,generate,save";
  options.setup["eval_batch"] = "16";
  options.setup["generate_tokens"] = "256";
  absl::StatusOr<v1::CheckFitRequest> request = FitRequest(options);
  ASSERT_TRUE(request.ok()) << request.status();
  const v1::TrainingSetup& setup = request->setup();
  EXPECT_TRUE(setup.expandable_segments());
  ASSERT_EQ(setup.phases_size(), 6);
  EXPECT_EQ(setup.phases(0), v1::LOAD);
  EXPECT_EQ(setup.phases(1), v1::FIRST_STEP);
  EXPECT_EQ(setup.phases(2), v1::STEP);
  EXPECT_EQ(setup.phases(3), v1::EVAL);
  EXPECT_EQ(setup.phases(4), v1::GENERATE);
  EXPECT_EQ(setup.phases(5), v1::SAVE);
  EXPECT_EQ(setup.eval_batch(), 16u);
  EXPECT_EQ(setup.generate_tokens(), 256u);

  // None given: the planner's default (load and step), said by no phase.
  Options plain;
  v1::TrainingSetup empty;
  ASSERT_TRUE(FillSetup(plain, &empty).ok());
  EXPECT_EQ(empty.phases_size(), 0);
  EXPECT_FALSE(empty.expandable_segments());
}

TEST(SetupFlagsTest, AnUnknownOrRepeatedPhaseNamesTheFlag) {
  Options options;
  options.setup["phases"] = "load,train";
  v1::TrainingSetup setup;
  absl::Status status = FillSetup(options, &setup);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "--phases 'train' is unknown; allowed load, first-step, step, "
            "eval, generate, save");
  options.setup["phases"] = "step,eval,step";
  status = FillSetup(options, &setup);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--phases names 'step' twice"));
}

}  // namespace
}  // namespace headroom::cli
