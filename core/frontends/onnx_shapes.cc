#include "core/frontends/onnx_shapes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

namespace headroom {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 32;
constexpr uint64_t kMaxElements = uint64_t{1} << 50;
// Most axes a tensor may have, and values an integer-list attribute may hold.
constexpr int kMaxRank = 64;
constexpr int kMaxAttributeValues = 1024;

// Operators whose inference function runs: those of training graphs, each
// checked against malformed input (mutated graphs) with the preconditions
// in Inferable().
constexpr char kInferredOps[] =
    "Abs Add And ArgMax ArgMin AveragePool BatchNormalization Cast Ceil Celu "
    "Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos Cosh CumSum "
    "Div Dropout Elu Equal Erf Exp Expand Flatten Floor GRU Gather Gemm "
    "GlobalAveragePool GlobalMaxPool Greater GreaterOrEqual HardSigmoid "
    "HardSwish Identity InstanceNormalization LSTM LayerNormalization "
    "LeakyRelu Less LessOrEqual Log LogSoftmax LpPool MatMul Max MaxPool Mean "
    "Min Mish Mul Neg NegativeLogLikelihoodLoss Not Or PRelu Pow RNN Range "
    "Reciprocal ReduceL1 ReduceL2 ReduceLogSumExp ReduceMax ReduceMean "
    "ReduceMin ReduceProd ReduceSum ReduceSumSquare Relu Reshape Round Selu "
    "Shape Sigmoid Sign Sin Sinh Size Slice Softmax SoftmaxCrossEntropyLoss "
    "Softplus Softsign Split Sqrt Squeeze Sub Sum Tanh ThresholdedRelu Tile "
    "Transpose Trilu Unsqueeze Where Xor";

bool Inferred(const std::string& op) {
  static const auto* ops = [] {
    auto* set = new std::set<std::string>();
    for (absl::string_view word :
         absl::StrSplit(kInferredOps, ' ', absl::SkipEmpty())) {
      set->emplace(word);
    }
    return set;
  }();
  return ops->count(op) != 0;
}

bool DefaultDomain(const onnx::NodeProto& n) {
  return n.domain().empty() || n.domain() == "ai.onnx";
}

// Integer attributes within what inference computes with: nothing beyond
// 2^32 in size, no stride, dilation, kernel, group, block or hidden size
// below 1 (ONNX divides by them unchecked), no negative padding.
absl::Status CheckIntAttributes(const onnx::NodeProto& n, int index) {
  for (const auto& a : n.attribute()) {
    if (a.ints_size() > kMaxAttributeValues ||
        a.floats_size() > kMaxAttributeValues) {
      return absl::InvalidArgumentError(
          absl::StrCat(OnnxNodeLabel(n, index), " attribute ", a.name(),
                       " holds ", std::max(a.ints_size(), a.floats_size()),
                       " values; allowed up to ", kMaxAttributeValues));
    }
    std::vector<int64_t> values(a.ints().begin(), a.ints().end());
    if (a.has_i()) values.push_back(a.i());
    const std::string& name = a.name();
    const bool positive = name == "strides" || name == "dilations" ||
                          name == "kernel_shape" || name == "blocksize" ||
                          name == "group" || name == "hidden_size";
    const int64_t low = positive ? 1 : name == "pads" ? 0 : -kMaxDim;
    for (int64_t v : values) {
      if (v < low || v > kMaxDim) {
        return absl::InvalidArgumentError(
            absl::StrCat(OnnxNodeLabel(n, index), " attribute ", name, " = ", v,
                         " is out of range; allowed ", low, "..", kMaxDim));
      }
    }
  }
  return absl::OkStatus();
}

// Whether a tensor carries values ONNX's inference may read: in the
// repository (not stripped, not external), of a numeric type, exactly as
// many as its dims say (inference copies them unchecked).
bool HasData(const onnx::TensorProto& t) {
  if (t.data_location() == onnx::TensorProto::EXTERNAL) return false;
  uint64_t n = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || d > kMaxDim) return false;
    n *= static_cast<uint64_t>(d);
    if (n > kMaxElements) return false;
  }
  size_t bytes = 0;
  int typed = -1;  // values in the type's repeated field
  switch (t.data_type()) {
    case onnx::TensorProto::FLOAT:
      bytes = 4;
      typed = t.float_data_size();
      break;
    case onnx::TensorProto::DOUBLE:
      bytes = 8;
      typed = t.double_data_size();
      break;
    case onnx::TensorProto::INT64:
      bytes = 8;
      typed = t.int64_data_size();
      break;
    case onnx::TensorProto::UINT64:
    case onnx::TensorProto::UINT32:
      bytes = t.data_type() == onnx::TensorProto::UINT64 ? 8 : 4;
      typed = t.uint64_data_size();
      break;
    case onnx::TensorProto::INT32:
      bytes = 4;
      typed = t.int32_data_size();
      break;
    case onnx::TensorProto::INT16:
    case onnx::TensorProto::UINT16:
    case onnx::TensorProto::FLOAT16:
    case onnx::TensorProto::BFLOAT16:
      bytes = 2;
      typed = t.int32_data_size();
      break;
    case onnx::TensorProto::INT8:
    case onnx::TensorProto::UINT8:
    case onnx::TensorProto::BOOL:
      bytes = 1;
      typed = t.int32_data_size();
      break;
    default:
      return false;
  }
  if (!t.raw_data().empty()) return t.raw_data().size() == n * bytes;
  return static_cast<uint64_t>(typed) == n;
}

