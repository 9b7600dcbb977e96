// Hugging Face vision families: ViT, CLIP, Swin, ConvNeXt and DINOv2.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/hf_builders.h"
#include "core/memory/model_spec.h"

namespace headroom::hf {

// ---- ViT and CLIP ----------------------------------------------------------

struct VisionShape {
  uint64_t hidden = 0;
  uint64_t layers = 0;
  uint64_t heads = 0;
  uint64_t ffn = 0;
  uint64_t image_size = 0;
  uint64_t patch_size = 0;
  uint64_t channels = 0;
  uint64_t patches = 0;  // (image_size / patch_size)^2
};

struct VisionDefaults {
  uint64_t hidden_size;
  uint64_t num_hidden_layers;
  uint64_t num_attention_heads;
  uint64_t intermediate_size;
  uint64_t image_size;
  uint64_t patch_size;
};

absl::StatusOr<VisionShape> ReadVision(ConfigKeys& keys,
                                       const VisionDefaults& d) {
  VisionShape v;
  ASSIGN_OR_RETURN(v.hidden,
                   keys.Size("hidden_size", d.hidden_size, 1, kMaxHidden));
  ASSIGN_OR_RETURN(v.layers, keys.Size("num_hidden_layers", d.num_hidden_layers,
                                       1, kMaxLayers));
  ASSIGN_OR_RETURN(v.heads, keys.Size("num_attention_heads",
                                      d.num_attention_heads, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(v.hidden, v.heads, keys.Path("hidden_size"),
                                   keys.Path("num_attention_heads")));
  ASSIGN_OR_RETURN(
      v.ffn, keys.Size("intermediate_size", d.intermediate_size, 1, kMaxFfn));
  ASSIGN_OR_RETURN(v.image_size,
                   keys.Size("image_size", d.image_size, 1, kMaxImageSide));
  ASSIGN_OR_RETURN(v.patch_size, keys.Size("patch_size", d.patch_size, 1,
                                           std::min(v.image_size, kMaxPatch)));
  ASSIGN_OR_RETURN(v.channels, keys.Size("num_channels", 3, 1, kMaxChannels));
  const uint64_t side = v.image_size / v.patch_size;
  v.patches = side * side;
  return v;
}

// Patch convolution (stride = kernel = patch_size), class token and learned
// position table; the layers run over patches + 1 tokens.
void AppendVisionEmbeddings(const std::string& prefix, const VisionShape& v,
                            bool conv_bias, bool class_token_first,
                            v1::ModelSpec* spec) {
  Layer patch = Named(prefix + "patch_embedding");
  patch.set_positions(v.patches);
  v1::Conv* conv = patch.mutable_conv();
  conv->set_in_channels(v.channels);
  conv->set_out_channels(v.hidden);
  conv->add_kernel(v.patch_size);
  conv->set_bias(conv_bias);
  conv->set_in_positions(v.image_size * v.image_size);
  Layer cls = ParametersLayer(prefix + "class_token", v.hidden);
  if (class_token_first) {
    *spec->add_layers() = std::move(cls);
    *spec->add_layers() = std::move(patch);
  } else {
    *spec->add_layers() = std::move(patch);
    *spec->add_layers() = std::move(cls);
  }
  *spec->add_layers() = ParametersLayer(prefix + "position_embedding",
                                        (v.patches + 1) * v.hidden);
}

// A pre-LayerNorm encoder layer with biased attention and MLP, repeated.
Layer EncoderStack(const std::string& name, uint64_t layers, uint64_t hidden,
                   uint64_t heads, uint64_t ffn, bool qkv_bias) {
  std::vector<Layer> parts;
  parts.push_back(NormLayer("layer_norm1", v1::Norm::LAYER, hidden));
  parts.push_back(AttentionLayer("self_attn", hidden, heads, heads,
                                 hidden / heads, qkv_bias, true,
                                 /*fused=*/true));
  parts.push_back(NormLayer("layer_norm2", v1::Norm::LAYER, hidden));
  parts.push_back(MlpLayer("mlp", hidden, ffn, false, true));
  return BlockLayer(name, static_cast<uint32_t>(layers), std::move(parts));
}

absl::Status ConvertVit(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "ViTConfig");
  // ViTConfig: hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
  // intermediate_size=3072, image_size=224, patch_size=16, num_channels=3,
  // qkv_bias=True, pooler_output_size=None (hidden_size).
  ASSIGN_OR_RETURN(const VisionShape v,
                   ReadVision(keys, {768, 12, 12, 3072, 224, 16}));
  ASSIGN_OR_RETURN(const bool qkv_bias, keys.Flag("qkv_bias", true));
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> pooler_out,
      keys.OptionalSize("pooler_output_size", std::nullopt, 1, kMaxHidden));
  const uint64_t pooled = pooler_out.value_or(v.hidden);
  if (!pooler_out.has_value()) {
    keys.AssumeDerived("pooler_output_size", pooled, "hidden_size");
  }
  v1::ModelSpec& spec = StartSpec(c, "vision-transformer", v.patches + 1);
  spec.set_input_source(absl::StrCat(
      v.patches + 1, " tokens per sample: (image_size ", v.image_size,
      " / patch_size ", v.patch_size, ")^2 patches + the class token."));
  AppendVisionEmbeddings("vit.embeddings.", v, /*conv_bias=*/true,
                         /*class_token_first=*/false, &spec);
  *spec.add_layers() = EncoderStack("vit.encoder.layer", v.layers, v.hidden,
                                    v.heads, v.ffn, qkv_bias);
  *spec.add_layers() = NormLayer("vit.layernorm", v1::Norm::LAYER, v.hidden);
  Layer pooler = LinearLayer("vit.pooler.dense", v.hidden, pooled, true);
  pooler.set_positions(1);
  *spec.add_layers() = std::move(pooler);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: ViT's tokens come from image_size and "
                        "patch_size."));
  }
  c.Note(
      "ViTModel with its pooler (add_pooling_layer=True, the model's "
      "default; a classifier head named in architectures is not modelled). "
      "Attention is marked fused (transformers' default "
      "scaled_dot_product_attention).");
  return absl::OkStatus();
}

