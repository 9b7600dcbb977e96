// The setups of issue 31 item 4, byte by byte on models small enough to
// count by hand: chunked cross-entropy, selective checkpointing,
// activation offloading, LoRA on the head and the embeddings, 32-bit paged
// AdamW, torchao's low-bit AdamW and its gradient offload.

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/memory/training_setup.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using v1::TrainingSetup;

v1::ModelSpec Spec(const std::string& json) {
  auto spec = ParseSpecJson(json, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::ModelSpec();
}

MemoryProfile Profile(const v1::ModelSpec& spec, const TrainingSetup& setup) {
  auto profile = BuildProfile(spec, setup);
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.ok() ? *profile : MemoryProfile();
}

// The message ValidateSetup gives, "" when the setup is valid.
std::string Error(const TrainingSetup& setup) {
  const absl::Status s = ValidateSetup(setup);
  EXPECT_TRUE(s.ok() || s.code() == absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

bool Remarks(const v1::ModelSpec& spec, const TrainingSetup& setup,
             const std::string& needle) {
  const MemoryProfile p = Profile(spec, setup);
  for (const std::string& r : SetupAssumptions(spec, setup, p.states)) {
    if (absl::StrContains(r, needle)) return true;
  }
  return false;
}

// 100 positions, a 1,000 x 16 table and an untied 16 -> 1,000 head.
v1::ModelSpec Lm() {
  return Spec(R"({"name": "lm", "positions": 100,
      "layers": [{"embedding": {"num_embeddings": 1000, "dim": 16}},
                 {"linear": {"in_features": 16, "out_features": 1000, "logits": true}}]})");
}

TEST(SetupsTest, ChunkedCrossEntropyHoldsOneChunksFp32Logits) {
  TrainingSetup setup;
  setup.set_precision(TrainingSetup::BF16_MIXED);
  // Full: 100 x 1,000 = 100,000 fp32 logits and their gradient, 8 bytes.
  EXPECT_DOUBLE_EQ(Profile(Lm(), setup).per_sample_bytes[kTransient], 800000.0);
  setup.set_loss(TrainingSetup::CHUNKED_CE);
  setup.set_loss_chunks(4);
  // Every chunk's bf16 head output (100,000 x 2 = 200,000) and one chunk's
  // (25 positions: 25,000 logits) fp32 copy and gradient (25,000 x 8 =
  // 200,000).
  EXPECT_DOUBLE_EQ(Profile(Lm(), setup).per_sample_bytes[kTransient], 400000.0);
  // 0 chunks: torchtune's 8; tensor_split gives the first pieces
  // ceil(100 / 8) = 13 positions: 200,000 + 13,000 x 8 = 304,000.
  setup.set_loss_chunks(0);
  EXPECT_DOUBLE_EQ(Profile(Lm(), setup).per_sample_bytes[kTransient], 304000.0);
  // fp32: the outputs are fp32 already (400,000); one chunk's gradient
  // 13,000 x 4 = 52,000.
  setup.set_precision(TrainingSetup::FP32);
  EXPECT_DOUBLE_EQ(Profile(Lm(), setup).per_sample_bytes[kTransient], 452000.0);
  EXPECT_TRUE(Remarks(Lm(), setup, "chunked cross-entropy in 8 pieces"));
  // litgpt's 128-token chunks over 4,096 positions: 32 pieces of 128.
  EXPECT_DOUBLE_EQ(ChunkedLogitsFraction(4096, 4096 / 128), 128.0 / 4096);
  EXPECT_DOUBLE_EQ(ChunkedLogitsFraction(100, 8), 0.13);
  EXPECT_DOUBLE_EQ(ChunkedLogitsFraction(100, 0), 1.0);
  EXPECT_DOUBLE_EQ(ChunkedLogitsFraction(3, 8), 1.0 / 3);
}

TEST(SetupsTest, LossChunksNeedChunkedCrossEntropy) {
  TrainingSetup setup;
  setup.set_loss_chunks(4);
  const std::string e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "setup.loss_chunks = 4")) << e;
  EXPECT_TRUE(absl::StrContains(e, "CHUNKED_CE")) << e;
  setup.set_loss(TrainingSetup::CHUNKED_CE);
  EXPECT_EQ(Error(setup), "");
  setup.set_loss(static_cast<TrainingSetup::Loss>(9));
  EXPECT_TRUE(absl::StrContains(Error(setup), "FULL_CE, CHUNKED_CE"));
}

