#include "server/core/frontends/hf_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/common/json_io.h"
#include "server/core/memory/memory_profile.h"
#include "server/core/memory/model_spec.h"
#include "server/io/files.h"

namespace headroom {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kHfDir = std::string(HEADROOM_SOURCE_DIR) + "/tests/data/hf/";

HfConversion ConvertText(const std::string& text, HfOptions options = {}) {
  absl::StatusOr<HfConversion> got = SpecFromHfConfig(text, options);
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : HfConversion{};
}

HfConversion ConvertFile(const std::string& file, HfOptions options = {}) {
  absl::StatusOr<std::string> text = ReadFile(kHfDir + file);
  EXPECT_TRUE(text.ok()) << text.status();
  return ConvertText(text.ok() ? *text : "", options);
}

absl::Status ErrorOf(const std::string& text, HfOptions options = {}) {
  return SpecFromHfConfig(text, options).status();
}

// The first layer named `name` at the top level or one block down.
const v1::Layer* Find(const v1::ModelSpec& spec, const std::string& name) {
  for (const v1::Layer& layer : spec.layers()) {
    if (layer.name() == name) return &layer;
    for (const v1::Layer& child : layer.block().layers()) {
      if (child.name() == name) return &child;
    }
  }
  return nullptr;
}

struct Published {
  const char* file;
  uint64_t params;
};

// The totals the model cards publish, from the config.json files as
// published (tests/data/hf).
TEST(HfConfigTest, PublishedParameterCounts) {
  const Published kModels[] = {
      {"gpt2.json", 124439808},
      {"bert-base-uncased.json", 109482240},
      {"llama-2-7b.json", 6738415616},
      {"mistral-7b-v0.1.json", 7241732096},
      {"qwen2-0.5b.json", 494032768},
      {"mixtral-8x7b-v0.1.json", 46702792704},
      {"meta-llama-3-8b.json", 8030261248},
  };
  for (const Published& model : kModels) {
    const HfConversion got = ConvertFile(model.file);
    EXPECT_EQ(CountParams(got.spec), model.params) << model.file;
    EXPECT_TRUE(ValidateSpec(got.spec).ok()) << model.file;
  }
}

// The other families, from their public configs (keys that change no count
// left out), against the totals transformers reports.
TEST(HfConfigTest, OtherFamiliesCounts) {
  struct Case {
    const char* model;
    const char* config;
    uint64_t params;
  };
  const Case kCases[] = {
      {"gemma-2b",
       R"({"model_type": "gemma", "hidden_size": 2048, "head_dim": 256,
           "intermediate_size": 16384, "num_attention_heads": 8,
           "num_hidden_layers": 18, "num_key_value_heads": 1,
           "vocab_size": 256000, "max_position_embeddings": 8192})",
       2506172416},
      {"phi-3-mini-4k",
       R"({"model_type": "phi3", "hidden_size": 3072,
           "intermediate_size": 8192, "num_attention_heads": 32,
           "num_hidden_layers": 32, "num_key_value_heads": 32,
           "vocab_size": 32064, "max_position_embeddings": 4096,
           "sliding_window": 2047, "tie_word_embeddings": false})",
       3821079552},
      {"qwen3-0.6b",
       R"({"model_type": "qwen3", "hidden_size": 1024, "head_dim": 128,
           "intermediate_size": 3072, "num_attention_heads": 16,
           "num_hidden_layers": 28, "num_key_value_heads": 8,
           "vocab_size": 151936, "max_position_embeddings": 40960,
           "max_window_layers": 28, "use_sliding_window": false,
           "sliding_window": null, "tie_word_embeddings": true})",
       596049920},
      {"qwen1.5-moe-a2.7b",
       R"({"model_type": "qwen2_moe", "hidden_size": 2048,
           "intermediate_size": 5632, "moe_intermediate_size": 1408,
           "shared_expert_intermediate_size": 5632, "num_experts": 60,
           "num_experts_per_tok": 4, "decoder_sparse_step": 1,
           "num_attention_heads": 16, "num_key_value_heads": 16,
           "num_hidden_layers": 24, "vocab_size": 151936,
           "max_position_embeddings": 8192, "tie_word_embeddings": false})",
       14315784192},
      {"pythia-160m",
       R"({"model_type": "gpt_neox", "hidden_size": 768,
           "intermediate_size": 3072, "num_attention_heads": 12,
           "num_hidden_layers": 12, "vocab_size": 50304,
           "max_position_embeddings": 2048, "rotary_pct": 0.25,
           "use_parallel_residual": true, "tie_word_embeddings": false})",
       162322944},
      {"roberta-base",
       R"({"model_type": "roberta", "hidden_size": 768,
           "intermediate_size": 3072, "num_attention_heads": 12,
           "num_hidden_layers": 12, "vocab_size": 50265,
           "max_position_embeddings": 514, "type_vocab_size": 1,
           "pad_token_id": 1})",
       124645632},
      {"t5-small",
       R"({"model_type": "t5", "d_model": 512, "d_kv": 64, "d_ff": 2048,
           "num_layers": 6, "num_heads": 8, "vocab_size": 32128,
           "relative_attention_num_buckets": 32, "n_positions": 512,
           "feed_forward_proj": "relu"})",
       60506624},
      {"t5-v1_1-small",
       R"({"model_type": "t5", "d_model": 512, "d_kv": 64, "d_ff": 1024,
           "num_layers": 8, "num_decoder_layers": 8, "num_heads": 6,
           "vocab_size": 32128, "feed_forward_proj": "gated-gelu",
           "tie_word_embeddings": false})",
       76961152},
      {"vit-base-patch16-224-in21k",
       R"({"model_type": "vit", "hidden_size": 768, "image_size": 224,
           "intermediate_size": 3072, "num_attention_heads": 12,
           "num_channels": 3, "num_hidden_layers": 12, "patch_size": 16,
           "qkv_bias": true})",
       86389248},
      {"clip-vit-base-patch32",
       R"({"model_type": "clip", "projection_dim": 512,
           "logit_scale_init_value": 2.6592,
           "text_config": {"hidden_size": 512, "intermediate_size": 2048,
                           "num_attention_heads": 8, "num_hidden_layers": 12,
                           "max_position_embeddings": 77, "vocab_size": 49408},
           "vision_config": {"hidden_size": 768, "intermediate_size": 3072,
                             "num_attention_heads": 12,
                             "num_hidden_layers": 12, "image_size": 224,
                             "patch_size": 32}})",
       151277313},
  };
  for (const Case& c : kCases) {
    const HfConversion got = ConvertText(c.config);
    EXPECT_EQ(CountParams(got.spec), c.params) << c.model;
  }
}

