// DINOv2 through the Hugging Face front-end: the counts of the published
// backbones, worked by hand from transformers' modeling_dinov2.py
// (@ 158e70c) and checked against the model card's rounded figures
// (facebookresearch/dinov2 README.md @ 04b9100: ViT-B/14 "86 M", ViT-g/14
// "1,100 M"). No stored copy of the Hub's config.json files was found, so
// the configs are inline with the keys that change the count, at the
// values the facebook/dinov2-* checkpoints use (image_size 518, patch_size
// 14; ViT-g: hidden 1536, 40 layers, 24 heads, use_swiglu_ffn true).

#include <string>

#include "core/frontends/hf_config.h"
#include "core/memory/model_spec.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

HfConversion Convert(const std::string& text) {
  absl::StatusOr<HfConversion> got = SpecFromHfConfig(text, HfOptions());
  EXPECT_TRUE(got.ok()) << got.status();
  return got.ok() ? *got : HfConversion{};
}

TEST(HfDinov2Test, BaseCountsAsTheModelCard) {
  const HfConversion got = Convert(R"({"model_type": "dinov2",
      "architectures": ["Dinov2Model"], "hidden_size": 768,
      "num_hidden_layers": 12, "num_attention_heads": 12, "mlp_ratio": 4,
      "image_size": 518, "patch_size": 14, "qkv_bias": true,
      "use_swiglu_ffn": false, "layerscale_value": 1.0})");
  // Embeddings: class token 768, mask token 768, patch conv 3 x 14 x 14 x
  // 768 = 451,584 + 768 bias, positions (37^2 + 1) x 768 = 1,052,160:
  // 1,506,048. Per layer: two LayerNorms 3,072, q/k/v/o 4 x (768^2 + 768)
  // = 2,362,368, two LayerScales 1,536, fc1 768 x 3,072 + 3,072 =
  // 2,362,368, fc2 3,072 x 768 + 768 = 2,360,064: 7,089,408, x 12 =
  // 85,072,896. Final LayerNorm 1,536. In all 86,580,480 ("86 M").
  EXPECT_EQ(CountParams(got.spec), 86580480u);
  // 518 / 14 = 37 patches a side and the class token.
  EXPECT_EQ(got.spec.positions(), 37u * 37 + 1);
}

TEST(HfDinov2Test, GiantRunsASwiGluMlp) {
  const HfConversion got = Convert(R"({"model_type": "dinov2",
      "architectures": ["Dinov2Model"], "hidden_size": 1536,
      "num_hidden_layers": 40, "num_attention_heads": 24, "mlp_ratio": 4,
      "image_size": 518, "patch_size": 14, "qkv_bias": true,
      "use_swiglu_ffn": true, "layerscale_value": 1.0})");
  // SwiGLU hf = (int(6,144 x 2 / 3) + 7) // 8 x 8 = 4,096: weights_in
  // 1,536 x 8,192 + 8,192 = 12,591,104, weights_out 4,096 x 1,536 + 1,536
  // = 6,292,992. Per layer with norms 6,144, q/k/v/o 4 x (1,536^2 + 1,536)
  // = 9,443,328, LayerScales 3,072: 28,336,640, x 40 = 1,133,465,600.
  // Embeddings 1,536 + 1,536 + 3 x 196 x 1,536 + 1,536 + 1,370 x 1,536 =
  // 3,012,096; final LayerNorm 3,072. In all 1,136,480,768 ("1,100 M").
  EXPECT_EQ(CountParams(got.spec), 1136480768u);
}

TEST(HfDinov2Test, RegistersJoinTheSequenceNotThePositionTable) {
  const HfConversion got = Convert(R"({"model_type": "dinov2_with_registers",
      "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
      "mlp_ratio": 4, "image_size": 518, "patch_size": 14,
      "num_register_tokens": 4})");
  // The base count and 4 x 768 register values.
  EXPECT_EQ(CountParams(got.spec), 86580480u + 4 * 768);
  EXPECT_EQ(got.spec.positions(), 37u * 37 + 1 + 4);
}

TEST(HfDinov2Test, AnMlpRatioOutOfRangeNamesTheKey) {
  absl::StatusOr<HfConversion> got = SpecFromHfConfig(
      R"({"model_type": "dinov2", "mlp_ratio": 0})", HfOptions());
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("mlp_ratio"), std::string::npos)
      << got.status();
}

}  // namespace
}  // namespace headroom
