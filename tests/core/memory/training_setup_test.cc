// The training setups byte by byte on models small enough to count by hand.

#include "core/memory/training_setup.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using v1::TrainingSetup;

v1::ModelSpec Spec(const std::string& json) {
  auto spec = ParseSpecJson(json, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::ModelSpec();
}

// One linear, 100 -> 50 with bias: 5,000 + 50 parameters in two tensors.
v1::ModelSpec Linear() {
  return Spec(R"({"name": "lin", "positions": 10,
      "layers": [{"linear": {"in_features": 100, "out_features": 50, "bias": true}}]})");
}

MemoryProfile Profile(const v1::ModelSpec& spec, const TrainingSetup& setup) {
  auto profile = BuildProfile(spec, setup);
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.ok() ? *profile : MemoryProfile();
}

TEST(TrainingSetupTest, TrueBf16KeepsEverythingIn16Bits) {
  TrainingSetup setup;
  setup.set_precision(TrainingSetup::BF16_TRUE);
  const MemoryProfile p = Profile(Linear(), setup);
  // Weights 2, gradients 2, two bf16 moments 4 bytes per parameter; no
  // autocast copies.
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 5050.0 * 8);
  // foreach AdamW's one intermediate, in bf16.
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], 5050.0 * 10);
  // 10 positions x 50 outputs x 2 bytes.
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kOutputs], 1000.0);
  EXPECT_DOUBLE_EQ(p.states.half_copies, 0.0);
}

TEST(TrainingSetupTest, MixedPrecisionCopiesTrainedWeightsOnly) {
  const v1::ModelSpec spec = Spec(R"({"name": "ema", "positions": 1,
      "layers": [{"frozen": true, "linear": {"in_features": 100, "out_features": 10}},
                 {"linear": {"in_features": 10, "out_features": 10}}]})");
  TrainingSetup setup;
  setup.set_precision(TrainingSetup::BF16_MIXED);
  const MemoryProfile p = Profile(spec, setup);
  // autocast caches the 16-bit cast of leaves that require grad: the 100
  // trained weights, not the 1,000 frozen ones.
  EXPECT_DOUBLE_EQ(p.states.half_copies, 200.0);
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 1000.0 * 4 + 100.0 * 18);
}

TEST(TrainingSetupTest, AdamWImplementationsDifferInTheirTemporaries) {
  // Two linears: 100 -> 50 (5,000) and 50 -> 10 (500), no biases.
  const v1::ModelSpec spec = Spec(R"({"name": "two", "positions": 1,
      "layers": [{"linear": {"in_features": 100, "out_features": 50}},
                 {"linear": {"in_features": 50, "out_features": 10}}]})");
  TrainingSetup setup;
  const double resident = 5500.0 * 16;  // weights, gradients, two moments
  EXPECT_DOUBLE_EQ(Profile(spec, setup).update_bytes[kOptimizer],
                   resident + 5500.0 * 4);
  setup.set_optimizer(TrainingSetup::ADAMW_FUSED);
  EXPECT_DOUBLE_EQ(Profile(spec, setup).update_bytes[kOptimizer], resident);
  // One tensor at a time: the largest (5,000) tensor's two intermediates.
  setup.set_optimizer(TrainingSetup::ADAMW_LOOP);
  EXPECT_DOUBLE_EQ(Profile(spec, setup).update_bytes[kOptimizer],
                   resident + 2 * 4.0 * 5000);
  // All three keep the same state at backward start.
  EXPECT_DOUBLE_EQ(Profile(spec, setup).fixed_bytes[kOptimizer], resident);
}

