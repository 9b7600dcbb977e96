// Shape arithmetic as exports with dynamic axes write it (Shape -> Gather
// -> Div -> Concat), evaluated by core/frontends/onnx_small_tensors.h.

#include "core/frontends/onnx_small_tensors.h"

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace onnx_internal {
namespace {

using ::testing::ElementsAre;

onnx::TypeProto TensorType(int32_t elem_type,
                           const std::vector<int64_t>& dims) {
  onnx::TypeProto type;
  type.mutable_tensor_type()->set_elem_type(elem_type);
  auto* shape = type.mutable_tensor_type()->mutable_shape();
  for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  return type;
}

SmallTensor Int64s(const std::vector<double>& values) {
  SmallTensor t;
  t.type = onnx::TensorProto::INT64;
  t.dims = {static_cast<int64_t>(values.size())};
  t.values = values;
  return t;
}

onnx::NodeProto Node(const std::string& op) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.add_output("y");
  return n;
}

TEST(OnnxSmallTensors, ShapeReadsTheInputsDimsFromStart) {
  const onnx::TypeProto input =
      TensorType(onnx::TensorProto::FLOAT, {1, 128, 768});
  onnx::NodeProto shape = Node("Shape");
  const onnx::TypeProto all = TensorType(onnx::TensorProto::INT64, {3});
  std::optional<SmallTensor> v =
      EvaluateSmallTensor(shape, {nullptr}, {&input}, &all);
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->values, ElementsAre(1, 128, 768));

  onnx::AttributeProto* start = shape.add_attribute();
  start->set_name("start");
  start->set_i(1);
  const onnx::TypeProto tail = TensorType(onnx::TensorProto::INT64, {2});
  v = EvaluateSmallTensor(shape, {nullptr}, {&input}, &tail);
  ASSERT_TRUE(v.has_value());
  EXPECT_THAT(v->values, ElementsAre(128, 768));
}

TEST(OnnxSmallTensors, HeadSizeArithmetic) {
  const onnx::TypeProto one = TensorType(onnx::TensorProto::INT64, {1});
  // Gather(-1) of [1, 128, 768]: the hidden size.
  const SmallTensor shape = Int64s({1, 128, 768});
  const SmallTensor last = Int64s({-1});
  std::optional<SmallTensor> hidden =
      EvaluateSmallTensor(Node("Gather"), {&shape, &last}, {}, &one);
  ASSERT_TRUE(hidden.has_value());
  EXPECT_THAT(hidden->values, ElementsAre(768));
  // An integer Div truncates; a division by zero gives 0.
  const SmallTensor heads = Int64s({12});
  const SmallTensor seven = Int64s({7});
  const SmallTensor two = Int64s({2});
  const SmallTensor zero = Int64s({0});
  EXPECT_THAT(
      EvaluateSmallTensor(Node("Div"), {&*hidden, &heads}, {}, &one)->values,
      ElementsAre(64));
  EXPECT_THAT(
      EvaluateSmallTensor(Node("Div"), {&seven, &two}, {}, &one)->values,
      ElementsAre(3));
  EXPECT_THAT(
      EvaluateSmallTensor(Node("Div"), {&seven, &zero}, {}, &one)->values,
      ElementsAre(0));
  // Concat of [1, 128] and [12, 64]: a Reshape target.
  const SmallTensor batch_seq = Int64s({1, 128});
  const SmallTensor split = Int64s({12, 64});
  const onnx::TypeProto four = TensorType(onnx::TensorProto::INT64, {4});
  EXPECT_THAT(
      EvaluateSmallTensor(Node("Concat"), {&batch_seq, &split}, {}, &four)
          ->values,
      ElementsAre(1, 128, 12, 64));
}

TEST(OnnxSmallTensors, UnknownInputsOrOpsAreNotEvaluated) {
  const onnx::TypeProto one = TensorType(onnx::TensorProto::INT64, {1});
  const SmallTensor two = Int64s({2});
  EXPECT_FALSE(
      EvaluateSmallTensor(Node("Add"), {&two, nullptr}, {}, &one).has_value());
  EXPECT_FALSE(
      EvaluateSmallTensor(Node("MatMul"), {&two, &two}, {}, &one).has_value());
  // The output's count must match what the op makes.
  const onnx::TypeProto three = TensorType(onnx::TensorProto::INT64, {3});
  EXPECT_FALSE(
      EvaluateSmallTensor(Node("Add"), {&two, &two}, {}, &three).has_value());
}

TEST(OnnxSmallTensors, RawDataReadsAndWritesBack) {
  onnx::TensorProto raw;
  raw.set_data_type(onnx::TensorProto::INT64);
  raw.add_dims(2);
  const int64_t values[] = {12, -1};
  raw.set_raw_data(
      std::string(reinterpret_cast<const char*>(values), sizeof(values)));
  std::optional<SmallTensor> read = ReadSmallTensor(raw);
  ASSERT_TRUE(read.has_value());
  EXPECT_THAT(read->values, ElementsAre(12, -1));

  onnx::TensorProto written;
  WriteSmallTensor(*read, "shape", &written);
  EXPECT_EQ(written.name(), "shape");
  EXPECT_THAT(written.int64_data(), ElementsAre(12, -1));
  EXPECT_THAT(written.dims(), ElementsAre(2));

  // More than 64 elements is not small.
  onnx::TensorProto big;
  big.set_data_type(onnx::TensorProto::INT64);
  big.add_dims(65);
  for (int k = 0; k < 65; ++k) big.add_int64_data(k);
  EXPECT_FALSE(ReadSmallTensor(big).has_value());
}

}  // namespace
}  // namespace onnx_internal
}  // namespace headroom
