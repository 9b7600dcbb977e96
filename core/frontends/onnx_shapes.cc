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
#include "core/frontends/onnx_small_tensors.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

namespace headroom {
namespace {

using onnx_internal::EvaluateSmallTensor;
using onnx_internal::ReadSmallTensor;
using onnx_internal::SmallTensor;
using onnx_internal::WriteSmallTensor;

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

absl::Status NodeError(const onnx::NodeProto& n, int index,
                       const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat(OnnxNodeLabel(n, index), ": ", what));
}

// Values in the node's integer-list attribute `name`; -1 when it has none.
int ListSize(const onnx::NodeProto& n, const char* name) {
  for (const auto& a : n.attribute()) {
    if (a.name() == name) return a.ints_size();
  }
  return -1;
}

// Axis attributes (axis, axes, perm) name axes of the first input, of
// `rank` (-1: unknown, nothing checked).
absl::Status CheckAxisAttributes(const onnx::NodeProto& n, int index,
                                 int rank) {
  const std::string& op = n.op_type();
  for (const auto& a : n.attribute()) {
    if (rank < 0) break;
    const int extra = op == "Unsqueeze" || op == "Flatten" ? 1 : 0;
    if (a.name() == "axis" &&
        (a.i() < -(rank + extra) || a.i() >= rank + extra)) {
      return NodeError(
          n, index,
          absl::StrCat("axis = ", a.i(), " is out of range for a rank-", rank,
                       " input"));
    }
    if (a.name() == "axes" && op != "Unsqueeze") {
      for (int64_t axis : a.ints()) {
        if (axis < -rank || axis >= rank) {
          return NodeError(
              n, index,
              absl::StrCat("axes has ", axis, ", out of range for a rank-",
                           rank, " input"));
        }
      }
    }
    if (a.name() == "perm") {
      std::vector<int64_t> perm(a.ints().begin(), a.ints().end());
      std::sort(perm.begin(), perm.end());
      for (int k = 0; k < static_cast<int>(perm.size()); ++k) {
        if (perm.size() != static_cast<size_t>(rank) || perm[k] != k) {
          return NodeError(n, index,
                           absl::StrCat("perm is not a permutation of the ",
                                        rank, " axes of its input"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// Shape-like inputs (a target shape, axes, repeats, slice bounds) are
// short vectors: inference makes one output axis per value.
absl::Status CheckShapeInputs(
    const onnx::NodeProto& n, int index,
    const std::vector<const onnx::TypeProto*>& inputs) {
  const std::string& op = n.op_type();
  const bool shape_like =
      op == "Reshape" || op == "Expand" || op == "ConstantOfShape" ||
      op == "Tile" || op == "Slice" || op == "Squeeze" || op == "Unsqueeze" ||
      op == "Split" || op.rfind("Reduce", 0) == 0;
  if (!shape_like) return absl::OkStatus();
  const size_t first = op == "ConstantOfShape" ? 0 : 1;
  for (size_t k = first; k < inputs.size(); ++k) {
    const onnx::TypeProto* t = inputs[k];
    if (t == nullptr || Rank(t) < 0) continue;
    const auto& shape = t->tensor_type().shape();
    if (shape.dim_size() > 1 ||
        (shape.dim_size() == 1 && shape.dim(0).has_dim_value() &&
         shape.dim(0).dim_value() > kMaxRank)) {
      return NodeError(n, index,
                       absl::StrCat("input ", k, " is not a shape of at most ",
                                    kMaxRank, " axes"));
    }
  }
  return absl::OkStatus();
}

bool IsWindowedOp(const std::string& op) {
  return op == "Conv" || op == "ConvTranspose" || op == "MaxPool" ||
         op == "AveragePool" || op == "LpPool";
}

// Convolutions and pooling: a batch, a channel and spatial axes; a weight
// of the input's rank; one kernel, stride, dilation and output value per
// spatial axis, two pads. False while a rank is unknown.
absl::StatusOr<bool> WindowedInferable(
    const onnx::NodeProto& n, int index,
    const std::vector<const onnx::TypeProto*>& inputs, int rank) {
  const std::string& op = n.op_type();
  if (rank < 0) return false;
  const int spatial = rank - 2;
  if (spatial < 1) {
    return NodeError(n, index,
                     "the input needs a batch, a channel and a spatial axis");
  }
  if (op == "Conv" || op == "ConvTranspose") {
    const int w = inputs.size() > 1 ? Rank(inputs[1]) : -1;
    if (w < 0) return false;
    if (w != rank) {
      return NodeError(n, index,
                       absl::StrCat("the weight has rank ", w,
                                    "; the input has rank ", rank));
    }
  }
  for (const char* name : {"kernel_shape", "strides", "dilations",
                           "output_shape", "output_padding"}) {
    const int size = ListSize(n, name);
    if (size >= 0 && size != spatial) {
      return NodeError(n, index,
                       absl::StrCat(name, " has ", size, " values for ",
                                    spatial, " spatial axes"));
    }
  }
  const int pads = ListSize(n, "pads");
  if (pads >= 0 && pads != 2 * spatial) {
    return NodeError(n, index,
                     absl::StrCat("pads has ", pads, " values for ", spatial,
                                  " spatial axes"));
  }
  return true;
}

// The fixed ranks of recurrent cells (3), Gemm (2) and batch and instance
// norms (2 or more).
absl::Status CheckFixedRanks(const onnx::NodeProto& n, int index,
                             const std::vector<const onnx::TypeProto*>& inputs,
                             int rank) {
  const std::string& op = n.op_type();
  if (op == "LSTM" || op == "GRU" || op == "RNN") {
    for (size_t k = 0; k < inputs.size() && k < 3; ++k) {
      if (Rank(inputs[k]) >= 0 && Rank(inputs[k]) != 3) {
        return NodeError(n, index,
                         absl::StrCat("input ", k, " has rank ",
                                      Rank(inputs[k]), "; expected 3"));
      }
    }
  }
  if (op == "Gemm") {
    for (size_t k = 0; k < 2 && k < inputs.size(); ++k) {
      if (Rank(inputs[k]) >= 0 && Rank(inputs[k]) != 2) {
        return NodeError(n, index,
                         absl::StrCat("input ", k, " has rank ",
                                      Rank(inputs[k]), "; expected 2"));
      }
    }
  }
  if ((op == "BatchNormalization" || op == "InstanceNormalization") &&
      rank >= 0 && rank < 2) {
    return NodeError(n, index, "the input needs a batch and a channel axis");
  }
  return absl::OkStatus();
}

// Whether ONNX's inference function for the node may run on these input
// types: true, false (its outputs stay unknown), or INVALID_ARGUMENT for a
// node that cannot be right whatever the shapes.
absl::StatusOr<bool> Inferable(
    const onnx::NodeProto& n, int index,
    const std::vector<const onnx::TypeProto*>& inputs) {
  for (const onnx::TypeProto* t : inputs) {
    if (t != nullptr && !t->has_tensor_type()) return false;
  }
  const int rank = inputs.empty() ? -1 : Rank(inputs[0]);
  RETURN_IF_ERROR(CheckAxisAttributes(n, index, rank));
  RETURN_IF_ERROR(CheckShapeInputs(n, index, inputs));
  if (rank > kMaxRank) {
    return NodeError(n, index,
                     absl::StrCat("the input has ", rank,
                                  " axes; allowed up to ", kMaxRank));
  }
  if (IsWindowedOp(n.op_type())) {
    ASSIGN_OR_RETURN(const bool windowed,
                     WindowedInferable(n, index, inputs, rank));
    if (!windowed) return false;
  }
  RETURN_IF_ERROR(CheckFixedRanks(n, index, inputs, rank));
  return true;
}

// An initializer's axes (at most kMaxRank), dims (0..kMaxDim) and elements
// (at most kMaxElements).
absl::Status CheckInitializer(const onnx::TensorProto& t) {
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
  return absl::OkStatus();
}

// What shape inference knows while it walks the graph: the type of every
// value known so far, owned here; the values whose data inference may read
// (initializers and constants with their data, and shapes computed by data
// propagation); the values of small tensors (shapes and their arithmetic)
// computed here. Not copyable: the maps hold pointers into it.
struct InferenceState {
  InferenceState() = default;
  InferenceState(const InferenceState&) = delete;
  InferenceState& operator=(const InferenceState&) = delete;

  void Define(const std::string& name, const onnx::TypeProto& type) {
    std::unique_ptr<onnx::TypeProto>& slot = owned[name];
    slot = std::make_unique<onnx::TypeProto>(type);
    types[name] = slot.get();
  }

  std::unordered_map<std::string, std::unique_ptr<onnx::TypeProto>> owned;
  std::unordered_map<std::string, onnx::TypeProto*> types;
  std::unordered_map<std::string, const onnx::TensorProto*> data;
  std::unordered_map<std::string, onnx::TensorShapeProto> shape_data;
  std::unordered_map<std::string, SmallTensor> small;
  std::deque<onnx::TensorProto> computed;
};

// The initializers' types (and data), then the graph inputs' types.
void DefineGraphInputs(const onnx::GraphProto& graph, InferenceState* state) {
  for (const auto& t : graph.initializer()) {
    onnx::TypeProto type;
    auto* tensor = type.mutable_tensor_type();
    tensor->set_elem_type(t.data_type());
    auto* shape = tensor->mutable_shape();
    for (int64_t d : t.dims()) shape->add_dim()->set_dim_value(d);
    state->Define(t.name(), type);
    if (HasData(t)) {
      state->data[t.name()] = &t;
      if (std::optional<SmallTensor> v = ReadSmallTensor(t)) {
        state->small[t.name()] = *v;
      }
    }
  }
  for (const auto& in : graph.input()) {
    if (state->types.count(in.name()) == 0) state->Define(in.name(), in.type());
  }
}

// Runs the node's inference function (and, when every input has a shape,
// its data propagation) and defines its outputs' types, adding them to the
// graph's value_info. INVALID_ARGUMENT when inference finds the graph
// inconsistent.
absl::Status RunInference(onnx::NodeProto& n, int index,
                          const onnx::OpSchema& schema, bool shaped,
                          onnx::GraphProto* graph, InferenceState* state) {
  try {
    onnx::shape_inference::InferenceContextImpl context(
        n, state->types, state->data, {}, &state->shape_data, nullptr);
    schema.GetTypeAndShapeInferenceFunction()(context);
    if (shaped && schema.has_data_propagation_function()) {
      onnx::shape_inference::DataPropagationContextImpl propagation(
          n, state->types, state->data, state->shape_data);
      schema.GetDataPropagationFunction()(propagation);
    }
    for (int k = 0; k < n.output_size(); ++k) {
      const onnx::TypeProto& out = context.allOutputTypes_[k];
      if (n.output(k).empty() || !out.has_tensor_type()) continue;
      state->Define(n.output(k), out);
      onnx::ValueInfoProto* info = graph->add_value_info();
      info->set_name(n.output(k));
      *info->mutable_type() = out;
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX shape inference failed at ", OnnxNodeLabel(n, index),
                     " with the batch set to one sample: ", e.what()));
  }
  return absl::OkStatus();
}

// A Constant's data, or the evaluated value of shape arithmetic, for later
// inference to read.
void RecordValues(const onnx::NodeProto& n,
                  const std::vector<const onnx::TypeProto*>& inputs,
                  InferenceState* state) {
  if (n.op_type() == "Constant") {
    for (const auto& a : n.attribute()) {
      if (a.name() == "value" && a.has_t() && HasData(a.t())) {
        state->data[n.output(0)] = &a.t();
        if (std::optional<SmallTensor> v = ReadSmallTensor(a.t())) {
          state->small[n.output(0)] = *v;
        }
      }
    }
    return;
  }
  std::vector<const SmallTensor*> values;
  for (const std::string& in : n.input()) {
    auto it = in.empty() ? state->small.end() : state->small.find(in);
    values.push_back(it == state->small.end() ? nullptr : &it->second);
  }
  auto out_type = state->types.find(n.output(0));
  std::optional<SmallTensor> value = EvaluateSmallTensor(
      n, values, inputs,
      out_type == state->types.end() ? nullptr : out_type->second);
  if (value.has_value()) {
    state->computed.emplace_back();
    WriteSmallTensor(*value, n.output(0), &state->computed.back());
    state->data[n.output(0)] = &state->computed.back();
    state->small[n.output(0)] = std::move(*value);
  }
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
    RETURN_IF_ERROR(CheckInitializer(t));
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
  InferenceState state;
  DefineGraphInputs(*graph, &state);
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
      auto it = in.empty() ? state.types.end() : state.types.find(in);
      inputs.push_back(it == state.types.end() ? nullptr : it->second);
      if (in.empty()) continue;
      if (inputs.back() == nullptr) typed = false;
      if (Rank(inputs.back()) < 0) shaped = false;
    }
    if (!typed) continue;
    ASSIGN_OR_RETURN(const bool inferable, Inferable(n, i, inputs));
    if (!inferable) continue;
    RETURN_IF_ERROR(RunInference(n, i, *schema, shaped, graph, &state));
    RecordValues(n, inputs, &state);
  }
  return absl::OkStatus();
}

}  // namespace headroom