// A nested config object ("text_config"), or an empty one when missing or
// null; its keys then all take the class defaults.
absl::StatusOr<const Json*> SubConfig(const Json& config, const char* key,
                                      const Json& empty) {
  if (!config.contains(key) || config.at(key).is_null()) return &empty;
  if (!config.at(key).is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("config.json: ", key, " = ",
                                                   Abbreviated(config.at(key)),
                                                   " is not an object"));
  }
  return &config.at(key);
}

absl::Status ConvertClip(const Json& config, Conversion& c) {
  c.config_class = "CLIPConfig";
  const Json empty = Json::object();
  ASSIGN_OR_RETURN(const Json* text_json,
                   SubConfig(config, "text_config", empty));
  ASSIGN_OR_RETURN(const Json* vision_json,
                   SubConfig(config, "vision_config", empty));
  ConfigKeys keys(config, "", c.config_class, &c.out->assumed_defaults);
  ConfigKeys text_keys(*text_json, "text_config.", "CLIPTextConfig",
                       &c.out->assumed_defaults);
  ConfigKeys vision_keys(*vision_json, "vision_config.", "CLIPVisionConfig",
                         &c.out->assumed_defaults);
  // CLIPConfig: projection_dim=512 (both projections, bias-free), plus one
  // logit_scale parameter.
  ASSIGN_OR_RETURN(const uint64_t projection,
                   keys.Size("projection_dim", 512, 1, kMaxHidden));
  // CLIPTextConfig: vocab_size=49408, hidden_size=512,
  // intermediate_size=2048, num_hidden_layers=12, num_attention_heads=8,
  // max_position_embeddings=77.
  ASSIGN_OR_RETURN(const uint64_t vocab,
                   text_keys.Size("vocab_size", 49408, 1, kMaxVocab));
  ASSIGN_OR_RETURN(const uint64_t text_hidden,
                   text_keys.Size("hidden_size", 512, 1, kMaxHidden));
  ASSIGN_OR_RETURN(const uint64_t text_ffn,
                   text_keys.Size("intermediate_size", 2048, 1, kMaxFfn));
  ASSIGN_OR_RETURN(const uint64_t text_layers,
                   text_keys.Size("num_hidden_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(const uint64_t text_heads,
                   text_keys.Size("num_attention_heads", 8, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(text_hidden, text_heads,
                                   "text_config.hidden_size",
                                   "text_config.num_attention_heads"));
  ASSIGN_OR_RETURN(
      const uint64_t text_max,
      text_keys.Size("max_position_embeddings", 77, 1, kMaxSpecDimension));
  // CLIPVisionConfig: hidden_size=768, num_hidden_layers=12,
  // num_attention_heads=12, intermediate_size=3072, image_size=224,
  // patch_size=32, num_channels=3.
  ASSIGN_OR_RETURN(const VisionShape v,
                   ReadVision(vision_keys, {768, 12, 12, 3072, 224, 32}));
  ASSIGN_OR_RETURN(
      const uint64_t text_positions,
      TablePositions(c, text_max, "text_config.max_position_embeddings"));

  v1::ModelSpec& spec = StartSpec(c, "transformer", v.patches + 1);
  spec.set_input_source(absl::StrCat(
      v.patches + 1, " vision tokens ((image_size ", v.image_size,
      " / patch_size ", v.patch_size, ")^2 patches + the class token) and ",
      text_positions, " text positions per sample."));
  AppendVisionEmbeddings("vision_model.embeddings.", v, /*conv_bias=*/false,
                         /*class_token_first=*/true, &spec);
  *spec.add_layers() =
      NormLayer("vision_model.pre_layrnorm", v1::Norm::LAYER, v.hidden);
  *spec.add_layers() = EncoderStack("vision_model.encoder.layers", v.layers,
                                    v.hidden, v.heads, v.ffn, true);
  Layer post =
      NormLayer("vision_model.post_layernorm", v1::Norm::LAYER, v.hidden);
  post.set_positions(1);  // applied to the pooled class token only
  *spec.add_layers() = std::move(post);
  Layer visual = LinearLayer("visual_projection", v.hidden, projection, false);
  visual.set_positions(1);
  *spec.add_layers() = std::move(visual);

  Layer tokens = EmbeddingLayer("text_model.embeddings.token_embedding", vocab,
                                text_hidden);
  tokens.set_positions(text_positions);
  *spec.add_layers() = std::move(tokens);
  *spec.add_layers() = ParametersLayer(
      "text_model.embeddings.position_embedding", text_max * text_hidden);
  Layer text_stack = EncoderStack("text_model.encoder.layers", text_layers,
                                  text_hidden, text_heads, text_ffn, true);
  text_stack.set_positions(text_positions);
  *spec.add_layers() = std::move(text_stack);
  Layer text_norm =
      NormLayer("text_model.final_layer_norm", v1::Norm::LAYER, text_hidden);
  text_norm.set_positions(text_positions);
  *spec.add_layers() = std::move(text_norm);
  Layer text_proj =
      LinearLayer("text_projection", text_hidden, projection, false);
  text_proj.set_positions(1);
  *spec.add_layers() = std::move(text_proj);
  *spec.add_layers() = ParametersLayer("logit_scale", 1);
  c.Note(
      "CLIPModel: both towers, the bias-free projections and logit_scale; "
      "learned position tables and the class embedding are parameters. "
      "seq_len sets the text length. Attention is marked fused "
      "(transformers' default scaled_dot_product_attention).");
  return absl::OkStatus();
}

// ---- Swin and ConvNeXt (hierarchical vision models) -------------------------

// The classifier of a *ForImageClassification model: as many outputs as
// id2label has entries (or num_labels), PretrainedConfig's 2 without
// either. Zero when architectures names no classification model.
absl::StatusOr<uint64_t> ImageClassifierLabels(ConfigKeys& keys,
                                               const Json& config) {
  bool classifier = false;
  if (config.contains("architectures") &&
      config.at("architectures").is_array()) {
    for (const Json& name : config.at("architectures")) {
      if (name.is_string() &&
          absl::EndsWith(name.get<std::string>(), "ForImageClassification")) {
        classifier = true;
      }
    }
  }
  if (!classifier) return 0;
  if (config.contains("id2label") && config.at("id2label").is_object()) {
    const uint64_t n = config.at("id2label").size();
    if (n < 1 || n > kMaxVocab) {
      return OutOfRange(keys.Path("id2label"), n, 1, kMaxVocab);
    }
    return n;
  }
  return keys.Size("num_labels", 2, 1, kMaxVocab);
}

// Stride-`patch` convolution from the image to a side x side grid, with a
// LayerNorm over its channels.
void AppendPatchStem(const std::string& prefix, const std::string& norm_name,
                     uint64_t channels, uint64_t dim, uint64_t patch,
                     uint64_t image, v1::ModelSpec* spec) {
  const uint64_t side = image / patch;
  Layer stem = Named(prefix);
  stem.set_positions(side * side);
  v1::Conv* conv = stem.mutable_conv();
  conv->set_in_channels(channels);
  conv->set_out_channels(dim);
  conv->add_kernel(patch);
  conv->set_bias(true);
  conv->set_in_positions(image * image);
  *spec->add_layers() = std::move(stem);
  Layer norm = NormLayer(norm_name, v1::Norm::LAYER, dim);
  norm.set_positions(side * side);
  *spec->add_layers() = std::move(norm);
}

void AppendImageHead(const std::string& norm_name, uint64_t dim,
                     uint64_t labels, v1::ModelSpec* spec) {
  Layer norm = NormLayer(norm_name, v1::Norm::LAYER, dim);
  norm.set_positions(1);  // over the pooled features
  *spec->add_layers() = std::move(norm);
  if (labels == 0) return;
  Layer classifier = LinearLayer("classifier", dim, labels, true);
  classifier.set_positions(1);
  *spec->add_layers() = std::move(classifier);
}

// The input of a hierarchical vision model: num_channels=3, image_size=224,
// patch_size=4 (ConvNextConfig and SwinConfig alike).
struct ImageStem {
  uint64_t channels = 0;
  uint64_t image = 0;
  uint64_t patch = 0;
};

absl::StatusOr<ImageStem> ReadImageStem(ConfigKeys& keys) {
  ImageStem stem;
  ASSIGN_OR_RETURN(stem.channels,
                   keys.Size("num_channels", 3, 1, kMaxChannels));
  ASSIGN_OR_RETURN(stem.image, keys.Size("image_size", 224, 1, kMaxImageSide));
  ASSIGN_OR_RETURN(stem.patch, keys.Size("patch_size", 4, 1,
                                         std::min(stem.image, kMaxPatch)));
  return stem;
}

absl::Status ConvertConvNext(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "ConvNextConfig");
  // ConvNextConfig: num_channels=3, patch_size=4,
  // hidden_sizes=[96, 192, 384, 768], depths=[3, 3, 9, 3],
  // layer_scale_init_value=1e-6 (a per-channel scale when positive),
  // image_size=224.
  ASSIGN_OR_RETURN(const ImageStem stem, ReadImageStem(keys));
  const uint64_t channels = stem.channels;
  const uint64_t image = stem.image;
  const uint64_t patch = stem.patch;
  ASSIGN_OR_RETURN(
      std::vector<uint64_t> dims,
      keys.SizeList("hidden_sizes", {96, 192, 384, 768}, kMaxHidden));
  ASSIGN_OR_RETURN(std::vector<uint64_t> depths,
                   keys.SizeList("depths", {3, 3, 9, 3}, kMaxLayers));
  if (dims.size() != depths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: hidden_sizes has ", dims.size(),
                     " stages, depths ", depths.size(), "; they must match"));
  }
  bool layer_scale = true;
  if (keys.Has("layer_scale_init_value")) {
    const Json& v = keys.Raw("layer_scale_init_value");
    if (!v.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: layer_scale_init_value = ", Abbreviated(v),
                       " is not a number"));
    }
    layer_scale = v.get<double>() > 0;
  }
  ASSIGN_OR_RETURN(const uint64_t labels, ImageClassifierLabels(keys, config));
  v1::ModelSpec& spec = c.spec();
  uint64_t side = image / patch;
  if (side == 0 || side >> (dims.size() - 1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: image_size = ", image, " is too small for ",
                     dims.size(), " stages after patch_size = ", patch));
  }
  spec.set_family("conv");
  spec.set_positions(side * side);
  spec.set_input_source(absl::StrCat(
      image, "x", image, " images: a ", side, "x", side,
      " grid after the patch stem, halved before each later stage."));
  AppendPatchStem("convnext.embeddings.patch_embeddings",
                  "convnext.embeddings.layernorm", channels, dims[0], patch,
                  image, &spec);
  for (size_t i = 0; i < dims.size(); ++i) {
    const std::string prefix = absl::StrCat("convnext.encoder.stages.", i, ".");
    const uint64_t dim = dims[i];
    if (i > 0) {
      const uint64_t in_positions = side * side;
      side /= 2;
      Layer norm = NormLayer(prefix + "downsampling_layer.0", v1::Norm::LAYER,
                             dims[i - 1]);
      norm.set_positions(in_positions);
      *spec.add_layers() = std::move(norm);
      Layer down = Named(prefix + "downsampling_layer.1");
      down.set_positions(side * side);
      down.mutable_conv()->set_in_channels(dims[i - 1]);
      down.mutable_conv()->set_out_channels(dim);
      down.mutable_conv()->add_kernel(2);
      down.mutable_conv()->set_bias(true);
      down.mutable_conv()->set_in_positions(in_positions);
      *spec.add_layers() = std::move(down);
    }
    std::vector<Layer> parts;
    Layer dw = Named("dwconv");
    dw.mutable_conv()->set_in_channels(dim);
    dw.mutable_conv()->set_out_channels(dim);
    dw.mutable_conv()->add_kernel(7);
    dw.mutable_conv()->set_groups(dim);
    dw.mutable_conv()->set_bias(true);
    parts.push_back(std::move(dw));
    parts.push_back(NormLayer("layernorm", v1::Norm::LAYER, dim));
    parts.push_back(MlpLayer("pwconv1+pwconv2", dim, 4 * dim, false, true));
    if (layer_scale) {
      parts.push_back(ParametersLayer("layer_scale_parameter", dim));
    }
    Layer stage = BlockLayer(
        prefix + "layers", static_cast<uint32_t>(depths[i]), std::move(parts));
    stage.set_positions(side * side);
    *spec.add_layers() = std::move(stage);
  }
  AppendImageHead("convnext.layernorm", dims.back(), labels, &spec);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: ConvNeXt's grid comes from image_size."));
  }
  c.Note(absl::StrCat(
      "ConvNext", labels != 0 ? "ForImageClassification" : "Model",
      ": patch stem, stages of 7x7 depthwise convolution, LayerNorm and a "
      "4x MLP",
      layer_scale ? " with a per-channel layer scale" : "",
      ", LayerNorm + stride-2 convolution between stages, a final LayerNorm "
      "over the pooled features",
      labels != 0 ? absl::StrCat(" and a ", labels, "-way classifier") : "",
      "."));
  return absl::OkStatus();
}

