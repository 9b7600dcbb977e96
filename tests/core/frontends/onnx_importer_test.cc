// The ONNX importer's naming and repeat rules (core/frontends/onnx_importer.h),
// which the layer names and blocks of every imported spec follow.

#include "core/frontends/onnx_importer.h"

#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace headroom {
namespace onnx_internal {
namespace {

v1::Layer Linear(const std::string& name, uint64_t in, uint64_t out) {
  v1::Layer layer;
  layer.set_name(name);
  layer.mutable_linear()->set_in_features(in);
  layer.mutable_linear()->set_out_features(out);
  return layer;
}

TEST(OnnxImporterNames, CommonPrefixEndsAtASeparator) {
  EXPECT_EQ(CommonPrefix({"/h.0/attn/c_attn", "/h.0/attn/c_proj"}),
            "/h.0/attn");
  // "/h.1" and "/h.10" share "/h.1" only as text: the path is "/h".
  EXPECT_EQ(CommonPrefix({"/h.1/mlp", "/h.10/mlp"}), "/h");
  EXPECT_EQ(CommonPrefix({"/h.0/ln_1", "/h.0/ln_1"}), "/h.0/ln_1");
  EXPECT_EQ(CommonPrefix({"embed", "lm_head"}), "");
  EXPECT_EQ(CommonPrefix({}), "");
}

TEST(OnnxImporterNames, GroupNameJoinsTheLastComponents) {
  EXPECT_EQ(GroupName("/h.0/attn/c_attn", "/h.0/attn/c_proj"),
            "/h.0/attn/c_attn+c_proj");
  EXPECT_EQ(GroupName("/h.0/mlp/fc", "/h.0/mlp/fc"), "/h.0/mlp/fc");
  // Remainders of more than one component: the common path alone.
  EXPECT_EQ(GroupName("/h.0/attn/q/proj", "/h.0/attn/o/proj"), "/h.0/attn");
  // Nothing in common and no path: the first name.
  EXPECT_EQ(GroupName("a/b/c", "x/y/z"), "a/b/c");
}

TEST(OnnxImporterRepeats, IdenticalRunsBecomeOneBlock) {
  std::vector<v1::Layer> layers = {Linear("embed", 8, 16)};
  for (int i = 0; i < 3; ++i) {
    const std::string prefix = "/h." + std::to_string(i);
    layers.push_back(Linear(prefix + "/up", 16, 64));
    layers.push_back(Linear(prefix + "/down", 64, 16));
  }
  layers.push_back(Linear("head", 16, 8));
  const std::vector<v1::Layer> out = CompressRepeats(std::move(layers));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].name(), "embed");
  EXPECT_EQ(out[1].name(), "/h");  // "/h.0" without its index
  EXPECT_EQ(out[1].repeat(), 3u);
  ASSERT_EQ(out[1].block().layers_size(), 2);
  EXPECT_EQ(out[1].block().layers(0).name(), "/h.0/up");
  EXPECT_EQ(out[1].block().layers(1).linear().in_features(), 64u);
  EXPECT_EQ(out[2].name(), "head");
}

TEST(OnnxImporterRepeats, DifferentLayersStayAsTheyAre) {
  std::vector<v1::Layer> layers = {Linear("a", 8, 16), Linear("b", 16, 8),
                                   Linear("c", 8, 4)};
  const std::vector<v1::Layer> out = CompressRepeats(layers);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].name(), "c");
  EXPECT_FALSE(out[0].has_block());
}

}  // namespace
}  // namespace onnx_internal
}  // namespace headroom