// 12 copies of an MLP 8 -> 32 -> 8 at 10 positions, fp32: per copy 10 x
// 32 x 2 x 4 = 2,560 internal bytes and a 10 x 8 x 4 = 320-byte output.
v1::ModelSpec Stack() {
  return Spec(R"({"name": "stack", "positions": 10,
      "layers": [{"repeat": 12, "block": {"layers": [
        {"mlp": {"hidden": 8, "ffn": 32}}]}}]})");
}

TEST(SetupsTest, LayerSelectiveCheckpointingRecomputesEveryNthBlock) {
  TrainingSetup setup;
  setup.set_checkpointing(TrainingSetup::SELECTIVE);
  setup.set_checkpoint_every(3);
  const MemoryProfile p = Profile(Stack(), setup);
  // Copies 3, 6, 9, 12 checkpointed: 8 copies keep everything, plus one
  // rebuilt at a time: 9 x 2,560; outputs 9 x 320 + 4 boundaries x 320.
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kInternal], 9 * 2560.0);
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kOutputs], 9 * 320.0 + 4 * 320.0);
  // Every block: full checkpointing's one copy and 12 boundaries.
  setup.set_checkpoint_every(1);
  const MemoryProfile every = Profile(Stack(), setup);
  EXPECT_DOUBLE_EQ(every.per_sample_bytes[kInternal], 2560.0);
  EXPECT_DOUBLE_EQ(every.per_sample_bytes[kOutputs], 12 * 320.0 + 320.0);
  EXPECT_TRUE(Remarks(Stack(), setup, "selective every block"));
}

TEST(SetupsTest, OpSelectiveCheckpointingKeepsMatmulAndAttentionOutputs) {
  // Four copies of fused attention (hidden 8, 2 heads of 4) and an MLP
  // 8 -> 32 -> 8, 10 positions, fp32.
  const v1::ModelSpec spec = Spec(R"({"name": "sac", "positions": 10,
      "layers": [{"repeat": 4, "block": {"layers": [
        {"attention": {"hidden": 8, "heads": 2, "fused": true}},
        {"mlp": {"hidden": 8, "ffn": 32}}]}}]})");
  // One copy without checkpointing: attention outputs (q 80 + context 80
  // + k 80 + v 80 + o 80) x 4 = 1,600 and log-sum-exp 10 x 2 x 4 = 80
  // internal; MLP 2,560 internal and 320 output. Per copy 1,920 outputs,
  // 2,640 internal.
  TrainingSetup setup;
  const MemoryProfile none = Profile(spec, setup);
  EXPECT_DOUBLE_EQ(none.per_sample_bytes[kOutputs], 4 * 1920.0);
  EXPECT_DOUBLE_EQ(none.per_sample_bytes[kInternal], 4 * 2640.0);
  setup.set_checkpointing(TrainingSetup::SELECTIVE);
  const MemoryProfile sac = Profile(spec, setup);
  // Saved per copy: half the projections (q 80 + k 80 + v 80 + o 80 = 320
  // values, half 160 x 4 = 640) plus the attention output 80 x 4 = 320:
  // 960 outputs, and the log-sum-exp 80 internal; the MLP's half of up
  // (10 x 32 x 4 / 2 = 640 internal) and of down (320 / 2 = 160 outputs).
  // Saved: 1,120 outputs, 720 internal.
  // Four copies' saved ops and boundaries (320 each), and one copy's
  // recomputed rest: outputs 4 x 1,120 + (1,920 - 1,120) + 4 x 320 =
  // 6,560; internal 4 x 720 + (2,640 - 720) = 4,800.
  EXPECT_DOUBLE_EQ(sac.per_sample_bytes[kOutputs], 6560.0);
  EXPECT_DOUBLE_EQ(sac.per_sample_bytes[kInternal], 4800.0);
  EXPECT_TRUE(Remarks(spec, setup, "op-level selective"));
}

