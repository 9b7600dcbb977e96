#include "core/memory/memory_profile.h"

#include "core/memory/model_spec.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

v1::ModelSpec Spec(const std::string& json) {
  auto spec = ParseSpecJson(json, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::ModelSpec();
}

// One linear layer: every byte count can be written down by hand.
TEST(MemoryProfileTest, LinearLayerFp32Adam) {
  const v1::ModelSpec spec = Spec(R"({"name": "lin", "positions": 10,
      "layers": [{"linear": {"in_features": 100, "out_features": 50, "bias": true}}]})");
  auto profile = BuildProfile(spec, v1::TrainingSetup());
  ASSERT_TRUE(profile.ok());
  EXPECT_EQ(profile->params, 5050u);
  // Backward start: weights and gradients (4 + 4) and two Adam moments (8)
  // per parameter.
  EXPECT_DOUBLE_EQ(profile->fixed_bytes[kOptimizer], 5050.0 * 16);
  // Optimizer update: weights, moments, gradients (4) and AdamW's fp32
  // intermediate (4); nothing else.
  EXPECT_DOUBLE_EQ(profile->update_bytes[kOptimizer], 5050.0 * 20);
  for (int c = kOutputs; c < kNumComponents; ++c) {
    EXPECT_EQ(profile->update_bytes[c], 0.0) << ComponentNames()[c];
  }
  // 10 positions x 50 outputs x 4 bytes per sample.
  EXPECT_DOUBLE_EQ(profile->per_sample_bytes[kOutputs], 2000.0);
  EXPECT_DOUBLE_EQ(profile->BytesAt(8)[kOutputs], 16000.0);
  EXPECT_DOUBLE_EQ(profile->BytesAt(8)[kTransient], 0.0);
}

// The peak is the larger moment: the update for a small batch, backward
// start once the activations outgrow the gradients and update buffers.
TEST(MemoryProfileTest, PeakMomentSwitchesWithBatch) {
  const v1::ModelSpec spec = Spec(R"({"name": "lin", "positions": 10,
      "layers": [{"linear": {"in_features": 100, "out_features": 50, "bias": true}}]})");
  auto profile = BuildProfile(spec, v1::TrainingSetup());
  ASSERT_TRUE(profile.ok());
  ComponentArray ones;
  ones.fill(1.0);
  // Backward start = 80800 + 2000 B; update = 101000: B <= 10 is the
  // update, B >= 11 backward start.
  Moment moment = Moment::kBackward;
  ComponentArray bytes = profile->PeakBytesAt(10, ones, &moment);
  EXPECT_EQ(moment, Moment::kUpdate);
  EXPECT_DOUBLE_EQ(PeakGb(bytes, ones), 101000 / 1e9);
  bytes = profile->PeakBytesAt(11, ones, &moment);
  EXPECT_EQ(moment, Moment::kBackward);
  EXPECT_DOUBLE_EQ(PeakGb(bytes, ones), (80800 + 22000) / 1e9);
  // A larger activation factor moves the switch to a smaller batch.
  ComponentArray heavy = ones;
  heavy[kOutputs] = 3.0;
  profile->PeakBytesAt(4, heavy, &moment);
  EXPECT_EQ(moment, Moment::kBackward);
  EXPECT_STREQ(MomentName(Moment::kUpdate), "optimizer update");
}

TEST(MemoryProfileTest, OptimizerAndPrecisionChangeBytesPerParameter) {
  const v1::ModelSpec spec = Spec(R"({"name": "lin", "positions": 1,
      "layers": [{"linear": {"in_features": 10, "out_features": 10}}]})");
  v1::TrainingSetup setup;
  setup.set_optimizer(v1::TrainingSetup::SGD);
  // 100 parameters: weights and gradients at both moments.
  EXPECT_DOUBLE_EQ(BuildProfile(spec, setup)->fixed_bytes[kOptimizer], 800.0);
  EXPECT_DOUBLE_EQ(BuildProfile(spec, setup)->update_bytes[kOptimizer], 800.0);
  setup.set_optimizer(v1::TrainingSetup::SGD_MOMENTUM);
  // The momentum buffer, and at the update one temporary.
  EXPECT_DOUBLE_EQ(BuildProfile(spec, setup)->fixed_bytes[kOptimizer], 1200.0);
  EXPECT_DOUBLE_EQ(BuildProfile(spec, setup)->update_bytes[kOptimizer], 1600.0);
  setup.set_optimizer(v1::TrainingSetup::ADAMW);
  setup.set_precision(v1::TrainingSetup::BF16_MIXED);
  auto mixed = BuildProfile(spec, setup);
  // fp32 master weights, gradients and moments, plus the bf16 copy the
  // forward saved; that copy is gone by the update.
  EXPECT_DOUBLE_EQ(mixed->fixed_bytes[kOptimizer], 1800.0);
  EXPECT_DOUBLE_EQ(mixed->update_bytes[kOptimizer], 2000.0);
  // Half-precision activations.
  EXPECT_DOUBLE_EQ(mixed->per_sample_bytes[kOutputs], 20.0);
}