TEST(TrainingSetupTest, EightBitAdamKeepsBlockScalesAndSmallTensorsIn32Bits) {
  TrainingSetup setup;
  setup.set_optimizer(TrainingSetup::ADAM8BIT);
  const MemoryProfile p = Profile(Linear(), setup);
  // The 5,000-value weight: two uint8 moments and one fp32 absmax per 256
  // values for each (20 blocks); the 50-value bias is under 4,096 and keeps
  // two fp32 moments.
  EXPECT_DOUBLE_EQ(p.states.states, 2 * (5000.0 + 4 * 20) + 50.0 * 8);
  // The step is one kernel: no temporaries.
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], p.fixed_bytes[kOptimizer]);
  // bitsandbytes pages only tensors of >= 1e5 values: this model's 5,000
  // and 50 stay device memory (setups_test.cc pages a larger one).
  setup.set_optimizer(TrainingSetup::PAGED_ADAMW8BIT);
  const MemoryProfile paged = Profile(Linear(), setup);
  EXPECT_DOUBLE_EQ(paged.states.paged_states, 0.0);
  EXPECT_DOUBLE_EQ(paged.fixed_bytes[kOptimizer], p.fixed_bytes[kOptimizer]);
}

TEST(TrainingSetupTest, AdafactorFactorsMatricesAndNotVectors) {
  TrainingSetup setup;
  setup.set_optimizer(TrainingSetup::ADAFACTOR);
  const MemoryProfile p = Profile(Linear(), setup);
  // Weight [50, 100]: a row (50) and a column (100) vector; bias [50] a
  // full second moment; all fp32, no first moment.
  EXPECT_DOUBLE_EQ(p.states.states, 4.0 * (50 + 100) + 4.0 * 50);
  // Per tensor: the squared gradient and its approximation, fp32, of the
  // largest tensor.
  EXPECT_DOUBLE_EQ(p.states.update_temporaries, 2 * 4.0 * 5000);
  setup.set_precision(TrainingSetup::BF16_TRUE);
  // A 16-bit weight and gradient are copied to fp32 for the step too.
  EXPECT_DOUBLE_EQ(Profile(Linear(), setup).states.update_temporaries,
                   4 * 4.0 * 5000);
}

TEST(TrainingSetupTest, LionAndSgdStates) {
  TrainingSetup setup;
  setup.set_optimizer(TrainingSetup::LION);
  MemoryProfile p = Profile(Linear(), setup);
  EXPECT_DOUBLE_EQ(p.states.states, 5050.0 * 4);
  EXPECT_DOUBLE_EQ(p.states.update_temporaries, 2 * 4.0 * 5000);
  setup.set_optimizer(TrainingSetup::SGD);
  p = Profile(Linear(), setup);
  EXPECT_DOUBLE_EQ(p.states.states, 0.0);
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], 5050.0 * 8);
}

TEST(TrainingSetupTest, OptimizerInBackwardHoldsOneGradientAtATime) {
  TrainingSetup setup;
  setup.set_optimizer_in_backward(true);
  const MemoryProfile p = Profile(Linear(), setup);
  // Weights and moments stay; of the gradients only the largest tensor's
  // (5,000 x 4) and its step's intermediate (5,000 x 4) are alive at once.
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 5050.0 * 12 + 5000.0 * 8);
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], p.fixed_bytes[kOptimizer]);
  setup.set_grad_accum(2);
  auto refused = BuildProfile(Linear(), setup);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("setup.grad_accum"),
            std::string::npos);
}

// One attention layer (hidden 8, 2 heads) and a gated MLP (8 -> 16), 10
// positions.
v1::ModelSpec Block() {
  return Spec(R"({"name": "blk", "positions": 10,
      "layers": [{"name": "attn", "attention": {"hidden": 8, "heads": 2, "fused": true}},
                 {"name": "mlp", "mlp": {"hidden": 8, "ffn": 16, "gated": true}}]})");
}