namespace {

// Swin's mlp_ratio: a number in (0, 64], 4.0 by default.
absl::StatusOr<double> ReadMlpRatio(ConfigKeys& keys) {
  if (!keys.Has("mlp_ratio")) return 4.0;
  const Json& v = keys.Raw("mlp_ratio");
  if (!v.is_number() || v.get<double>() <= 0 || v.get<double>() > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: mlp_ratio = ", Abbreviated(v),
                     " is out of range; allowed a number in (0, 64]"));
  }
  return v.get<double>();
}

// Stage i of Swin: `depth` blocks of window attention (w x w windows, a
// relative position bias table) and an MLP over side x side tokens of
// width `dim`.
Layer SwinStage(size_t i, uint64_t depth, uint64_t dim, uint64_t heads,
                uint64_t w, double mlp_ratio, bool qkv_bias, uint64_t side) {
  const uint64_t ffn = static_cast<uint64_t>(mlp_ratio * dim);
  std::vector<Layer> parts;
  parts.push_back(NormLayer("layernorm_before", v1::Norm::LAYER, dim));
  parts.push_back(ParametersLayer("attention.self.relative_position_bias_table",
                                  (2 * w - 1) * (2 * w - 1) * heads));
  Layer attn = AttentionLayer("attention", dim, heads, heads, dim / heads,
                              qkv_bias, true,
                              /*fused=*/false);
  attn.mutable_attention()->set_window(w * w);
  parts.push_back(std::move(attn));
  parts.push_back(NormLayer("layernorm_after", v1::Norm::LAYER, dim));
  parts.push_back(MlpLayer("intermediate+output", dim, ffn, false, true));
  Layer stage = BlockLayer(absl::StrCat("swin.encoder.layers.", i, ".blocks"),
                           static_cast<uint32_t>(depth), std::move(parts));
  stage.set_positions(side * side);
  return stage;
}