TEST(HfConfigTest, GroupedQueryWindowAndExperts) {
  const HfConversion mistral = ConvertFile("mistral-7b-v0.1.json");
  const v1::Layer* attn = Find(mistral.spec, "self_attn");
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->attention().kv_heads(), 8u);
  EXPECT_EQ(attn->attention().window(), 4096u);
  EXPECT_FALSE(attn->attention().qkv_bias());

  const HfConversion mixtral = ConvertFile("mixtral-8x7b-v0.1.json");
  const v1::Layer* moe = Find(mixtral.spec, "mlp");
  ASSERT_NE(moe, nullptr);
  ASSERT_TRUE(moe->has_moe());
  EXPECT_EQ(moe->moe().experts(), 8u);
  EXPECT_EQ(moe->moe().top_k(), 2u);
  EXPECT_TRUE(moe->moe().gated());
  EXPECT_FALSE(moe->moe().router_bias());
  EXPECT_EQ(Find(mixtral.spec, "self_attn")->attention().window(), 0u);

  const HfConversion qwen = ConvertFile("qwen2-0.5b.json");
  EXPECT_TRUE(Find(qwen.spec, "self_attn")->attention().qkv_bias());
  EXPECT_FALSE(Find(qwen.spec, "self_attn")->attention().out_bias());
  EXPECT_EQ(Find(qwen.spec, "self_attn")->attention().window(), 0u);
}