TEST(TrainingSetupTest, LoraTrainsAdaptersOnlyInFp32) {
  TrainingSetup setup;
  setup.mutable_lora()->set_rank(4);  // default targets q, v
  const MemoryProfile base = Profile(Block(), TrainingSetup());
  const MemoryProfile p = Profile(Block(), setup);
  // Base: attention 4 x 64, MLP 3 x 128 = 640 parameters, all frozen.
  EXPECT_EQ(p.states.params, 640u);
  // q and v: A 4 x 8 and B 8 x 4 each.
  EXPECT_EQ(p.states.adapter_params, 128u);
  EXPECT_EQ(p.states.trainable, 128u);
  // fp32 base weights plus adapters' weights (4), gradients (4), moments (8).
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 640.0 * 4 + 128.0 * 16);
  // fp32 without dropout: the adapters' input is the layer's own input
  // (already saved); each adds its rank-4 intermediate, 10 x 4 x 4 bytes.
  EXPECT_DOUBLE_EQ(
      p.per_sample_bytes[kInternal] - base.per_sample_bytes[kInternal],
      2 * 10.0 * 4 * 4);
  // The answer says the targets it assumed and what trains (and does not
  // hang on the target set).
  const auto said = SetupAssumptions(Block(), setup, p.states);
  EXPECT_TRUE(std::any_of(said.begin(), said.end(), [](const std::string& a) {
    return a.find(
               "LoRA targets q,v (not given; --lora_targets chooses): "
               "128 adapter parameters") != std::string::npos;
  })) << said.size();
  // all-linear adds k, o and the MLP's three: 7 adapted linears.
  setup.mutable_lora()->add_targets("all-linear");
  const MemoryProfile all = Profile(Block(), setup);
  // q,k,v,o: 4 x (32 + 32); gate, up: 4 x (8 + 16) each; down 4 x (16 + 8).
  EXPECT_EQ(all.states.adapter_params, 4u * 64 + 3u * 96);
}

TEST(TrainingSetupTest, LoraUnderTrue16BitsSavesAnFp32CopyOfEachInput) {
  TrainingSetup setup;
  setup.set_precision(TrainingSetup::BF16_TRUE);
  setup.mutable_lora()->set_rank(4);
  setup.mutable_lora()->add_targets("down");
  setup.mutable_lora()->set_dropout(0.1);
  TrainingSetup plain;
  plain.set_precision(TrainingSetup::BF16_TRUE);
  const v1::ModelSpec mlp = Spec(R"({"name": "mlp", "positions": 10,
      "layers": [{"mlp": {"hidden": 8, "ffn": 16, "gated": true}}]})");
  const double extra = Profile(mlp, setup).per_sample_bytes[kInternal] -
                       Profile(mlp, plain).per_sample_bytes[kInternal];
  // down's input is 10 x 16: PEFT casts it to the fp32 adapter (4 bytes),
  // dropout keeps a one-byte mask; the rank-4 intermediate is fp32.
  EXPECT_DOUBLE_EQ(extra, 10.0 * 16 * (4 + 1) + 10.0 * 4 * 4);
}

TEST(TrainingSetupTest, QuantizedBaseStoresNf4WithDoubleQuantizedScales) {
  TrainingSetup setup;
  setup.set_precision(TrainingSetup::BF16_TRUE);
  setup.mutable_lora()->set_rank(4);
  setup.set_quant_base(TrainingSetup::NF4);
  const MemoryProfile p = Profile(Block(), setup);
  // Every base weight here is a linear: half a byte each, an 8-bit absmax
  // per 64, and an fp32 scale per 256 absmax values.
  EXPECT_EQ(p.states.quantized_params, 640u);
  const double nf4 = 0.5 + 1.0 / 64 + 4.0 / (64 * 256);
  EXPECT_DOUBLE_EQ(p.states.weights, 640 * nf4 + 128 * 4.0);
  // One layer's weight dequantized to bf16 at a time: the largest, 8 x 16.
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kTransient], 128 * 2.0);
  setup.set_quant_base(TrainingSetup::INT8);
  const MemoryProfile int8 = Profile(Block(), setup);
  // One byte each and an fp32 scale per output row: 4 bytes per `in`
  // weights (in = 8 for six of them, 16 for down).
  EXPECT_DOUBLE_EQ(int8.states.weights, (4 * 64 + 2 * 128) * (1 + 4.0 / 8) +
                                            128 * (1 + 4.0 / 16) + 128 * 4.0);
}