// PatchMerging after stage i: 2x2 neighbours concatenated, LayerNorm,
// bias-free reduction to twice the width, over `side` x `side` merged
// tokens.
void AppendPatchMerging(size_t i, uint64_t dim, uint64_t side,
                        v1::ModelSpec* spec) {
  const std::string prefix =
      absl::StrCat("swin.encoder.layers.", i, ".downsample.");
  Layer norm = NormLayer(prefix + "norm", v1::Norm::LAYER, 4 * dim);
  norm.set_positions(side * side);
  *spec->add_layers() = std::move(norm);
  Layer reduction = LinearLayer(prefix + "reduction", 4 * dim, 2 * dim, false);
  reduction.set_positions(side * side);
  *spec->add_layers() = std::move(reduction);
}

}  // namespace

absl::Status ConvertSwin(const Json& config, Conversion& c) {
  ConfigKeys keys = TopKeys(config, c, "SwinConfig");
  // SwinConfig: image_size=224, patch_size=4, num_channels=3, embed_dim=96,
  // depths=[2, 2, 6, 2], num_heads=[3, 6, 12, 24], window_size=7,
  // mlp_ratio=4.0, qkv_bias=True, use_absolute_embeddings=False.
  ASSIGN_OR_RETURN(const ImageStem stem, ReadImageStem(keys));
  const uint64_t channels = stem.channels;
  const uint64_t image = stem.image;
  const uint64_t patch = stem.patch;
  ASSIGN_OR_RETURN(const uint64_t embed_dim,
                   keys.Size("embed_dim", 96, 1, kMaxHidden));
  ASSIGN_OR_RETURN(std::vector<uint64_t> depths,
                   keys.SizeList("depths", {2, 2, 6, 2}, kMaxLayers));
  ASSIGN_OR_RETURN(std::vector<uint64_t> heads,
                   keys.SizeList("num_heads", {3, 6, 12, 24}, kMaxHeads));
  if (heads.size() != depths.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: num_heads has ", heads.size(),
                     " stages, depths ", depths.size(), "; they must match"));
  }
  ASSIGN_OR_RETURN(const uint64_t window,
                   keys.Size("window_size", 7, 1, kMaxPatch));
  ASSIGN_OR_RETURN(const double mlp_ratio, ReadMlpRatio(keys));
  ASSIGN_OR_RETURN(const bool qkv_bias, keys.Flag("qkv_bias", true));
  ASSIGN_OR_RETURN(const bool absolute,
                   keys.Flag("use_absolute_embeddings", false));
  ASSIGN_OR_RETURN(const uint64_t labels, ImageClassifierLabels(keys, config));
  uint64_t side = image / patch;
  if (side == 0 || side >> (depths.size() - 1) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: image_size = ", image, " is too small for ",
                     depths.size(), " stages after patch_size = ", patch));
  }
  v1::ModelSpec& spec = StartSpec(c, "vision-transformer", side * side);
  spec.set_input_source(absl::StrCat(
      image, "x", image, " images: ", side, "x", side,
      " patch tokens, merged 2x2 before each later stage; attention within ",
      window, "x", window, " windows."));
  AppendPatchStem("swin.embeddings.patch_embeddings.projection",
                  "swin.embeddings.norm", channels, embed_dim, patch, image,
                  &spec);
  if (absolute) {
    *spec.add_layers() = ParametersLayer("swin.embeddings.position_embeddings",
                                         (side * side + 1) * embed_dim);
  }
  uint64_t dim = embed_dim;
  for (size_t i = 0; i < depths.size(); ++i) {
    RETURN_IF_ERROR(CheckHeadsDivide(dim, heads[i],
                                     absl::StrCat("embed_dim * 2^", i),
                                     absl::StrCat("num_heads[", i, "]")));
    // A stage smaller than the window attends over the whole stage.
    const uint64_t w = std::min(window, side);
    *spec.add_layers() =
        SwinStage(i, depths[i], dim, heads[i], w, mlp_ratio, qkv_bias, side);
    if (i + 1 < depths.size()) {
      side /= 2;
      AppendPatchMerging(i, dim, side, &spec);
      dim *= 2;
    }
  }
  AppendImageHead("swin.layernorm", dim, labels, &spec);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: Swin's tokens come from image_size."));
  }
  c.Note(absl::StrCat(
      "Swin", labels != 0 ? "ForImageClassification" : "Model",
      ": shifted-window attention with a relative position bias table per "
      "block (added to an explicit score matrix, so not marked fused), "
      "patch merging between stages, a final LayerNorm over the pooled "
      "features",
      labels != 0 ? absl::StrCat(" and a ", labels, "-way classifier") : "",
      "."));
  return absl::OkStatus();
}