// A tied LM head still produces the logits but adds no parameters; an
// untied one adds vocab x hidden.
TEST(HfConfigTest, TiedHeadCountsNoParameters) {
  const HfConversion qwen = ConvertFile("qwen2-0.5b.json");
  const v1::Layer* head = Find(qwen.spec, "lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_TRUE(head->linear().logits());
  EXPECT_TRUE(head->linear().tied());
  EXPECT_EQ(CountLayerParams(*head), 0u);

  const HfConversion llama = ConvertFile("llama-2-7b.json");
  head = Find(llama.spec, "lm_head");
  ASSERT_NE(head, nullptr);
  EXPECT_FALSE(head->linear().tied());
  EXPECT_EQ(CountLayerParams(*head), 32000u * 4096u);

  // The memory profile still sees the head's fp32 logits.
  v1::TrainingSetup setup;
  absl::StatusOr<MemoryProfile> profile = BuildProfile(qwen.spec, setup);
  ASSERT_TRUE(profile.ok()) << profile.status();
  EXPECT_EQ(profile->params, 494032768u);
  EXPECT_GE(profile->per_sample_bytes[kTransient],
            2048.0 * 151936.0 * 4.0 * 2.0);
}

// Layers that differ (a dense first layer, sliding-window tail) split the
// stack into runs of identical blocks; the count is unchanged.
TEST(HfConfigTest, MixedLayersSplitIntoRuns) {
  const HfConversion got = ConvertText(
      R"({"model_type": "qwen2_moe", "num_hidden_layers": 4,
          "mlp_only_layers": [0], "use_sliding_window": true,
          "max_window_layers": 3, "sliding_window": 1024})");
  ASSERT_EQ(got.spec.layers_size(), 6);
  EXPECT_EQ(got.spec.layers(1).name(), "model.layers.0-0");
  EXPECT_TRUE(got.spec.layers(1).block().layers(3).has_mlp());
  EXPECT_EQ(got.spec.layers(2).name(), "model.layers.1-2");
  EXPECT_EQ(got.spec.layers(2).repeat(), 2u);
  EXPECT_EQ(got.spec.layers(2).block().layers(3).moe().shared_experts(), 4u);
  EXPECT_EQ(got.spec.layers(3).name(), "model.layers.3-3");
  EXPECT_EQ(got.spec.layers(3).block().layers(1).attention().window(), 1024u);
  EXPECT_EQ(CountParams(got.spec),
            2u * 151936u * 2048u + 2048u +
                (16783360u + 3u * 2048u * 5632u + 4096u) +
                3u * (16783360u + 60u * 3u * 2048u * 1408u +
                      3u * 2048u * 5632u + 2048u * 60u + 2048u + 4096u));
}

TEST(HfConfigTest, Qwen3HasQkNorm) {
  const HfConversion got = ConvertText(
      R"({"model_type": "qwen3", "hidden_size": 1024,
          "num_attention_heads": 16, "num_key_value_heads": 8})");
  const v1::Layer* attn = Find(got.spec, "self_attn");
  ASSERT_NE(attn, nullptr);
  EXPECT_TRUE(attn->attention().qk_norm());
  EXPECT_EQ(attn->attention().head_dim(), 128u);  // not 1024 / 16
  EXPECT_EQ(attn->attention().kv_heads(), 8u);
}

TEST(HfConfigTest, UnknownModelTypeListsSupported) {
  const absl::Status status = ErrorOf(R"({"model_type": "mamba"})");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("model_type = \"mamba\" is not supported"),
                    HasSubstr("bert, clip, gemma, gpt2, gpt_neox, llama, "
                              "mistral, mixtral, phi3, qwen2, qwen2_moe, "
                              "qwen3, roberta, t5, vit")));
  EXPECT_THAT(ErrorOf(R"({"hidden_size": 8})").message(),
              HasSubstr("model_type is missing"));
}

// A bare LlamaConfig is Llama-2-7B, every key assumed and listed.
TEST(HfConfigTest, MissingKeysTakeClassDefaultsAndAreListed) {
  const HfConversion got = ConvertText(R"({"model_type": "llama"})");
  EXPECT_EQ(CountParams(got.spec), 6738415616u);
  EXPECT_THAT(got.assumed_defaults,
              Contains("vocab_size=32000 (transformers LlamaConfig default)"));
  EXPECT_THAT(got.assumed_defaults,
              Contains("num_key_value_heads=32 (transformers LlamaConfig "
                       "default None: num_attention_heads)"));
  EXPECT_THAT(got.assumed_defaults,
              Contains("tie_word_embeddings=false (transformers LlamaConfig "
                       "default)"));
  EXPECT_EQ(got.spec.positions(), 2048u);

  // The published GPT-2 config leaves n_inner and tie_word_embeddings out.
  const HfConversion gpt2 = ConvertFile("gpt2.json");
  EXPECT_THAT(gpt2.assumed_defaults,
              Contains("n_inner=3072 (transformers GPT2Config default None: "
                       "4 * n_embd)"));
  EXPECT_THAT(gpt2.assumed_defaults,
              Contains("tie_word_embeddings=true (transformers GPT2Config "
                       "default)"));
  EXPECT_THAT(gpt2.assumed_defaults, Not(Contains(HasSubstr("n_embd="))));

  // Nested configs name their object.
  const HfConversion clip = ConvertText(R"({"model_type": "clip"})");
  EXPECT_THAT(clip.assumed_defaults,
              Contains("text_config.vocab_size=49408 (transformers "
                       "CLIPTextConfig default)"));
  EXPECT_EQ(CountParams(clip.spec), 151277313u);
}