TEST(SetupsTest, CheckpointingCombinationsThatMeanNothingAreRefused) {
  TrainingSetup setup;
  setup.set_checkpoint_every(2);
  std::string e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "setup.checkpoint_every = 2")) << e;
  EXPECT_TRUE(absl::StrContains(e, "SELECTIVE")) << e;
  setup.set_checkpoint_every(0);
  setup.set_checkpointing(TrainingSetup::NO_CHECKPOINTING);
  setup.set_activation_checkpointing(true);
  e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "setup.checkpointing = NO_CHECKPOINTING"))
      << e;
  // The old bool still means FULL.
  TrainingSetup old;
  old.set_activation_checkpointing(true);
  EXPECT_EQ(CheckpointingOf(old), TrainingSetup::FULL);
}

TEST(SetupsTest, ActivationOffloadingKeepsTwoBlocksAndTheHeadsInput) {
  // A 100 x 8 table, four MLP blocks 8 -> 32 -> 8 and an 8 -> 100 head, 10
  // positions, fp32.
  const v1::ModelSpec spec = Spec(R"({"name": "off", "positions": 10,
      "layers": [{"embedding": {"num_embeddings": 100, "dim": 8}},
                 {"repeat": 4, "block": {"layers": [
                   {"mlp": {"hidden": 8, "ffn": 32}}]}},
                 {"linear": {"in_features": 8, "out_features": 100, "logits": true}}]})");
  TrainingSetup setup;
  const MemoryProfile kept = Profile(spec, setup);
  // Table output 10 x 8 x 4 = 320; blocks 4 x 320 outputs, 4 x 2,560
  // internal.
  EXPECT_DOUBLE_EQ(kept.per_sample_bytes[kOutputs], 1600.0);
  EXPECT_DOUBLE_EQ(kept.per_sample_bytes[kInternal], 10240.0);
  setup.set_activation_offloading(true);
  const MemoryProfile off = Profile(spec, setup);
  // On the GPU: two blocks (640 outputs, 5,120 internal) and the head's
  // input 10 x 8 x 4 = 320. To the host: the table's output 320 and two
  // blocks' 640 outputs less the head's input 320 = 640, and two blocks'
  // 5,120 internal.
  EXPECT_DOUBLE_EQ(off.per_sample_bytes[kOutputs], 960.0);
  EXPECT_DOUBLE_EQ(off.per_sample_bytes[kInternal], 5120.0);
  EXPECT_DOUBLE_EQ(off.host_activation_bytes_per_sample, 5760.0);
  // The head's logits are not offloaded: 10 x 100 x 8.
  EXPECT_DOUBLE_EQ(off.per_sample_bytes[kTransient], 8000.0);
  EXPECT_TRUE(Remarks(spec, setup, "activation offloading"));
  ASSERT_EQ(ProfileAssumptions(off).size(), 1u);
  EXPECT_TRUE(absl::StrContains(ProfileAssumptions(off)[0], "per sample"));
  EXPECT_TRUE(ProfileAssumptions(kept).empty());
}