int Rank(const onnx::TypeProto* type) {
  if (type == nullptr || !type->has_tensor_type() ||
      !type->tensor_type().has_shape()) {
    return -1;
  }
  return type->tensor_type().shape().dim_size();
}

// Whether ONNX's inference function for the node may run on these input
// types: true, false (its outputs stay unknown), or INVALID_ARGUMENT for a
// node that cannot be right whatever the shapes.
absl::StatusOr<bool> Inferable(
    const onnx::NodeProto& n, int index,
    const std::vector<const onnx::TypeProto*>& inputs) {
  const std::string& op = n.op_type();
  for (const onnx::TypeProto* t : inputs) {
    if (t != nullptr && !t->has_tensor_type()) return false;
  }
  const int rank = inputs.empty() ? -1 : Rank(inputs[0]);
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(
        absl::StrCat(OnnxNodeLabel(n, index), ": ", what));
  };
  auto list_size = [&](const char* name) -> int {
    for (const auto& a : n.attribute()) {
      if (a.name() == name) return a.ints_size();
    }
    return -1;
  };
  // Axis attributes name axes of the first input.
  for (const auto& a : n.attribute()) {
    if (rank < 0) break;
    const int extra = op == "Unsqueeze" || op == "Flatten" ? 1 : 0;
    if (a.name() == "axis" &&
        (a.i() < -(rank + extra) || a.i() >= rank + extra)) {
      return bad(absl::StrCat("axis = ", a.i(), " is out of range for a rank-",
                              rank, " input"));
    }
    if (a.name() == "axes" && op != "Unsqueeze") {
      for (int64_t axis : a.ints()) {
        if (axis < -rank || axis >= rank) {
          return bad(absl::StrCat(
              "axes has ", axis, ", out of range for a rank-", rank, " input"));
        }
      }
    }
    if (a.name() == "perm") {
      std::vector<int64_t> perm(a.ints().begin(), a.ints().end());
      std::sort(perm.begin(), perm.end());
      for (int k = 0; k < static_cast<int>(perm.size()); ++k) {
        if (perm.size() != static_cast<size_t>(rank) || perm[k] != k) {
          return bad(absl::StrCat("perm is not a permutation of the ", rank,
                                  " axes of its input"));
        }
      }
    }
  }
  // Shape-like inputs (a target shape, axes, repeats, slice bounds) are
  // short vectors: inference makes one output axis per value.
  const bool shape_like =
      op == "Reshape" || op == "Expand" || op == "ConstantOfShape" ||
      op == "Tile" || op == "Slice" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Split" || op.rfind("Reduce", 0) == 0;
  if (shape_like) {
    const size_t first = op == "ConstantOfShape" ? 0 : 1;
    for (size_t k = first; k < inputs.size(); ++k) {
      const onnx::TypeProto* t = inputs[k];
      if (t == nullptr || Rank(t) < 0) continue;
      const auto& shape = t->tensor_type().shape();
      if (shape.dim_size() > 1 ||
          (shape.dim_size() == 1 && shape.dim(0).has_dim_value() &&
           shape.dim(0).dim_value() > kMaxRank)) {
        return bad(absl::StrCat("input ", k, " is not a shape of at most ",
                                kMaxRank, " axes"));
      }
    }
  }
  if (rank > kMaxRank) {
    return bad(absl::StrCat("the input has ", rank, " axes; allowed up to ",
                            kMaxRank));
  }
  if (op == "Conv" || op == "ConvTranspose" || op == "MaxPool" ||
      op == "AveragePool" || op == "LpPool") {
    if (rank < 0) return false;
    const int spatial = rank - 2;
    if (spatial < 1) {
      return bad("the input needs a batch, a channel and a spatial axis");
    }
    if (op == "Conv" || op == "ConvTranspose") {
      const int w = inputs.size() > 1 ? Rank(inputs[1]) : -1;
      if (w < 0) return false;
      if (w != rank) {
        return bad(absl::StrCat("the weight has rank ", w,
                                "; the input has rank ", rank));
      }
    }
    for (const char* name : {"kernel_shape", "strides", "dilations",
                             "output_shape", "output_padding"}) {
      const int size = list_size(name);
      if (size >= 0 && size != spatial) {
        return bad(absl::StrCat(name, " has ", size, " values for ", spatial,
                                " spatial axes"));
      }
    }
    const int pads = list_size("pads");
    if (pads >= 0 && pads != 2 * spatial) {
      return bad(absl::StrCat("pads has ", pads, " values for ", spatial,
                              " spatial axes"));
    }
  }
  if (op == "LSTM" || op == "GRU" || op == "RNN") {
    for (size_t k = 0; k < inputs.size() && k < 3; ++k) {
      if (Rank(inputs[k]) >= 0 && Rank(inputs[k]) != 3) {
        return bad(absl::StrCat("input ", k, " has rank ", Rank(inputs[k]),
                                "; expected 3"));
      }
    }
  }
  if (op == "Gemm") {
    for (size_t k = 0; k < 2 && k < inputs.size(); ++k) {
      if (Rank(inputs[k]) >= 0 && Rank(inputs[k]) != 2) {
        return bad(absl::StrCat("input ", k, " has rank ", Rank(inputs[k]),
                                "; expected 2"));
      }
    }
  }
  if ((op == "BatchNormalization" || op == "InstanceNormalization") &&
      rank >= 0 && rank < 2) {
    return bad("the input needs a batch and a channel axis");
  }
  return true;
}