// An answer names each value it assumed once, and only those the request
// left unset: Block() asked with nothing set assumes the model's attention,
// its 10 positions, fp32 and AdamW (two fp32 moments of 640 weights: 5,120
// bytes, 0 GB at two decimals); asked with each set, nothing.
TEST(TrainingSetupTest, AssumptionsAreOnlyWhatTheRequestLeftUnset) {
  const TrainingSetup unset;
  const MemoryProfile p = Profile(Block(), unset);
  EXPECT_THAT(
      SetupAssumptions(Block(), unset, p.states),
      ::testing::ElementsAre(
          "attention: the model's default, sdpa (1 layer; no score matrix); "
          "--attention eager|sdpa|flash chooses",
          "positions 10 per sample (the model's standard sequence length; "
          "--positions sets the longest sample, which a padded batch peaks "
          "at)",
          "precision fp32 (not given; --precision bf16 for mixed precision)",
          "optimizer adamw (not given): 0 GB of state for 640 trained "
          "parameters"));
  TrainingSetup set;
  set.set_attention(TrainingSetup::SDPA);
  set.set_positions(32);
  set.set_precision(TrainingSetup::BF16_MIXED);
  set.set_optimizer(TrainingSetup::SGD);
  EXPECT_THAT(SetupAssumptions(Block(), set, Profile(Block(), set).states),
              ::testing::IsEmpty());
  // What the request asked decides, not what a profile filled in.
  TrainingSetup filled = set;
  EXPECT_THAT(SetupAssumptions(Block(), unset, filled, p.states),
              ::testing::Contains(::testing::StartsWith("positions 10 ")));
}

// QLoRA without a precision computes in fp32 and says so: the largest base
// weight, 8 x 16 = 128, dequantized to 4-byte fp32 = 512 bytes (0 GB).
TEST(TrainingSetupTest, QloraSaysItsPrecisionWasAssumed) {
  TrainingSetup setup;
  setup.mutable_lora()->set_rank(4);
  setup.mutable_lora()->add_targets("q");
  setup.mutable_lora()->add_targets("v");
  setup.set_quant_base(TrainingSetup::NF4);
  setup.set_optimizer(TrainingSetup::ADAMW);
  setup.set_positions(10);
  setup.set_attention(TrainingSetup::SDPA);
  const MemoryProfile p = Profile(Block(), setup);
  EXPECT_DOUBLE_EQ(p.states.dequantized, 128 * 4.0);
  EXPECT_THAT(SetupAssumptions(Block(), setup, p.states),
              ::testing::ElementsAre(
                  "precision fp32 (not given): QLoRA computes in fp32, each "
                  "layer of the 640 NF4 linear weights dequantized to fp32 "
                  "for compute (0 GB at a time); --precision bf16 computes "
                  "in bf16"));
  setup.set_precision(TrainingSetup::BF16_MIXED);
  EXPECT_THAT(SetupAssumptions(Block(), setup, Profile(Block(), setup).states),
              ::testing::IsEmpty());
}

TEST(TrainingSetupTest, TrainingTheLastBlocksFreezesWhatComesBefore) {
  const v1::ModelSpec spec = Spec(R"({"name": "stack", "positions": 10,
      "layers": [{"name": "embed", "embedding": {"num_embeddings": 100, "dim": 8}},
                 {"name": "blocks", "repeat": 4, "block": {"layers": [
                   {"mlp": {"hidden": 8, "ffn": 16}}]}},
                 {"name": "head", "linear": {"in_features": 8, "out_features": 100,
                                             "logits": true}}]})");
  TrainingSetup setup;
  setup.mutable_freeze()->set_train_last_blocks(1);
  const MemoryProfile p = Profile(spec, setup);
  // Embedding 800, each block 256, head 800: 2,624 in all; the last block
  // and the head train.
  EXPECT_EQ(p.states.params, 2624u);
  EXPECT_EQ(p.states.trainable, 256u + 800u);
  // Only the trained block saves activations: 10 x 16 x 2 internal (fp32).
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kInternal], 10.0 * 16 * 2 * 4);
  setup.mutable_freeze()->set_train_last_blocks(0);
  setup.mutable_freeze()->add_layers("head");
  const MemoryProfile head = Profile(spec, setup);
  EXPECT_EQ(head.states.trainable, 800u + 4 * 256u);
  // A frozen layer after trained ones still saves what backward needs.
  EXPECT_DOUBLE_EQ(head.per_sample_bytes[kTransient],
                   Profile(spec, TrainingSetup()).per_sample_bytes[kTransient]);
  setup.mutable_freeze()->set_layers(0, "nope");
  auto refused = BuildProfile(spec, setup);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("embed, blocks, head"),
            std::string::npos)
      << refused.status();
}

