#include "core/memory/plan.h"

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using v1::TrainingSetup;

v1::ModelSpec Spec() {
  v1::ModelSpec spec;
  spec.set_name("tiny");
  spec.set_positions(512);
  v1::Layer* blocks = spec.add_layers();
  blocks->set_repeat(2);
  v1::Attention* attention =
      blocks->mutable_block()->add_layers()->mutable_attention();
  attention->set_hidden(64);
  attention->set_heads(4);
  return spec;
}

TrainingSetup Lora(TrainingSetup::Framework framework) {
  TrainingSetup setup;
  setup.set_framework(framework);
  setup.set_precision(TrainingSetup::BF16_TRUE);
  setup.mutable_lora()->set_rank(8);
  return setup;
}

std::string Lines(const Plan& plan) { return absl::StrJoin(plan.lines, "\n"); }

TEST(PlanTest, UnnamedFrameworkIsGenericAndKeepsTheSetup) {
  TrainingSetup setup = Lora(TrainingSetup::FRAMEWORK_UNSPECIFIED);
  const absl::StatusOr<Plan> plan = ResolvePlan(Spec(), setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->profile.label, "generic");
  EXPECT_EQ(plan->adapter_bytes, 4.0);  // PEFT's fp32 adapters
  EXPECT_EQ(plan->weight_bytes, 2.0);
  EXPECT_EQ(plan->setup.loss(), TrainingSetup::LOSS_UNSPECIFIED);
  EXPECT_THAT(plan->phases, ElementsAre(v1::LOAD, v1::STEP));
  EXPECT_THAT(Lines(*plan), HasSubstr("framework: generic [default"));
  EXPECT_THAT(Lines(*plan), HasSubstr("loss: full logits [default]"));
}

TEST(PlanTest, LitgptChunksTheLossPer128TokensAndGenerates) {
  const absl::StatusOr<Plan> plan =
      ResolvePlan(Spec(), Lora(TrainingSetup::LITGPT));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->setup.loss(), TrainingSetup::CHUNKED_CE);
  EXPECT_EQ(plan->setup.loss_chunks(), 4u);  // 512 positions / 128
  EXPECT_EQ(plan->adapter_bytes, 2.0);       // the weights' bf16
  EXPECT_EQ(plan->setup.generate_tokens(), 100u);
  EXPECT_THAT(plan->phases,
              ElementsAre(v1::LOAD, v1::STEP, v1::EVAL, v1::GENERATE));
  EXPECT_THAT(Lines(*plan),
              HasSubstr("loss: chunked cross-entropy, 4 chunks [litgpt: "
                        "Lightning-AI/litgpt litgpt/finetune/lora.py:304"));
}

TEST(PlanTest, LitgptOnSeveralGpusShardsAndCheckpointsByVersion) {
  TrainingSetup setup = Lora(TrainingSetup::LITGPT);
  setup.set_gpus(2);
  setup.set_framework_version("0.5.10");
  absl::StatusOr<Plan> plan = ResolvePlan(Spec(), setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->setup.parallel(), TrainingSetup::FSDP_FULL);
  EXPECT_EQ(plan->layout.shard_degree, 2u);
  EXPECT_EQ(plan->setup.checkpointing(), TrainingSetup::FULL);
  EXPECT_EQ(plan->profile.label, "litgpt 0.5.10");
  EXPECT_THAT(Lines(*plan), HasSubstr("FSDP1 flat parameters"));

  setup.set_framework_version("0.5.11");
  plan = ResolvePlan(Spec(), setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Lines(*plan), HasSubstr("FSDP2 per-parameter"));

  // Without adapters (full fine-tuning, pretraining) lora.py's rules do
  // not apply: the setup's strategy and checkpointing stand.
  setup.clear_lora();
  plan = ResolvePlan(Spec(), setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->setup.parallel(), TrainingSetup::PARALLEL_UNSPECIFIED);
  EXPECT_EQ(plan->setup.checkpointing(),
            TrainingSetup::CHECKPOINTING_UNSPECIFIED);
}

TEST(PlanTest, WhatTheSetupSetsStays) {
  TrainingSetup setup = Lora(TrainingSetup::TORCHTUNE);
  setup.set_loss(TrainingSetup::FULL_CE);
  setup.add_phases(v1::EVAL);
  setup.set_gpus(2);
  setup.set_parallel(TrainingSetup::ZERO2);
  const absl::StatusOr<Plan> plan = ResolvePlan(Spec(), setup);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->setup.loss(), TrainingSetup::FULL_CE);
  EXPECT_EQ(plan->setup.parallel(), TrainingSetup::ZERO2);
  EXPECT_THAT(plan->phases, ElementsAre(v1::STEP, v1::EVAL));
  EXPECT_THAT(Lines(*plan), HasSubstr("loss: full logits [setup]"));
  EXPECT_THAT(Lines(*plan), HasSubstr("phases: step, eval [setup]"));
}

TEST(PlanTest, TorchtuneAndHfTrainerLosses) {
  absl::StatusOr<Plan> plan =
      ResolvePlan(Spec(), Lora(TrainingSetup::TORCHTUNE));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->setup.loss(), TrainingSetup::CHUNKED_CE);
  EXPECT_EQ(plan->setup.loss_chunks(), 8u);
  EXPECT_EQ(plan->adapter_bytes, 2.0);
  plan = ResolvePlan(Spec(), Lora(TrainingSetup::HF_TRAINER));
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(Lines(*plan),
              HasSubstr("load: meta init in the load dtype, each tensor set "
                        "on the device, a 4-bit one quantised there one at a "
                        "time [hf-trainer: huggingface/transformers"));
  EXPECT_EQ(plan->setup.loss(), TrainingSetup::FULL_CE);
  EXPECT_EQ(plan->adapter_bytes, 4.0);
  EXPECT_THAT(plan->phases, ElementsAre(v1::LOAD, v1::STEP));
  EXPECT_THAT(Lines(*plan), HasSubstr("phases: load, step [hf-trainer: save "
                                      "left out: huggingface/accelerate"));
}

TEST(PlanTest, RefusesAnUnknownFrameworkOrVersion) {
  TrainingSetup setup;
  setup.set_framework(static_cast<TrainingSetup::Framework>(42));
  absl::StatusOr<Plan> plan = ResolvePlan(Spec(), setup);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(), HasSubstr("setup.framework = 42"));
  EXPECT_THAT(plan.status().message(), HasSubstr("LITGPT"));
  setup.set_framework(TrainingSetup::LITGPT);
  setup.set_framework_version("v0.5");
  plan = ResolvePlan(Spec(), setup);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(plan.status().message(),
              HasSubstr("setup.framework_version = 'v0.5'"));
}

TEST(FrameworkProfileTest, NamesRoundTripAndVersionsOrder) {
  for (TrainingSetup::Framework f : AllFrameworks()) {
    TrainingSetup::Framework back = TrainingSetup::FRAMEWORK_UNSPECIFIED;
    ASSERT_TRUE(ParseFramework(FrameworkName(f), &back));
    EXPECT_EQ(back, f);
  }
  TrainingSetup::Framework unused;
  EXPECT_FALSE(ParseFramework("keras", &unused));
  EXPECT_TRUE(VersionBefore("0.5.10", "0.5.11"));
  EXPECT_TRUE(VersionBefore("0.4", "0.5.11"));
  EXPECT_FALSE(VersionBefore("0.5.11", "0.5.11"));
  EXPECT_FALSE(VersionBefore("1.0", "0.5.11"));
  EXPECT_FALSE(VersionBefore("", "0.5.11"));  // the newest
}

}  // namespace
}  // namespace headroom
