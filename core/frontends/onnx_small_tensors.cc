// The values of small tensors in a graph: constants read from their
// protos, shapes and arithmetic on shapes evaluated node by node.

#include "core/frontends/onnx_small_tensors.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace headroom {
namespace onnx_internal {
namespace {

constexpr size_t kMaxSmallElements = 64;

bool IsIntegerType(int32_t t) {
  return t == onnx::TensorProto::INT64 || t == onnx::TensorProto::INT32 ||
         t == onnx::TensorProto::BOOL;
}

bool IsEvaluableType(int32_t t) {
  return IsIntegerType(t) || t == onnx::TensorProto::FLOAT ||
         t == onnx::TensorProto::DOUBLE;
}

template <typename T>
bool ReadRaw(const std::string& raw, size_t n, std::vector<double>* out) {
  if (raw.size() != n * sizeof(T)) return false;
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, raw.data() + i * sizeof(T), sizeof(T));
    out->push_back(static_cast<double>(v));
  }
  return true;
}

// The fully known dims of an inferred type, when it is small.
std::optional<std::vector<int64_t>> SmallDims(const onnx::TypeProto* type) {
  if (type == nullptr || !type->has_tensor_type() ||
      !type->tensor_type().has_shape()) {
    return std::nullopt;
  }
  std::vector<int64_t> dims;
  size_t n = 1;
  for (const auto& d : type->tensor_type().shape().dim()) {
    if (!d.has_dim_value() || d.dim_value() < 0) return std::nullopt;
    dims.push_back(d.dim_value());
    n *= static_cast<size_t>(d.dim_value());
    if (n > kMaxSmallElements) return std::nullopt;
  }
  return dims;
}

int64_t IntAttr(const onnx::NodeProto& n, const char* name, int64_t fallback) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

// Element-wise on broadcast 0-/1-d operands.
std::optional<std::vector<double>> Broadcast(
    const std::vector<const SmallTensor*>& in, double (*f)(double, double)) {
  size_t n = 1;
  for (const SmallTensor* t : in) {
    if (t->dims.size() > 1) return std::nullopt;
    if (t->values.size() != 1) {
      if (n != 1 && n != t->values.size()) return std::nullopt;
      n = t->values.size();
    }
  }
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const auto at = [&](const SmallTensor* t) {
      return t->values.size() == 1 ? t->values[0] : t->values[i];
    };
    double v = at(in[0]);
    for (size_t k = 1; k < in.size(); ++k) v = f(v, at(in[k]));
    out[i] = v;
  }
  return out;
}

// The dims of a tensor type whose every dimension is known.
std::optional<std::vector<int64_t>> KnownShape(const onnx::TypeProto* type) {
  if (type == nullptr || !type->has_tensor_type() ||
      !type->tensor_type().has_shape()) {
    return std::nullopt;
  }
  std::vector<int64_t> v;
  for (const auto& d : type->tensor_type().shape().dim()) {
    if (!d.has_dim_value()) return std::nullopt;
    v.push_back(d.dim_value());
  }
  return v;
}

// Shape: the input's dims from `start` to `end`. False when they are not
// all known.
bool EvaluateShape(const onnx::NodeProto& n,
                   const std::vector<const onnx::TypeProto*>& input_types,
                   std::vector<double>* values) {
  const std::optional<std::vector<int64_t>> shape =
      input_types.empty() ? std::nullopt : KnownShape(input_types[0]);
  if (!shape.has_value()) return false;
  const int64_t rank = static_cast<int64_t>(shape->size());
  int64_t start = IntAttr(n, "start", 0);
  int64_t end = IntAttr(n, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  for (int64_t k = start; k < end; ++k) {
    values->push_back(static_cast<double>((*shape)[k]));
  }
  return true;
}

// Gather along axis 0 of a 1-d tensor.
bool EvaluateGather(const onnx::NodeProto& n,
                    const std::vector<const SmallTensor*>& in,
                    std::vector<double>* values) {
  if (in.size() != 2 || in[0]->dims.size() != 1 || IntAttr(n, "axis", 0) != 0) {
    return false;
  }
  const int64_t size = static_cast<int64_t>(in[0]->values.size());
  for (double v : in[1]->values) {
    int64_t k = static_cast<int64_t>(v);
    if (k < 0) k += size;
    if (k < 0 || k >= size) return false;
    values->push_back(in[0]->values[static_cast<size_t>(k)]);
  }
  return true;
}

// Slice of a 1-d tensor with step 1.
bool EvaluateSlice(const std::vector<const SmallTensor*>& in,
                   std::vector<double>* values) {
  if (in.size() < 3 || in[0]->dims.size() != 1 || in[1]->values.size() != 1 ||
      in[2]->values.size() != 1) {
    return false;
  }
  const int64_t size = static_cast<int64_t>(in[0]->values.size());
  const int64_t step =
      in.size() >= 5 ? static_cast<int64_t>(in[4]->values[0]) : 1;
  if (step != 1) return false;
  int64_t start =
      static_cast<int64_t>(std::clamp<double>(in[1]->values[0], -1e18, 1e18));
  int64_t end =
      static_cast<int64_t>(std::clamp<double>(in[2]->values[0], -1e18, 1e18));
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  for (int64_t k = start; k < end; ++k) {
    values->push_back(in[0]->values[static_cast<size_t>(k)]);
  }
  return true;
}

// Element-wise arithmetic on broadcast operands, and the unary ops; an
// integer Div truncates. False for another op.
bool EvaluateArithmetic(const std::string& op, bool integer,
                        const std::vector<const SmallTensor*>& in,
                        std::vector<double>* values) {
  double (*f)(double, double) = nullptr;
  if (op == "Add" || op == "Sum") {
    f = [](double a, double b) { return a + b; };
  } else if (op == "Sub") {
    f = [](double a, double b) { return a - b; };
  } else if (op == "Mul") {
    f = [](double a, double b) { return a * b; };
  } else if (op == "Div") {
    f = integer ? [](double a,
                     double b) { return b == 0 ? 0.0 : std::trunc(a / b); }
                : [](double a, double b) { return b == 0 ? 0.0 : a / b; };
  } else if (op == "Max") {
    f = [](double a, double b) { return std::max(a, b); };
  } else if (op == "Min") {
    f = [](double a, double b) { return std::min(a, b); };
  } else if (op == "Equal") {
    f = [](double a, double b) { return a == b ? 1.0 : 0.0; };
  } else if (op == "Neg" || op == "Floor" || op == "Ceil" || op == "Abs") {
    for (double v : in[0]->values) {
      values->push_back(op == "Neg"     ? -v
                        : op == "Floor" ? std::floor(v)
                        : op == "Ceil"  ? std::ceil(v)
                                        : std::abs(v));
    }
    return true;
  } else {
    return false;
  }
  std::optional<std::vector<double>> v = Broadcast(in, f);
  if (!v.has_value()) return false;
  *values = std::move(*v);
  return true;
}

// The ops other than Shape, on known input values.
bool EvaluateValues(const onnx::NodeProto& n,
                    const std::vector<const SmallTensor*>& in,
                    SmallTensor* out) {
  const std::string& op = n.op_type();
  for (const SmallTensor* t : in) {
    if (t == nullptr) return false;
  }
  if (in.empty()) return false;
  if (op == "Identity" || op == "Cast" || op == "Unsqueeze" ||
      op == "Squeeze" || op == "Reshape" || op == "Flatten") {
    out->values = in[0]->values;
    return true;
  }
  if (op == "Gather") return EvaluateGather(n, in, &out->values);
  if (op == "Concat") {
    for (const SmallTensor* t : in) {
      out->values.insert(out->values.end(), t->values.begin(), t->values.end());
    }
    return true;
  }
  if (op == "Slice") return EvaluateSlice(in, &out->values);
  return EvaluateArithmetic(op, IsIntegerType(out->type), in, &out->values);
}

}  // namespace