TEST(TrainingSetupTest, GradAccumulationPeaksAtOneMicrobatch) {
  TrainingSetup setup;
  setup.set_grad_accum(4);
  const MemoryProfile p = Profile(Linear(), setup);
  const MemoryProfile whole = Profile(Linear(), TrainingSetup());
  EXPECT_DOUBLE_EQ(p.BytesAt(8)[kOutputs], whole.BytesAt(2)[kOutputs]);
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], whole.fixed_bytes[kOptimizer]);
}

TEST(TrainingSetupTest, AttentionFollowsTheModelUnlessTheSetupSaysOtherwise) {
  const v1::ModelSpec spec = Spec(R"({"name": "attn", "positions": 16,
      "layers": [{"attention": {"hidden": 8, "heads": 2, "fused": true,
                                "dropout": 0.1}}]})");
  TrainingSetup setup;
  EXPECT_DOUBLE_EQ(Profile(spec, setup).per_sample_bytes[kAttention], 0.0);
  setup.set_attention(TrainingSetup::EAGER);
  // 2 heads x 16 x 16 scores: probabilities (4), the dropout mask (1) and
  // the dropped probabilities (4).
  EXPECT_DOUBLE_EQ(Profile(spec, setup).per_sample_bytes[kAttention],
                   2 * 16 * 16 * 9.0);
  // The kernel the setup names is not an assumption; the model's default,
  // when none is named, is.
  for (const std::string& a : SetupAssumptions(spec, setup, ModelStates())) {
    EXPECT_EQ(a.find("attention"), std::string::npos) << a;
  }
  EXPECT_EQ(SetupAssumptions(spec, TrainingSetup(), ModelStates())[0],
            "attention: the model's default, sdpa (1 layer; no score "
            "matrix); --attention eager|sdpa|flash chooses");
  setup.set_attention(TrainingSetup::FLASH);
  auto refused = BuildProfile(spec, setup);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("BF16_MIXED"), std::string::npos);
}

TEST(TrainingSetupTest, BadSetupsNameTheirField) {
  const struct {
    std::function<void(TrainingSetup*)> set;
    const char* field;
  } cases[] = {
      {[](TrainingSetup* s) { s->set_quant_base(TrainingSetup::NF4); },
       "setup.quant_base"},
      {[](TrainingSetup* s) {
         s->mutable_lora()->set_rank(8);
         s->mutable_lora()->add_targets("qkv");
       },
       "setup.lora.targets[0]"},
      {[](TrainingSetup* s) { s->mutable_lora()->set_rank(5000); },
       "setup.lora.rank"},
      {[](TrainingSetup* s) {
         s->mutable_lora()->set_rank(8);
         s->mutable_lora()->set_dropout(1.5);
       },
       "setup.lora.dropout"},
      {[](TrainingSetup* s) { s->set_grad_accum(5000); }, "setup.grad_accum"},
      {[](TrainingSetup* s) {
         s->set_optimizer(static_cast<TrainingSetup::Optimizer>(77));
       },
       "setup.optimizer"},
      {[](TrainingSetup* s) {
         s->set_attention(static_cast<TrainingSetup::Attention>(9));
       },
       "setup.attention"},
      {[](TrainingSetup* s) { s->mutable_freeze()->set_train_last_blocks(2); },
       "setup.freeze.train_last_blocks"},
  };
  for (const auto& c : cases) {
    TrainingSetup setup;
    c.set(&setup);
    auto refused = BuildProfile(Linear(), setup);
    ASSERT_FALSE(refused.ok()) << c.field;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find(c.field), std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace headroom
