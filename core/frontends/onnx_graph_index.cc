// The importer's indexes of a graph: values with their per-sample sizes,
// producers and consumers, initializers (and their Identity aliases), the
// weights and their total.

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/onnx_importer.h"
#include "core/frontends/onnx_shapes.h"

namespace headroom {
namespace onnx_internal {
namespace {

void ReadValueInfo(const onnx::ValueInfoProto& info, Value* value) {
  if (!info.type().has_tensor_type()) return;
  const auto& tensor = info.type().tensor_type();
  value->elem_type = tensor.elem_type();
  if (!tensor.has_shape()) return;
  value->dims.clear();
  value->known = true;
  for (const auto& dim : tensor.shape().dim()) {
    if (dim.has_dim_value() && dim.dim_value() >= 0) {
      value->dims.push_back(dim.dim_value());
    } else {
      value->dims.push_back(-1);
      value->known = false;
    }
  }
}

}  // namespace

std::string Importer::NodeName(int i) const {
  const onnx::NodeProto& n = N(i);
  if (n.name().empty()) {
    return n.output_size() > 0 ? n.output(0) : absl::StrCat(Op(i), i);
  }
  // "/h.0/attn/c_attn/MatMul" -> "/h.0/attn/c_attn".
  const std::string suffix = "/" + Op(i);
  if (n.name().size() > suffix.size() &&
      n.name().compare(n.name().size() - suffix.size(), suffix.size(),
                       suffix) == 0) {
    return n.name().substr(0, n.name().size() - suffix.size());
  }
  return n.name();
}

std::string Importer::NodeLabel(int i) const { return OnnxNodeLabel(N(i), i); }

int64_t Importer::IntAttr(int i, const std::string& name,
                          int64_t fallback) const {
  for (const auto& a : N(i).attribute()) {
    if (a.name() == name) return a.i();
  }
  return fallback;
}

absl::Status Importer::Index() {
  const int opset = OnnxDefaultOpset(model_);
  standard_.resize(NodeCount());
  for (int i = 0; i < NodeCount(); ++i) {
    standard_[i] = IsStandardOnnxOp(N(i), opset);
  }
  IndexValues();
  IndexNodes(opset);
  RETURN_IF_ERROR(PerSampleSizes());
  // Exporters write a parameter equal in value to another (a freshly
  // initialized LayerNorm's ones and zeros) as an Identity of it: each
  // such copy is a parameter of its own.
  for (int i = 0; i < NodeCount(); ++i) {
    const onnx::NodeProto& n = N(i);
    if (Op(i) != "Identity" || n.input_size() != 1) continue;
    const onnx::TensorProto* source = Initializer(n.input(0));
    if (source != nullptr && IsFloatType(source->data_type()) &&
        initializers_.count(n.output(0)) == 0) {
      initializers_[n.output(0)] = source;
      aliases_.push_back(n.output(0));
    }
  }
  consumed_.assign(NodeCount(), false);
  linear_cache_.assign(NodeCount(), std::nullopt);
  linear_done_.assign(NodeCount(), false);
  return absl::OkStatus();
}

void Importer::IndexValues() {
  const onnx::GraphProto& g = graph();
  for (const auto& t : g.initializer()) {
    initializers_[t.name()] = &t;
    Value& v = values_[t.name()];
    v.known = true;
    v.elem_type = t.data_type();
    v.dims.assign(t.dims().begin(), t.dims().end());
  }
  for (const auto& info : g.input()) {
    if (initializers_.count(info.name()) != 0) continue;
    Value& v = values_[info.name()];
    ReadValueInfo(info, &v);
    v.batched = true;
  }
  for (const auto& info : g.output()) {
    ReadValueInfo(info, &values_[info.name()]);
    graph_outputs_.insert(info.name());
  }
  // Inferred shapes win over declared ones.
  for (const auto& info : g.value_info()) {
    ReadValueInfo(info, &values_[info.name()]);
  }
}

void Importer::IndexNodes(int opset) {
  for (int i = 0; i < NodeCount(); ++i) {
    const onnx::NodeProto& n = N(i);
    bool batched = false;
    // Shape and Size read metadata only: they are not a value's consumers
    // (exports with dynamic axes read the shape of nearly every value).
    const bool metadata = Op(i) == "Shape" || Op(i) == "Size";
    for (const std::string& in : n.input()) {
      if (in.empty()) continue;
      if (!metadata) consumers_[in].push_back(i);
      if (Batched(in)) batched = true;
    }
    if (metadata) batched = false;
    if (!standard_[i]) {
      foreign_ops_.insert(
          n.domain().empty() || n.domain() == "ai.onnx"
              ? absl::StrCat(n.op_type(), " (not in opset ", opset, ")")
              : absl::StrCat(n.domain(), ".", n.op_type()));
    }
    for (const std::string& out : n.output()) {
      if (out.empty()) continue;
      producer_[out] = i;
      values_[out].batched = batched;
    }
  }
}

absl::Status Importer::PerSampleSizes() {
  for (auto& [name, v] : values_) {
    if (!v.batched || !v.known) continue;
    uint64_t elements = 1;
    for (int64_t d : v.dims) {
      if (d == 0) {
        elements = 0;
        break;
      }
      if (elements > kMaxElements / static_cast<uint64_t>(d)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor '", name, "' holds more than ", kMaxElements,
            " elements per sample; a graph input or a Reshape has an "
            "absurd size"));
      }
      elements *= static_cast<uint64_t>(d);
    }
    if (elements != 0 && elements % batch_divisor_ == 0) {
      v.per_sample = elements / batch_divisor_;
    }
  }
  return absl::OkStatus();
}

absl::Status Importer::CheckWeights() {
  for (int i = 0; i < NodeCount(); ++i) {
    if (Op(i) == "BatchNormalization") {
      for (int k = 3; k < N(i).input_size() && k < 5; ++k) {
        buffers_.insert(N(i).input(k));
      }
    }
  }
  // Dims were checked with the structure (CheckOnnxStructure).
  double total = 0;
  std::vector<std::string> names;
  for (const auto& t : graph().initializer()) names.push_back(t.name());
  names.insert(names.end(), aliases_.begin(), aliases_.end());
  for (const std::string& name : names) {
    if (IsWeight(name)) {
      total += static_cast<double>(WeightElements(name));
      weight_order_.push_back(name);
    }
  }
  if (total > kMaxOnnxParams) {
    return absl::InvalidArgumentError(
        absl::StrCat("graph initializers hold ", total,
                     " parameters; allowed up to ", kMaxOnnxParams));
  }
  total_params_ = total;
  return absl::OkStatus();
}

}  // namespace onnx_internal
}  // namespace headroom