TEST(MemoryProfileTest, FusedAttentionKeepsNoScoreMatrix) {
  const v1::ModelSpec spec = Spec(R"({"name": "attn", "positions": 128,
      "layers": [{"attention": {"hidden": 64, "heads": 4}}]})");
  v1::TrainingSetup setup;
  auto unfused = BuildProfile(spec, setup);
  // Softmax saves its probabilities: heads x q x k x 4 bytes; their
  // backward holds the gradients of probabilities and scores at once.
  EXPECT_DOUBLE_EQ(unfused->per_sample_bytes[kAttention], 4.0 * 128 * 128 * 4);
  EXPECT_DOUBLE_EQ(unfused->per_sample_bytes[kTransient],
                   4.0 * 128 * 128 * 2 * 4);
  EXPECT_DOUBLE_EQ(unfused->largest_tensor_per_sample, 4.0 * 128 * 128 * 4);
  setup.set_fused_attention(true);
  auto fused = BuildProfile(spec, setup);
  EXPECT_DOUBLE_EQ(fused->per_sample_bytes[kAttention], 0.0);
  EXPECT_DOUBLE_EQ(fused->per_sample_bytes[kTransient], 0.0);
}

TEST(MemoryProfileTest, CheckpointingKeepsBoundariesAndOneBlock) {
  const v1::ModelSpec spec = Spec(R"({"name": "stack", "positions": 10,
      "layers": [{"repeat": 12, "block": {"layers": [
        {"mlp": {"hidden": 8, "ffn": 32}}]}}]})");
  v1::TrainingSetup setup;
  auto plain = BuildProfile(spec, setup);
  setup.set_activation_checkpointing(true);
  auto checkpointed = BuildProfile(spec, setup);
  // Without: 12 blocks x (10 x 32 x 2 internal) x 4 bytes.
  EXPECT_DOUBLE_EQ(plain->per_sample_bytes[kInternal], 12 * 640 * 4.0);
  // With: one block's internals, plus 12 boundaries on top of its output.
  EXPECT_DOUBLE_EQ(checkpointed->per_sample_bytes[kInternal], 640 * 4.0);
  EXPECT_DOUBLE_EQ(checkpointed->per_sample_bytes[kOutputs],
                   12 * 320.0 + 320.0);
}

TEST(MemoryProfileTest, LogitsAreTheTransient) {
  const v1::ModelSpec spec = Spec(R"({"name": "lm", "positions": 100,
      "layers": [{"embedding": {"num_embeddings": 1000, "dim": 16}},
                 {"linear": {"in_features": 16, "out_features": 1000, "logits": true}}]})");
  auto profile = BuildProfile(spec, v1::TrainingSetup());
  // fp32 logits and their gradient.
  EXPECT_DOUBLE_EQ(profile->per_sample_bytes[kTransient], 100.0 * 1000 * 8);
  // The logits are the largest single tensor.
  EXPECT_DOUBLE_EQ(profile->largest_tensor_per_sample, 100.0 * 1000 * 4);
}

TEST(MemoryProfileTest, FrozenLayersKeepWeightsOnlyAndSaveNothing) {
  const v1::ModelSpec spec = Spec(R"({"name": "ema", "positions": 10,
      "layers": [{"frozen": true, "linear": {"in_features": 100, "out_features": 10}},
                 {"linear": {"in_features": 10, "out_features": 10}}]})");
  EXPECT_EQ(CountParams(spec), 1100u);
  EXPECT_EQ(CountTrainableParams(spec), 100u);
  auto profile = BuildProfile(spec, v1::TrainingSetup());
  // Frozen: 1000 weights x 4 bytes; trained: 100 x 16 bytes (AdamW) at
  // backward start, 100 x 20 at the update.
  EXPECT_DOUBLE_EQ(profile->fixed_bytes[kOptimizer], 1000.0 * 4 + 100.0 * 16);
  EXPECT_DOUBLE_EQ(profile->update_bytes[kOptimizer], 1000.0 * 4 + 100.0 * 20);
  // Only the trained layer's 10 x 10 outputs are saved.
  EXPECT_DOUBLE_EQ(profile->per_sample_bytes[kOutputs], 400.0);
}

TEST(MemoryProfileTest, RejectsUnknownEnumValues) {
  const v1::ModelSpec spec = Spec(R"({"name": "lin", "positions": 1,
      "layers": [{"linear": {"in_features": 10, "out_features": 10}}]})");
  v1::TrainingSetup setup;
  setup.set_precision(static_cast<v1::TrainingSetup::Precision>(42));
  auto profile = BuildProfile(spec, setup);
  ASSERT_FALSE(profile.ok());
  EXPECT_NE(profile.status().message().find("setup.precision"),
            std::string::npos);
}

}  // namespace
}  // namespace headroom
