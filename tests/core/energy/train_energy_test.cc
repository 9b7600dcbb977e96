// Training energy: FLOPs per step worked out by hand on a small model, the
// card's J/TFLOP, and measured answers at, between and beyond the measured
// batches.

#include "core/energy/train_energy.h"

#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// 16 positions; an embedding (no products), 2 x [attention 8 wide, 2
// heads; MLP 8 -> 32], a logits linear 8 -> 100.
v1::ModelSpec Small() {
  v1::ModelSpec spec;
  spec.set_name("small");
  spec.set_positions(16);
  auto* embedding = spec.add_layers()->mutable_embedding();
  embedding->set_num_embeddings(100);
  embedding->set_dim(8);
  v1::Layer* blocks = spec.add_layers();
  blocks->set_repeat(2);
  auto* attention = blocks->mutable_block()->add_layers()->mutable_attention();
  attention->set_hidden(8);
  attention->set_heads(2);
  auto* norm = blocks->mutable_block()->add_layers()->mutable_norm();
  norm->set_kind(v1::Norm::LAYER);
  norm->set_dim(8);
  auto* mlp = blocks->mutable_block()->add_layers()->mutable_mlp();
  mlp->set_hidden(8);
  mlp->set_ffn(32);
  auto* head = spec.add_layers()->mutable_linear();
  head->set_in_features(8);
  head->set_out_features(100);
  head->set_logits(true);
  EXPECT_TRUE(ValidateSpec(spec).ok());
  return spec;
}

TEST(TrainFlopsTest, SmallModelByHand) {
  // Per sample at 16 positions: attention q 2*16*8*8 = 2048, k and v
  // 2*2*16*8*8 = 4096, out 2048, scores 2*2*16*16*2*4 = 8192 -> 16384;
  // MLP 2*16*8*32*2 = 16384; two blocks 65536; head 2*16*8*100 = 25600.
  const StepFlops flops = FlopsPerStep(Small(), {}, 3);
  EXPECT_EQ(flops.positions, 16u);
  EXPECT_EQ(flops.tokens_per_step, 48u);
  EXPECT_DOUBLE_EQ(flops.forward_flops, 3 * 91136.0);
  EXPECT_DOUBLE_EQ(flops.step_flops, 3 * 3 * 91136.0);
}

TEST(TrainFlopsTest, CheckpointingAddsAForwardAndPositionsScale) {
  v1::TrainingSetup setup;
  setup.set_activation_checkpointing(true);
  EXPECT_DOUBLE_EQ(FlopsPerStep(Small(), setup, 1).step_flops, 4 * 91136.0);
  // At 32 positions: attention 4096 + 8192 + 4096 + 2*2*32*32*8 = 49152,
  // MLP 32768, two blocks 163840, head 51200.
  v1::TrainingSetup longer;
  longer.set_positions(32);
  const StepFlops flops = FlopsPerStep(Small(), longer, 1);
  EXPECT_EQ(flops.tokens_per_step, 32u);
  EXPECT_DOUBLE_EQ(flops.forward_flops, 215040.0);
}

TEST(TrainFlopsTest, WindowAndGroupedQueryAttention) {
  v1::ModelSpec spec = Small();
  auto* attention = spec.mutable_layers(1)
                        ->mutable_block()
                        ->mutable_layers(0)
                        ->mutable_attention();
  attention->set_window(4);
  // Scores over 4 keys: 2*2*16*4*8 = 2048 instead of 8192.
  EXPECT_DOUBLE_EQ(FlopsPerStep(spec, {}, 1).forward_flops,
                   91136.0 - 2 * (8192 - 2048));
  attention->set_window(0);
  attention->set_kv_heads(1);
  // One key/value head: k and v 2*2*16*8*4 = 2048 instead of 4096.
  EXPECT_DOUBLE_EQ(FlopsPerStep(spec, {}, 1).forward_flops,
                   91136.0 - 2 * (4096 - 2048));
}