TEST(HfConfigTest, PositionsFromSeqLenOrConfig) {
  EXPECT_EQ(ConvertFile("meta-llama-3-8b.json").spec.positions(), 2048u);
  HfOptions options;
  options.seq_len = 8192;
  EXPECT_EQ(ConvertFile("meta-llama-3-8b.json", options).spec.positions(),
            8192u);
  EXPECT_EQ(ConvertFile("gpt2.json").spec.positions(), 1024u);
  EXPECT_EQ(ConvertFile("bert-base-uncased.json").spec.positions(), 512u);

  // A learned position table caps the length.
  options.seq_len = 2048;
  absl::StatusOr<std::string> gpt2 = ReadFile(kHfDir + "gpt2.json");
  ASSERT_TRUE(gpt2.ok());
  const absl::Status status = ErrorOf(*gpt2, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("n_positions allows 1024"));
}

TEST(HfConfigTest, NameFromOptionsOrConfig) {
  EXPECT_EQ(ConvertFile("llama-2-7b.json").spec.name(),
            "meta-llama-llama-2-7b-hf");
  EXPECT_EQ(ConvertFile("gpt2.json").spec.name(), "gpt2");
  HfOptions options;
  options.name = "My_Model";
  EXPECT_EQ(ConvertFile("gpt2.json", options).spec.name(), "my-model");
}

TEST(HfConfigTest, NotJsonIsRefused) {
  for (const char* text : {"", "not json", "{\"model_type\": \"llama\"",
                           "[1, 2, 3]", "\"llama\""}) {
    const absl::Status status = ErrorOf(text);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(status.message(), HasSubstr("config.json")) << text;
  }
  EXPECT_THAT(ErrorOf("not json").message(), HasSubstr("not valid JSON"));
  const std::string deep = std::string(200, '[') + std::string(200, ']');
  EXPECT_THAT(ErrorOf(deep).message(), HasSubstr("nests deeper"));
  const std::string huge = R"({"model_type": "llama", "pad": ")" +
                           std::string(kMaxHfConfigBytes, 'x') + "\"}";
  EXPECT_THAT(ErrorOf(huge).message(), HasSubstr("bytes; allowed up to"));
}

TEST(HfConfigTest, AbsurdSizesAreRefusedByKey) {
  struct Case {
    const char* config;
    const char* message;
  };
  const Case kCases[] = {
      {R"({"model_type": "llama", "hidden_size": 0})",
       "hidden_size = 0 is out of range; allowed 1..1000000"},
      {R"({"model_type": "llama", "hidden_size": 2000000})",
       "hidden_size = 2000000 is out of range"},
      {R"({"model_type": "llama", "num_hidden_layers": 10000000})",
       "num_hidden_layers = 10000000 is out of range; allowed 1..10000"},
      {R"({"model_type": "bert", "vocab_size": 1000000000})",
       "vocab_size = 1000000000 is out of range; allowed 1..100000000"},
      {R"({"model_type": "gpt2", "n_embd": 0})", "n_embd = 0 is out of range"},
      {R"({"model_type": "llama", "hidden_size": -4})",
       "hidden_size = -4 is out of range"},
      {R"({"model_type": "llama", "hidden_size": 4096.5})",
       "hidden_size = 4096.5 is not a non-negative integer"},
      {R"({"model_type": "llama", "hidden_size": "4096"})",
       "hidden_size = \"4096\" is not a non-negative integer"},
      {R"({"model_type": "llama", "num_key_value_heads": 5})",
       "num_key_value_heads = 5 must divide num_attention_heads = 32"},
      {R"({"model_type": "mistral", "num_attention_heads": 7,
           "num_key_value_heads": 7})",
       "num_attention_heads = 7 does not divide hidden_size = 4096"},
      {R"({"model_type": "clip", "vision_config": {"hidden_size": 0}})",
       "vision_config.hidden_size = 0 is out of range"},
      {R"({"model_type": "t5", "feed_forward_proj": "gated-gelu-new"})",
       "feed_forward_proj = \"gated-gelu-new\" is not a valid activation"},
      {R"({"model_type": "mixtral", "num_experts_per_tok": 9})",
       "num_experts_per_tok = 9 is out of range; allowed 1..8"},
      {R"({"model_type": "llama", "hidden_size": 1000000,
           "intermediate_size": 10000000, "num_hidden_layers": 10000})",
       "parameters; allowed up to"},
  };
  for (const Case& c : kCases) {
    const absl::Status status = ErrorOf(c.config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.config;
    EXPECT_THAT(status.message(), HasSubstr(c.message)) << c.config;
  }
}

// The spec survives the project's JSON round trip, so `model convert` output
// loads as a catalog file.
TEST(HfConfigTest, SpecRoundTripsThroughJson) {
  const HfConversion got = ConvertFile("mixtral-8x7b-v0.1.json");
  absl::StatusOr<v1::ModelSpec> back =
      ParseSpecJson(ToJson(got.spec, /*pretty=*/true), "converted");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(CountParams(*back), 46702792704u);
}

}  // namespace
}  // namespace headroom
