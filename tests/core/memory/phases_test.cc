#include "core/memory/phases.h"

#include "gtest/gtest.h"

namespace headroom {
namespace {

// 32 blocks of grouped-query attention: 8 KV heads of 128.
v1::ModelSpec Spec() {
  v1::ModelSpec spec;
  spec.set_positions(512);
  v1::Layer* blocks = spec.add_layers();
  blocks->set_repeat(32);
  v1::Attention* attention =
      blocks->mutable_block()->add_layers()->mutable_attention();
  attention->set_hidden(4096);
  attention->set_heads(32);
  attention->set_kv_heads(8);
  return spec;
}

MemoryProfile Profile() {
  MemoryProfile p;
  p.params = 7'000'000'000;
  p.states.params = p.params;
  p.states.weights = 14e9;
  p.states.gradients = 0.1e9;
  p.states.states = 0.2e9;
  p.states.dequantized = 0.5e9;
  p.per_sample_bytes[kTransient] = 0.25e9;
  return p;
}

v1::TrainingSetup PhasedSetup() {
  v1::TrainingSetup setup;
  setup.set_precision(v1::TrainingSetup::BF16_TRUE);
  for (auto phase : {v1::SAVE, v1::LOAD, v1::GENERATE, v1::EVAL}) {
    setup.add_phases(phase);
  }
  return setup;
}

const ComponentArray kOnes = {1, 1, 1, 1, 1, 1};

TEST(PhasesTest, DefaultIsLoadAndStepAndStepIsAlwaysThere) {
  EXPECT_EQ(PhasesOf(v1::TrainingSetup()),
            (std::vector<v1::JobPhase>{v1::LOAD, v1::STEP}));
  v1::TrainingSetup eval_only;
  eval_only.add_phases(v1::EVAL);
  eval_only.add_phases(v1::EVAL);
  EXPECT_EQ(PhasesOf(eval_only),
            (std::vector<v1::JobPhase>{v1::STEP, v1::EVAL}));
}

// 2 x 8 x 128 x 2 bytes x 32 layers.
TEST(PhasesTest, KvCacheCountsEveryAttentionLayer) {
  EXPECT_EQ(KvCacheBytesPerPosition(Spec(), PhasedSetup()), 131072);
}

// By hand: load = 14 + 0.5 dequantised = 14.5 GB; eval = 14 weights +
// 0.2 state + 4 x 0.25 forward = 15.2; generate = eval + 131072 B x (512 +
// 128) x 4 = 15.2 + 0.33554432; save = 14.2 (views, nothing gathered).
TEST(PhasesTest, OneGpuPhasesByHand) {
  const std::vector<PhaseBytes> phases =
      PhasePeaks(Profile(), Spec(), PhasedSetup(), kOnes, 4, 20.0);
  ASSERT_EQ(phases.size(), 5u);
  EXPECT_EQ(phases[0].phase, v1::LOAD);
  EXPECT_NEAR(phases[0].allocated_gb, 14.5, 1e-9);
  EXPECT_EQ(phases[1].phase, v1::STEP);
  EXPECT_EQ(phases[1].allocated_gb, 20.0);
  EXPECT_EQ(phases[2].phase, v1::EVAL);
  EXPECT_NEAR(phases[2].allocated_gb, 15.2, 1e-9);
  EXPECT_EQ(phases[3].phase, v1::GENERATE);
  EXPECT_NEAR(phases[3].allocated_gb, 15.2 + 0.33554432, 1e-9);
  EXPECT_EQ(phases[4].phase, v1::SAVE);
  EXPECT_NEAR(phases[4].allocated_gb, 14.2, 1e-9);
}

// FULL_SHARD over 4 GPUs: a 3.5 GB weight shard and a 1 GB gathered unit;
// load = 3.5 + 1 + 0.5 = 5.0; save gathers the whole model in bf16 (7e9 x
// 2 B = 14 GB) beside 3.5 + 0.05 state + 1 unit: 18.55. An eval batch of 2
// halves the forward buffers: 4.55 + 0.5.
TEST(PhasesTest, ShardedLoadAndSaveByHand) {
  MemoryProfile p = Profile();
  p.parallel.active = true;
  p.parallel.layout.stage = 3;
  p.parallel.layout.shard_degree = 4;
  p.parallel.gathered_units = 1e9;
  v1::TrainingSetup setup = PhasedSetup();
  setup.set_eval_batch(2);
  const std::vector<PhaseBytes> phases =
      PhasePeaks(p, Spec(), setup, kOnes, 4, 9.0);
  EXPECT_NEAR(phases[0].allocated_gb, 5.0, 1e-9);
  EXPECT_NEAR(phases[2].allocated_gb, 4.55 + 0.5, 1e-9);
  EXPECT_NEAR(phases[4].allocated_gb, 18.55, 1e-9);
  EXPECT_NE(phases[4].holds.find("whole model"), std::string::npos);
}

// Factors scale the states and the buffers as in the step.
TEST(PhasesTest, FactorsApply) {
  const ComponentArray factors = {2, 1, 1, 1, 1, 3};
  const std::vector<PhaseBytes> phases =
      PhasePeaks(Profile(), Spec(), PhasedSetup(), factors, 4, 20.0);
  EXPECT_NEAR(phases[0].allocated_gb, 29.0, 1e-9);        // 2 x 14.5
  EXPECT_NEAR(phases[2].allocated_gb, 28.4 + 3.0, 1e-9);  // 2 x 14.2 + 3 x 1
}

}  // namespace
}  // namespace headroom