TEST(TrainFlopsTest, ConvRecurrentAndMoe) {
  v1::ModelSpec spec;
  spec.set_name("mixed");
  spec.set_positions(10);
  v1::Layer* conv = spec.add_layers();
  conv->set_positions(4);
  conv->mutable_conv()->set_in_channels(3);
  conv->mutable_conv()->set_out_channels(8);
  conv->mutable_conv()->add_kernel(3);
  conv->mutable_conv()->set_dims(2);
  // 2 * 4 positions * 3 * 8 * 9 = 1728.
  EXPECT_DOUBLE_EQ(FlopsPerStep(spec, {}, 1).forward_flops, 1728);
  spec.clear_layers();
  auto* lstm = spec.add_layers()->mutable_recurrent();
  lstm->set_cell(v1::Recurrent::LSTM);
  lstm->set_input_size(4);
  lstm->set_hidden(6);
  // 2 * 4 gates * 6 * (4 + 6) * 10 steps = 4800.
  EXPECT_DOUBLE_EQ(FlopsPerStep(spec, {}, 1).forward_flops, 4800);
  spec.clear_layers();
  auto* moe = spec.add_layers()->mutable_moe();
  moe->set_hidden(8);
  moe->set_ffn(16);
  moe->set_experts(4);
  moe->set_top_k(2);
  moe->set_shared_experts(1);
  // Router 2*10*8*4 = 640, three experts of 2*10*8*16*2 = 5120 each.
  EXPECT_DOUBLE_EQ(FlopsPerStep(spec, {}, 1).forward_flops, 640 + 3 * 5120);
}

TEST(TrainJoulesPerTflopTest, DatasheetIsTdpOverPeak) {
  absl::StatusOr<GpuInfo> l4 = FindGpu("L4");
  ASSERT_TRUE(l4.ok());
  absl::StatusOr<JoulesPerTflop> j = DatasheetJoulesPerTflop(*l4);
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_DOUBLE_EQ(j->value, 72.0 / 121.0);
  EXPECT_THAT(j->source, HasSubstr("TDP 72 W / 121 dense fp16 TFLOP/s"));
  // A card the catalog has no board power for needs a cuda probe.
  GpuInfo unknown = *l4;
  unknown.name = "L4-unrated";
  unknown.tdp_w = 0;
  absl::StatusOr<JoulesPerTflop> none = DatasheetJoulesPerTflop(unknown);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(none.status().message(),
              HasSubstr("no published TDP for L4-unrated"));
}

TEST(TrainJoulesPerTflopTest, CudaProbeReportsAndTheirMedian) {
  EXPECT_EQ(GemmJoulesPerTflopOf(R"({"gemm":{"j_per_tflop":1.25}})"), 1.25);
  EXPECT_EQ(GemmJoulesPerTflopOf(R"({"gemm":{"j_per_tflop":null}})"),
            std::nullopt);
  EXPECT_EQ(GemmJoulesPerTflopOf(R"({"gemm":{"j_per_tflop":-1}})"),
            std::nullopt);
  EXPECT_EQ(GemmJoulesPerTflopOf("not json"), std::nullopt);
  EXPECT_EQ(GemmJoulesPerTflopOf(""), std::nullopt);
  EXPECT_EQ(MeasuredJoulesPerTflop({}, "L4"), std::nullopt);
  std::optional<JoulesPerTflop> j = MeasuredJoulesPerTflop(
      {{"p-1", "w", 3.0}, {"p-2", "w", 1.0}, {"p-3", "w", 2.0}}, "L4");
  ASSERT_TRUE(j.has_value());
  EXPECT_EQ(j->value, 2.0);
  EXPECT_THAT(j->source,
              HasSubstr("median of 3 bf16 GEMM runs (p-1, p-2, p-3)"));
}

TrainEnergyQuestion Question(uint32_t batch) {
  TrainEnergyQuestion q;
  q.model_key = "mk-1";
  q.gpu = "L4";
  q.batch = batch;
  q.flops = FlopsPerStep(Small(), {}, batch);
  q.j_per_tflop = {2.0, "a test"};
  return q;
}