// The values of a small tensor: a shape, or arithmetic on shapes
// (Shape -> Gather -> Div -> Concat -> Reshape, as exports with dynamic
// axes compute head sizes). With the batch and lengths bound, all of it is
// known; ONNX 1.12 propagates only part of it, so it is evaluated here.
struct SmallTensor {
  int32_t type = 0;
  std::vector<int64_t> dims;
  std::vector<double> values;
};

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

std::optional<SmallTensor> ReadSmall(const onnx::TensorProto& t) {
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

void WriteSmall(const SmallTensor& s, const std::string& name,
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

// The values of node n's first output, when its inputs' values are known
// and it is one of the ops shapes are computed with.
std::optional<SmallTensor> Evaluate(
    const onnx::NodeProto& n, const std::vector<const SmallTensor*>& in,
    const std::vector<const onnx::TypeProto*>& input_types,
    const onnx::TypeProto* output_type) {
  const std::string& op = n.op_type();
  SmallTensor out;
  out.type = output_type != nullptr && output_type->has_tensor_type()
                 ? output_type->tensor_type().elem_type()
                 : 0;
  const std::optional<std::vector<int64_t>> dims = SmallDims(output_type);
  if (!IsEvaluableType(out.type) || !dims.has_value()) return std::nullopt;
  out.dims = *dims;
  size_t count = 1;
  for (int64_t d : out.dims) count *= static_cast<size_t>(d);
  if (op == "Shape") {
    const std::optional<std::vector<int64_t>> shape =
        input_types.empty() ? std::nullopt : [&] {
          if (input_types[0] == nullptr || !input_types[0]->has_tensor_type() ||
              !input_types[0]->tensor_type().has_shape()) {
            return std::optional<std::vector<int64_t>>();
          }
          std::vector<int64_t> v;
          for (const auto& d : input_types[0]->tensor_type().shape().dim()) {
            if (!d.has_dim_value())
              return std::optional<std::vector<int64_t>>();
            v.push_back(d.dim_value());
          }
          return std::optional<std::vector<int64_t>>(v);
        }();
    if (!shape.has_value()) return std::nullopt;
    const int64_t rank = static_cast<int64_t>(shape->size());
    int64_t start = IntAttr(n, "start", 0);
    int64_t end = IntAttr(n, "end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    for (int64_t k = start; k < end; ++k) {
      out.values.push_back(static_cast<double>((*shape)[k]));
    }
  } else {
    for (const SmallTensor* t : in) {
      if (t == nullptr) return std::nullopt;
    }
    if (in.empty()) return std::nullopt;
    if (op == "Identity" || op == "Cast" || op == "Unsqueeze" ||
        op == "Squeeze" || op == "Reshape" || op == "Flatten") {
      out.values = in[0]->values;
    } else if (op == "Gather") {
      if (in.size() != 2 || in[0]->dims.size() != 1 ||
          IntAttr(n, "axis", 0) != 0) {
        return std::nullopt;
      }
      const int64_t size = static_cast<int64_t>(in[0]->values.size());
      for (double v : in[1]->values) {
        int64_t k = static_cast<int64_t>(v);
        if (k < 0) k += size;
        if (k < 0 || k >= size) return std::nullopt;
        out.values.push_back(in[0]->values[static_cast<size_t>(k)]);
      }
    } else if (op == "Concat") {
      for (const SmallTensor* t : in) {
        out.values.insert(out.values.end(), t->values.begin(), t->values.end());
      }
    } else if (op == "Slice") {
      if (in.size() < 3 || in[0]->dims.size() != 1 ||
          in[1]->values.size() != 1 || in[2]->values.size() != 1) {
        return std::nullopt;
      }
      const int64_t size = static_cast<int64_t>(in[0]->values.size());
      const int64_t step =
          in.size() >= 5 ? static_cast<int64_t>(in[4]->values[0]) : 1;
      if (step != 1) return std::nullopt;
      int64_t start = static_cast<int64_t>(
          std::clamp<double>(in[1]->values[0], -1e18, 1e18));
      int64_t end = static_cast<int64_t>(
          std::clamp<double>(in[2]->values[0], -1e18, 1e18));
      if (start < 0) start += size;
      if (end < 0) end += size;
      start = std::clamp<int64_t>(start, 0, size);
      end = std::clamp<int64_t>(end, start, size);
      for (int64_t k = start; k < end; ++k) {
        out.values.push_back(in[0]->values[static_cast<size_t>(k)]);
      }
    } else {
      const bool integer = IsIntegerType(out.type);
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
          out.values.push_back(op == "Neg"     ? -v
                               : op == "Floor" ? std::floor(v)
                               : op == "Ceil"  ? std::ceil(v)
                                               : std::abs(v));
        }
      } else {
        return std::nullopt;
      }
      if (f != nullptr) {
        std::optional<std::vector<double>> v = Broadcast(in, f);
        if (!v.has_value()) return std::nullopt;
        out.values = std::move(*v);
      }
    }
  }
  if (IsIntegerType(out.type)) {
    for (double& v : out.values) v = std::trunc(v);
  }
  if (out.values.size() != count) return std::nullopt;
  return out;
}

}  // namespace