// ---- DINOv2 -----------------------------------------------------------------

// Dinov2Model and Dinov2WithRegistersModel (transformers' modeling_dinov2.py
// @ 158e70c, modular_dinov2_with_registers.py @ 3d8131e): a ViT with
// pre-LayerNorm layers whose attention and MLP outputs are each scaled by
// a per-channel LayerScale (lambda1, hidden values), an MLP of
// int(hidden_size * mlp_ratio) or, with use_swiglu_ffn (ViT-g), a SwiGLU
// whose weights_in projects to 2 x hf and weights_out back, hf =
// (int(int(hidden * mlp_ratio) * 2 / 3) + 7) // 8 * 8; no pooler weights
// (the pooled output is the class token). With registers,
// num_register_tokens learned tokens join the sequence after the class
// token; the position table stays (patches + 1) x hidden.
absl::Status ConvertDinov2(const Json& config, Conversion& c, bool registers) {
  ConfigKeys keys = TopKeys(
      config, c, registers ? "Dinov2WithRegistersConfig" : "Dinov2Config");
  // Dinov2Config (configuration_dinov2.py @ 7667cc2): hidden_size=768,
  // num_hidden_layers=12, num_attention_heads=12, mlp_ratio=4,
  // image_size=224, patch_size=14, num_channels=3, qkv_bias=True,
  // use_swiglu_ffn=False, use_mask_token=True; with registers patch_size=16
  // and num_register_tokens=4.
  VisionShape v;
  ASSIGN_OR_RETURN(v.hidden, keys.Size("hidden_size", 768, 1, kMaxHidden));
  ASSIGN_OR_RETURN(v.layers, keys.Size("num_hidden_layers", 12, 1, kMaxLayers));
  ASSIGN_OR_RETURN(v.heads, keys.Size("num_attention_heads", 12, 1, kMaxHeads));
  RETURN_IF_ERROR(CheckHeadsDivide(v.hidden, v.heads, keys.Path("hidden_size"),
                                   keys.Path("num_attention_heads")));
  ASSIGN_OR_RETURN(const double mlp_ratio, ReadMlpRatio(keys));
  ASSIGN_OR_RETURN(v.image_size,
                   keys.Size("image_size", 224, 1, kMaxImageSide));
  ASSIGN_OR_RETURN(v.patch_size, keys.Size("patch_size", registers ? 16 : 14, 1,
                                           std::min(v.image_size, kMaxPatch)));
  ASSIGN_OR_RETURN(v.channels, keys.Size("num_channels", 3, 1, kMaxChannels));
  ASSIGN_OR_RETURN(const bool qkv_bias, keys.Flag("qkv_bias", true));
  ASSIGN_OR_RETURN(const bool swiglu, keys.Flag("use_swiglu_ffn", false));
  ASSIGN_OR_RETURN(const bool mask_token, keys.Flag("use_mask_token", true));
  uint64_t register_tokens = 0;
  if (registers) {
    ASSIGN_OR_RETURN(register_tokens,
                     keys.Size("num_register_tokens", 4, 0, 1024));
  }
  const uint64_t side = v.image_size / v.patch_size;
  v.patches = side * side;
  const uint64_t ratio_ffn =
      static_cast<uint64_t>(static_cast<double>(v.hidden) * mlp_ratio);
  v.ffn = swiglu ? (ratio_ffn * 2 / 3 + 7) / 8 * 8 : ratio_ffn;
  if (v.ffn == 0 || v.ffn > kMaxFfn) {
    return OutOfRange(keys.Path("mlp_ratio"), v.ffn, 1, kMaxFfn);
  }
  const uint64_t tokens = v.patches + 1 + register_tokens;
  v1::ModelSpec& spec =
      StartSpec(c, registers ? "dinov2-with-registers" : "dinov2", tokens);
  spec.set_input_source(absl::StrCat(
      tokens, " tokens per sample: (image_size ", v.image_size,
      " / patch_size ", v.patch_size, ")^2 patches + the class token",
      register_tokens != 0 ? absl::StrCat(" + ", register_tokens, " registers")
                           : "",
      "."));
  AppendVisionEmbeddings("embeddings.", v, /*conv_bias=*/true,
                         /*class_token_first=*/true, &spec);
  if (mask_token) {
    *spec.add_layers() = ParametersLayer("embeddings.mask_token", v.hidden);
  }
  if (register_tokens != 0) {
    *spec.add_layers() = ParametersLayer("embeddings.register_tokens",
                                         register_tokens * v.hidden);
  }
  std::vector<Layer> parts;
  parts.push_back(NormLayer("norm1", v1::Norm::LAYER, v.hidden));
  parts.push_back(AttentionLayer("attention", v.hidden, v.heads, v.heads,
                                 v.hidden / v.heads, qkv_bias, true,
                                 /*fused=*/true));
  parts.push_back(ParametersLayer("layer_scale1", v.hidden));
  parts.push_back(NormLayer("norm2", v1::Norm::LAYER, v.hidden));
  parts.push_back(MlpLayer(
      swiglu ? "mlp (SwiGLU weights_in, weights_out)" : "mlp (fc1, fc2)",
      v.hidden, v.ffn, swiglu, true));
  parts.push_back(ParametersLayer("layer_scale2", v.hidden));
  *spec.add_layers() = BlockLayer(
      "encoder.layer", static_cast<uint32_t>(v.layers), std::move(parts));
  *spec.add_layers() = NormLayer("layernorm", v1::Norm::LAYER, v.hidden);
  if (c.options.seq_len != 0) {
    c.Note(absl::StrCat("seq_len ", c.options.seq_len,
                        " ignored: DINOv2's tokens come from image_size and "
                        "patch_size."));
  }
  c.Note(absl::StrCat(
      registers ? "Dinov2WithRegistersModel" : "Dinov2Model",
      " (no classifier head): LayerScale after attention and MLP, ",
      swiglu ? "a SwiGLU MLP" : "a GELU MLP", " of ", v.ffn,
      "; attention marked fused (transformers' default "
      "scaled_dot_product_attention)."));
  return absl::OkStatus();
}

absl::Status ConvertDinov2(const Json& config, Conversion& c) {
  return ConvertDinov2(config, c, /*registers=*/false);
}

absl::Status ConvertDinov2WithRegisters(const Json& config, Conversion& c) {
  return ConvertDinov2(config, c, /*registers=*/true);
}

}  // namespace headroom::hf