TEST(TrainEnergyAnswerTest, ComputeModelWithoutRuns) {
  const v1::TrainEnergyResponse answer = AnswerTrainEnergy(Question(4));
  EXPECT_FALSE(answer.has_measured());
  EXPECT_DOUBLE_EQ(answer.answer().joules_per_step(),
                   4 * 3 * 91136.0 / 1e12 * 2.0);
  EXPECT_DOUBLE_EQ(answer.answer().joules_per_1k_tokens(),
                   answer.answer().joules_per_step() / 64 * 1000);
  EXPECT_THAT(answer.answer().basis(),
              StartsWith("compute model: 0.000 TFLOP per step x 2.000 "
                         "J/TFLOP from a test"));
}

TEST(TrainEnergyAnswerTest, MeasuredAtBetweenAndBeyondTheBatches) {
  TrainEnergyQuestion q = Question(4);
  q.runs = {{4, 10, "w1", true}, {4, 12, "w1", true}, {8, 20, "w2", true}};
  v1::TrainEnergyResponse at = AnswerTrainEnergy(q);
  EXPECT_DOUBLE_EQ(at.answer().joules_per_step(), 11);
  EXPECT_EQ(at.evidence().method(), "mean at the batch");
  EXPECT_EQ(at.answer().basis(),
            "measured: 3 runs of key mk-1 on L4 (simulated), mean at the "
            "batch");
  EXPECT_THAT(at.compute_model().basis(), StartsWith("compute model:"));
  EXPECT_EQ(at.evidence().batches_size(), 2);
  EXPECT_EQ(at.evidence().workers_size(), 2);
  // Least squares through (4,10), (4,12), (8,20): J = 2 + 2.25 x batch.
  q.batch = 6;
  q.flops = FlopsPerStep(Small(), {}, 6);
  v1::TrainEnergyResponse between = AnswerTrainEnergy(q);
  EXPECT_DOUBLE_EQ(between.answer().joules_per_step(), 15.5);
  EXPECT_EQ(between.evidence().method(), "line through the batches");
  EXPECT_FALSE(between.evidence().extrapolated());
  q.batch = 16;
  v1::TrainEnergyResponse beyond = AnswerTrainEnergy(q);
  EXPECT_DOUBLE_EQ(beyond.answer().joules_per_step(), 38);
  EXPECT_TRUE(beyond.evidence().extrapolated());
  EXPECT_THAT(beyond.answer().basis(),
              HasSubstr("batch 16 outside the measured 4..8"));
}

TEST(TrainEnergyAnswerTest, OneMeasuredBatchScalesWithTokens) {
  TrainEnergyQuestion q = Question(8);
  q.runs = {{4, 10, "w1", false}};
  const v1::TrainEnergyResponse answer = AnswerTrainEnergy(q);
  EXPECT_DOUBLE_EQ(answer.answer().joules_per_step(), 20);
  EXPECT_EQ(answer.evidence().method(), "proportional to tokens");
  EXPECT_DOUBLE_EQ(answer.answer().joules_per_1k_tokens(), 20.0 / 128 * 1000);
  EXPECT_THAT(answer.answer().basis(), Not(HasSubstr("simulated")));
}

TEST(TrainEnergyAnswerTest, NoJoulesPerTflopLeavesOnlyMeasured) {
  TrainEnergyQuestion q = Question(4);
  q.j_per_tflop = {0, "no published TDP for X"};
  q.runs = {{4, 10, "w1", false}};
  const v1::TrainEnergyResponse answer = AnswerTrainEnergy(q);
  EXPECT_DOUBLE_EQ(answer.answer().joules_per_step(), 10);
  EXPECT_EQ(answer.compute_model().basis(),
            "compute model unavailable: no published TDP for X");
}

}  // namespace
}  // namespace headroom