int OnnxDefaultOpset(const onnx::ModelProto& model) {
  int opset = 0;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") {
      opset = static_cast<int>(o.version());
    }
  }
  return opset;
}

bool IsStandardOnnxOp(const onnx::NodeProto& node, int opset) {
  return DefaultDomain(node) && onnx::OpSchemaRegistry::Instance()->GetSchema(
                                    node.op_type(), opset, "") != nullptr;
}

std::string OnnxNodeLabel(const onnx::NodeProto& node, int index) {
  return absl::StrCat("node '",
                      !node.name().empty()     ? node.name()
                      : node.output_size() > 0 ? node.output(0)
                                               : absl::StrCat("#", index),
                      "' (", node.op_type(), ")");
}

absl::Status CheckOnnxStructure(const onnx::ModelProto& model) {
  const onnx::GraphProto& graph = model.graph();
  std::unordered_set<std::string> defined;
  for (const auto& t : graph.initializer()) {
    if (t.dims_size() > kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer '", t.name(), "' has ", t.dims_size(),
                       " axes; allowed up to ", kMaxRank));
    }
    uint64_t elements = 1;
    for (int k = 0; k < t.dims_size(); ++k) {
      const int64_t d = t.dims(k);
      if (d < 0 || d > kMaxDim) {
        return absl::InvalidArgumentError(
            absl::StrCat("initializer '", t.name(), "' dims[", k, "] = ", d,
                         " is out of range; allowed 0..", kMaxDim));
      }
      if (d != 0 && elements > kMaxElements / static_cast<uint64_t>(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("initializer '", t.name(), "' holds more than ",
                         kMaxElements, " elements"));
      }
      elements *= static_cast<uint64_t>(d);
    }
    defined.insert(t.name());
  }
  for (const auto& info : graph.input()) {
    const int rank = info.type().tensor_type().shape().dim_size();
    if (rank > kMaxRank) {
      return absl::InvalidArgumentError(
          absl::StrCat("graph input '", info.name(), "' has ", rank,
                       " axes; allowed up to ", kMaxRank));
    }
    defined.insert(info.name());
  }
  const int opset = OnnxDefaultOpset(model);
  const onnx::OpSchemaRegistry* registry = onnx::OpSchemaRegistry::Instance();
  for (int i = 0; i < graph.node_size(); ++i) {
    const onnx::NodeProto& n = graph.node(i);
    if (n.output_size() == 0 || n.output(0).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(OnnxNodeLabel(n, i), " has no output"));
    }
    for (const std::string& in : n.input()) {
      if (!in.empty() && defined.count(in) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            OnnxNodeLabel(n, i), " reads '", in,
            "', which no graph input, initializer or earlier node provides "
            "(ONNX lists nodes in topological order)"));
      }
    }
    for (const auto& a : n.attribute()) {
      if (a.has_g() || a.graphs_size() > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            OnnxNodeLabel(n, i),
            " holds a subgraph; graphs with control flow (If, Loop, Scan) are "
            "not supported: export the training step without it"));
      }
    }
    RETURN_IF_ERROR(CheckIntAttributes(n, i));
    if (DefaultDomain(n)) {
      const onnx::OpSchema* schema =
          registry->GetSchema(n.op_type(), opset, "");
      if (schema != nullptr) {
        try {
          schema->Verify(n);
        } catch (const std::exception& e) {
          return absl::InvalidArgumentError(absl::StrCat(
              OnnxNodeLabel(n, i), " does not fit its operator: ", e.what()));
        }
      }
    }
    for (const std::string& out : n.output()) {
      if (!out.empty() && !defined.insert(out).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            OnnxNodeLabel(n, i), " writes '", out,
            "', which is already defined; a value has one producer in ONNX"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status InferOnnxShapes(onnx::ModelProto* model) {
  const int opset = OnnxDefaultOpset(*model);
  onnx::GraphProto* graph = model->mutable_graph();
  graph->clear_value_info();
  // The type of every value known so far, owned here, and the values whose
  // data inference may read (initializers and constants with their data,
  // and shapes computed by data propagation).
  std::unordered_map<std::string, std::unique_ptr<onnx::TypeProto>> owned;
  std::unordered_map<std::string, onnx::TypeProto*> types;
  std::unordered_map<std::string, const onnx::TensorProto*> data;
  std::unordered_map<std::string, onnx::TensorShapeProto> shape_data;
  // Values of small tensors (shapes and their arithmetic) computed here.
  std::unordered_map<std::string, SmallTensor> small;
  std::deque<onnx::TensorProto> computed;
  auto define = [&](const std::string& name, const onnx::TypeProto& type) {
    std::unique_ptr<onnx::TypeProto>& slot = owned[name];
    slot = std::make_unique<onnx::TypeProto>(type);
    types[name] = slot.get();
  };
  for (const auto& t : graph->initializer()) {
    onnx::TypeProto type;
    auto* tensor = type.mutable_tensor_type();
    tensor->set_elem_type(t.data_type());
    auto* shape = tensor->mutable_shape();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    define(t.name(), type);
    if (HasData(t)) {
      data[t.name()] = &t;
      if (std::optional<SmallTensor> v = ReadSmall(t)) small[t.name()] = *v;
    }
  }
  for (const auto& in : graph->input()) {
    if (types.count(in.name()) == 0) define(in.name(), in.type());
  }
  const onnx::OpSchemaRegistry* registry = onnx::OpSchemaRegistry::Instance();
  for (int i = 0; i < graph->node_size(); ++i) {
    onnx::NodeProto& n = *graph->mutable_node(i);
    const onnx::OpSchema* schema =
        DefaultDomain(n) ? registry->GetSchema(n.op_type(), opset, "")
                         : nullptr;
    if (schema == nullptr || !Inferred(n.op_type()) ||
        !schema->has_type_and_shape_inference_function()) {
      continue;
    }
    // Inference and propagation functions dereference input types: a node
    // reading a value of unknown type keeps unknown outputs.
    std::vector<const onnx::TypeProto*> inputs;
    bool typed = true;
    bool shaped = true;
    for (const std::string& in : n.input()) {
      auto it = in.empty() ? types.end() : types.find(in);
      inputs.push_back(it == types.end() ? nullptr : it->second);
      if (in.empty()) continue;
      if (inputs.back() == nullptr) typed = false;
      if (Rank(inputs.back()) < 0) shaped = false;
    }
    if (!typed) continue;
    ASSIGN_OR_RETURN(const bool inferable, Inferable(n, i, inputs));
    if (!inferable) continue;
    try {
      onnx::shape_inference::InferenceContextImpl context(n, types, data, {},
                                                          &shape_data, nullptr);
      schema->GetTypeAndShapeInferenceFunction()(context);
      if (shaped && schema->has_data_propagation_function()) {
        onnx::shape_inference::DataPropagationContextImpl propagation(
            n, types, data, shape_data);
        schema->GetDataPropagationFunction()(propagation);
      }
      for (int k = 0; k < n.output_size(); ++k) {
        const onnx::TypeProto& out = context.allOutputTypes_[k];
        if (n.output(k).empty() || !out.has_tensor_type()) continue;
        define(n.output(k), out);
        onnx::ValueInfoProto* info = graph->add_value_info();
        info->set_name(n.output(k));
        *info->mutable_type() = out;
      }
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("ONNX shape inference failed at ", OnnxNodeLabel(n, i),
                       " with the batch set to one sample: ", e.what()));
    }
    if (n.op_type() == "Constant") {
      for (const auto& a : n.attribute()) {
        if (a.name() == "value" && a.has_t() && HasData(a.t())) {
          data[n.output(0)] = &a.t();
          if (std::optional<SmallTensor> v = ReadSmall(a.t())) {
            small[n.output(0)] = *v;
          }
        }
      }
      continue;
    }
    // Shape arithmetic: evaluate, and give the value to later inference.
    std::vector<const SmallTensor*> values;
    for (const std::string& in : n.input()) {
      auto it = in.empty() ? small.end() : small.find(in);
      values.push_back(it == small.end() ? nullptr : &it->second);
    }
    auto out_type = types.find(n.output(0));
    std::optional<SmallTensor> value =
        Evaluate(n, values, inputs,
                 out_type == types.end() ? nullptr : out_type->second);
    if (value.has_value()) {
      computed.emplace_back();
      WriteSmall(*value, n.output(0), &computed.back());
      data[n.output(0)] = &computed.back();
      small[n.output(0)] = std::move(*value);
    }
  }
  return absl::OkStatus();
}

}  // namespace headroom