std::optional<SmallTensor> ReadSmallTensor(const onnx::TensorProto& t) {
  SmallTensor s;
  s.type = t.data_type();
  if (!IsEvaluableType(s.type) || t.data_location() != 0) return std::nullopt;
  size_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || d > static_cast<int64_t>(kMaxSmallElements)) {
      return std::nullopt;
    }
    n *= static_cast<size_t>(d);
    s.dims.push_back(d);
  }
  if (n > kMaxSmallElements) return std::nullopt;
  bool ok = true;
  if (!t.raw_data().empty()) {
    switch (s.type) {
      case onnx::TensorProto::INT64:
        ok = ReadRaw<int64_t>(t.raw_data(), n, &s.values);
        break;
      case onnx::TensorProto::INT32:
        ok = ReadRaw<int32_t>(t.raw_data(), n, &s.values);
        break;
      case onnx::TensorProto::BOOL:
        ok = ReadRaw<uint8_t>(t.raw_data(), n, &s.values);
        break;
      case onnx::TensorProto::FLOAT:
        ok = ReadRaw<float>(t.raw_data(), n, &s.values);
        break;
      default:
        ok = ReadRaw<double>(t.raw_data(), n, &s.values);
        break;
    }
  } else {
    for (int64_t v : t.int64_data()) s.values.push_back(static_cast<double>(v));
    for (int32_t v : t.int32_data()) s.values.push_back(v);
    for (float v : t.float_data()) s.values.push_back(v);
    for (double v : t.double_data()) s.values.push_back(v);
  }
  if (!ok || s.values.size() != n) return std::nullopt;
  return s;
}

void WriteSmallTensor(const SmallTensor& s, const std::string& name,
                      onnx::TensorProto* t) {
  t->set_name(name);
  t->set_data_type(s.type);
  for (int64_t d : s.dims) t->add_dims(d);
  for (double v : s.values) {
    switch (s.type) {
      case onnx::TensorProto::INT64:
        t->add_int64_data(static_cast<int64_t>(v));
        break;
      case onnx::TensorProto::INT32:
      case onnx::TensorProto::BOOL:
        t->add_int32_data(static_cast<int32_t>(v));
        break;
      case onnx::TensorProto::FLOAT:
        t->add_float_data(static_cast<float>(v));
        break;
      default:
        t->add_double_data(v);
        break;
    }
  }
}

std::optional<SmallTensor> EvaluateSmallTensor(
    const onnx::NodeProto& n, const std::vector<const SmallTensor*>& in,
    const std::vector<const onnx::TypeProto*>& input_types,
    const onnx::TypeProto* output_type) {
  SmallTensor out;
  out.type = output_type != nullptr && output_type->has_tensor_type()
                 ? output_type->tensor_type().elem_type()
                 : 0;
  const std::optional<std::vector<int64_t>> dims = SmallDims(output_type);
  if (!IsEvaluableType(out.type) || !dims.has_value()) return std::nullopt;
  out.dims = *dims;
  size_t count = 1;
  for (int64_t d : out.dims) count *= static_cast<size_t>(d);
  const bool evaluated = n.op_type() == "Shape"
                             ? EvaluateShape(n, input_types, &out.values)
                             : EvaluateValues(n, in, &out);
  if (!evaluated) return std::nullopt;
  if (IsIntegerType(out.type)) {
    for (double& v : out.values) v = std::trunc(v);
  }
  if (out.values.size() != count) return std::nullopt;
  return out;
}

}  // namespace onnx_internal
}  // namespace headroom
