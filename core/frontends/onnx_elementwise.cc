// Single nodes no pattern consumed: the dispatch by kind, element-wise
// layers of a node's output size, and Parameters layers for the weights no
// layer claimed.

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/frontends/onnx_importer.h"
#include "core/memory/model_spec.h"

namespace headroom {
namespace onnx_internal {
namespace {

// Unary activations whose output (or input) autograd keeps.
constexpr const char* kActivationOps[] = {
    "Relu", "LeakyRelu", "PRelu",      "Elu",         "Selu",
    "Celu", "Gelu",      "Sigmoid",    "HardSigmoid", "HardSwish",
    "Tanh", "Softplus",  "Softsign",   "Erf",         "Exp",
    "Log",  "Sqrt",      "Reciprocal", "Pow",         "Sin",
    "Cos",  "Abs",       "Mish",       "Clip",        "ThresholdedRelu"};

// Normalizations without parameters: saved like activations.
constexpr const char* kPlainNormOps[] = {"LpNormalization",
                                         "MeanVarianceNormalization"};

// Pooling and reductions: their output is saved.
constexpr const char* kPoolOps[] = {
    "MaxPool",    "AveragePool",     "GlobalAveragePool", "GlobalMaxPool",
    "LpPool",     "GlobalLpPool",    "ReduceMean",        "ReduceMax",
    "ReduceMin",  "ReduceSum",       "ReduceL1",          "ReduceL2",
    "ReduceProd", "ReduceLogSumExp", "ReduceSumSquare"};

}  // namespace

absl::Status Importer::MapNode(int i) {
  if (embeddings_.count(i) != 0) return MapEmbedding(i);
  if (const std::optional<LinearNode> l = LinearAt(i)) return MapLinear(i, *l);
  if (IsConvNode(i)) return MapConv(i);
  if (IsNormNode(i)) return MapNorm(i);
  if (IsRecurrentNode(i)) return MapRecurrent(i);
  return MapElementwise(i);
}

absl::Status Importer::Emit(int i, v1::Layer layer) {
  groups_.push_back({i, std::move(layer)});
  return absl::OkStatus();
}

absl::Status Importer::EmitWeighted(int i, v1::Layer layer,
                                    const std::vector<std::string>& weights) {
  const std::set<std::string> distinct(weights.begin(), weights.end());
  uint64_t held = 0;
  for (const std::string& w : distinct) held += WeightElements(w);
  if (CountLayerParams(layer) != held) return EmitShared(i);
  for (const std::string& w : weights) Claim(w);
  return Emit(i, std::move(layer));
}

absl::Status Importer::EmitShared(int i) {
  notes_.push_back(absl::StrCat(
      NodeLabel(i),
      " reads weights another layer counts, or of a layout the spec does "
      "not describe: its output is counted, its weights are parameters"));
  return EmitValue(i, v1::Elementwise::ADD);
}

absl::Status Importer::EmitValue(int i, v1::Elementwise::Op op) {
  const std::string& out = N(i).output(0);
  if (!Batched(out)) return absl::OkStatus();
  const uint64_t per_sample = PerSample(out);
  if (per_sample == 0) {
    unknown_shape_ops_.insert(Op(i));
    return absl::OkStatus();
  }
  const int64_t last = LastDim(out);
  const uint64_t dim = last > 0 && per_sample % static_cast<uint64_t>(last) == 0
                           ? static_cast<uint64_t>(last)
                           : per_sample;
  v1::Layer layer;
  layer.set_name(NodeName(i));
  layer.set_positions(per_sample / dim);
  layer.mutable_elementwise()->set_op(op);
  layer.mutable_elementwise()->set_dim(dim);
  return Emit(i, std::move(layer));
}

absl::Status Importer::MapElementwise(int i) {
  const onnx::NodeProto& n = N(i);
  const std::string& op = Op(i);
  if (n.output_size() < 1 || n.output(0).empty()) return absl::OkStatus();
  int batched_inputs = 0;
  for (const std::string& in : n.input()) {
    if (!in.empty() && Batched(in)) ++batched_inputs;
  }
  if ((OneOf(op, kActivationOps) || OneOf(op, kPlainNormOps)) &&
      batched_inputs >= 1) {
    return EmitValue(i, v1::Elementwise::ACTIVATION);
  }
  if ((op == "Mul" || op == "Div") && batched_inputs == 2) {
    return EmitValue(i, v1::Elementwise::ACTIVATION);
  }
  if ((op == "Add" || op == "Sub" || op == "Sum") && batched_inputs >= 2) {
    return EmitValue(i, v1::Elementwise::ADD);
  }
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
    return EmitValue(i, v1::Elementwise::SOFTMAX);
  }
  if (op == "Dropout") return EmitValue(i, v1::Elementwise::DROPOUT);
  if (OneOf(op, kPoolOps)) return EmitValue(i, v1::Elementwise::POOL);
  if (op == "MatMul" && batched_inputs == 2) ++activation_matmuls_;
  return absl::OkStatus();
}

void Importer::AddUnclaimedWeights() {
  for (const std::string& w : weight_order_) {
    if (Claimed(w)) continue;
    const std::vector<int>& users = Consumers(w);
    int anchor = users.empty() ? 0 : users[0];
    v1::Layer layer;
    layer.set_name(w);
    layer.mutable_parameters()->set_count(WeightElements(w));
    groups_.push_back({anchor, std::move(layer)});
    Claim(w);
  }
}

}  // namespace onnx_internal
}  // namespace headroom