TEST(SetupsTest, LoraOnTheHeadAndTheEmbeddings) {
  // 10 positions, a 100 x 8 table and an 8 -> 100 head: 1,600 parameters.
  const std::string layers = R"("layers": [
      {"embedding": {"num_embeddings": 100, "dim": 8}},
      {"linear": {"in_features": 8, "out_features": 100, "logits": true,
                  "tied": TIED}}]})";
  std::string untied_json = R"({"name": "lora", "positions": 10, )" + layers;
  untied_json.replace(untied_json.find("TIED"), 4, "false");
  const v1::ModelSpec untied = Spec(untied_json);
  TrainingSetup setup;
  setup.mutable_lora()->set_rank(2);
  setup.mutable_lora()->add_targets("lm_head");
  setup.mutable_lora()->add_targets("embed");
  const MemoryProfile p = Profile(untied, setup);
  // Table: lora_embedding_A [2, 100] + B [8, 2] = 216; head: A [2, 8] +
  // B [100, 2] = 216.
  EXPECT_EQ(p.states.adapter_params, 432u);
  EXPECT_EQ(p.states.params, 1600u);
  // fp32 weights 1,600 x 4 + 432 x 4 = 8,128; gradients 1,728; AdamW
  // moments 3,456.
  EXPECT_DOUBLE_EQ(p.states.weights, 8128.0);
  EXPECT_DOUBLE_EQ(p.states.gradients, 1728.0);
  EXPECT_DOUBLE_EQ(p.states.states, 3456.0);
  // Saved for the adapters (fp32, no dropout): the table's [10, 2] lookup
  // 80 bytes; the head's rank-2 intermediate 10 x 2 x 4 = 80 (its fp32
  // input is already counted).
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kInternal], 160.0);
  // A tied head has no weight of its own but its own adapters.
  std::string tied_json = R"({"name": "lora", "positions": 10, )" + layers;
  tied_json.replace(tied_json.find("TIED"), 4, "true");
  const MemoryProfile tied = Profile(Spec(tied_json), setup);
  EXPECT_EQ(tied.states.params, 800u);
  EXPECT_EQ(tied.states.adapter_params, 432u);
  // all-linear leaves both out, as PEFT's does.
  setup.mutable_lora()->clear_targets();
  setup.mutable_lora()->add_targets("all-linear");
  EXPECT_EQ(Profile(untied, setup).states.adapter_params, 0u);
  setup.mutable_lora()->add_targets("lm_headx");
  const std::string e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "setup.lora.targets[1] = 'lm_headx'")) << e;
  EXPECT_TRUE(absl::StrContains(e, "lm_head, embed")) << e;
}

// A 400 -> 300 linear with bias: a 120,000-value weight, a 300-value bias.
v1::ModelSpec Wide() {
  return Spec(R"({"name": "wide", "positions": 1,
      "layers": [{"linear": {"in_features": 400, "out_features": 300, "bias": true}}]})");
}

TEST(SetupsTest, PagedOptimizersPageTheMomentsOfLargeTensorsOnly) {
  TrainingSetup setup;
  setup.set_optimizer(TrainingSetup::PAGED_ADAMW);
  const MemoryProfile p = Profile(Wide(), setup);
  // Two fp32 moments: 120,300 x 8 = 962,400; the weight's (>= 1e5 values)
  // 960,000 paged, the bias's 2,400 on the device.
  EXPECT_DOUBLE_EQ(p.states.states, 962400.0);
  EXPECT_DOUBLE_EQ(p.states.paged_states, 960000.0);
  // Weights 481,200 + gradients 481,200 + 2,400 device state.
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 964800.0);
  // A bf16 model still keeps fp32 moments (optim_bits 32).
  setup.set_precision(TrainingSetup::BF16_TRUE);
  EXPECT_DOUBLE_EQ(Profile(Wide(), setup).states.states, 962400.0);
  setup.set_precision(TrainingSetup::FP32);
  EXPECT_TRUE(Remarks(Wide(), setup, "of paged-adamw's moments"));
  // 8-bit: the weight's two uint8 moments (240,000) are paged, its 469
  // fp32 absmax per moment (ceil(120,000 / 256)) and the bias's fp32
  // moments are not: 2 x (120,000 + 4 x 469) + 300 x 8 = 246,152.
  setup.set_optimizer(TrainingSetup::PAGED_ADAMW8BIT);
  const MemoryProfile eight = Profile(Wide(), setup);
  EXPECT_DOUBLE_EQ(eight.states.states, 246152.0);
  EXPECT_DOUBLE_EQ(eight.states.paged_states, 240000.0);
  EXPECT_TRUE(Remarks(Wide(), setup, "of paged-adamw8bit's moments"));
  // Under DDP on two GPUs too: weights 481,200 + gradients 481,200 + the
  // bias's 2,400 device state, and two 25 MiB buckets (52,428,800).
  setup.set_optimizer(TrainingSetup::PAGED_ADAMW);
  setup.set_gpus(2);
  setup.set_parallel(TrainingSetup::DDP);
  EXPECT_DOUBLE_EQ(Profile(Wide(), setup).fixed_bytes[kOptimizer],
                   964800.0 + 52428800.0);
}

TEST(SetupsTest, TorchaoLowBitAdamQuantizesWholeBlocksOfLargeTensors) {
  // A 128 -> 64 linear with bias: an 8,192-value weight (64 blocks of 128,
  // 32 of 256) and a 64-value bias.
  const v1::ModelSpec spec = Spec(R"({"name": "low", "positions": 1,
      "layers": [{"linear": {"in_features": 128, "out_features": 64, "bias": true}}]})");
  TrainingSetup setup;
  setup.set_optimizer(TrainingSetup::ADAM4BIT);
  // Per moment: 4,096 bytes of codes, 64 fp32 scales (256), a 16-entry
  // fp32 qmap (64): 2 x 4,416 = 8,832; the bias (< 4,096) two fp32
  // moments 512.
  const MemoryProfile four = Profile(spec, setup);
  EXPECT_DOUBLE_EQ(four.states.states, 8832.0 + 512.0);
  // The step is fused per tensor: no temporaries.
  EXPECT_DOUBLE_EQ(four.update_bytes[kOptimizer], four.fixed_bytes[kOptimizer]);
  EXPECT_TRUE(Remarks(spec, setup, "torchao AdamW4bit"));
  // fp8: 8,192 codes and 32 fp32 scales per moment: 2 x 8,320 = 16,640.
  setup.set_optimizer(TrainingSetup::ADAMFP8);
  EXPECT_DOUBLE_EQ(Profile(spec, setup).states.states, 16640.0 + 512.0);
  // A 100 -> 50 weight (5,000 values) is no whole number of blocks: its
  // moments stay in the parameter dtype, bf16 here: 2 x 2 x 5,000.
  const v1::ModelSpec odd = Spec(R"({"name": "odd", "positions": 1,
      "layers": [{"linear": {"in_features": 100, "out_features": 50}}]})");
  setup.set_precision(TrainingSetup::BF16_TRUE);
  EXPECT_DOUBLE_EQ(Profile(odd, setup).states.states, 20000.0);
  setup.set_optimizer(TrainingSetup::ADAM4BIT);
  EXPECT_DOUBLE_EQ(Profile(odd, setup).states.states, 20000.0);
}

TEST(SetupsTest, GradientOffloadKeepsOneGradientAndSmallTensorsOnTheGpu) {
  // 100 -> 50 and 50 -> 100 (5,000 values each) and 100 -> 10 (1,000, under
  // torchao's 4,096 minimal_size), no biases, fp32 AdamW.
  const v1::ModelSpec spec = Spec(R"({"name": "three", "positions": 1,
      "layers": [{"linear": {"in_features": 100, "out_features": 50}},
                 {"linear": {"in_features": 50, "out_features": 100}},
                 {"linear": {"in_features": 100, "out_features": 10}}]})");
  TrainingSetup setup;
  setup.set_offload(TrainingSetup::OPTIMIZER_GRADIENTS);
  const MemoryProfile p = Profile(spec, setup);
  // Host: a pinned weight copy and gradient of each large tensor (2 x
  // 10,000 x 4 = 80,000) and their moments (10,000 x 8 = 80,000).
  EXPECT_DOUBLE_EQ(p.parallel.host_bytes_per_gpu, 160000.0);
  // GPU: every weight 44,000; the small tensor's gradient 4,000 and
  // moments 8,000; one large gradient in flight 20,000.
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 76000.0);
  // The step runs on the host: no device temporaries.
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], 76000.0);
  EXPECT_TRUE(p.parallel.offload_gradients);
}

TEST(SetupsTest, GradientOffloadIsOneGpuWithoutAccumulation) {
  TrainingSetup setup;
  setup.set_offload(TrainingSetup::OPTIMIZER_GRADIENTS);
  EXPECT_EQ(Error(setup), "");
  setup.set_grad_accum(4);
  std::string e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "setup.offload = OPTIMIZER_GRADIENTS")) << e;
  EXPECT_TRUE(absl::StrContains(e, "grad_accum 0 or 1")) << e;
  setup.set_grad_accum(0);
  setup.set_gpus(2);
  e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "gpus 0 or 1")) << e;
  setup.set_gpus(1);
  setup.set_parallel(TrainingSetup::ZERO2);
  e = Error(setup);
  EXPECT_TRUE(absl::StrContains(e, "parallel unset or DDP")) << e;
}

}  // namespace
}  // namespace headroom
