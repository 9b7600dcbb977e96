// Norms: LayerNormalization, BatchNormalization and InstanceNormalization
// nodes, and LayerNorm and RMSNorm written out in element-wise ops (exports
// before opset 17, Llama's RMSNorm).

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/onnx_importer.h"

namespace headroom {
namespace onnx_internal {

int Importer::Single(const std::string& tensor, const char* op) const {
  const std::vector<int>& next = Consumers(tensor);
  if (next.size() != 1 || consumed_[next[0]] || Op(next[0]) != op) return -1;
  return next[0];
}

bool Importer::OthersConstant(int i, const std::string& tensor) const {
  for (const std::string& in : N(i).input()) {
    if (in != tensor && Batched(in)) return false;
  }
  return true;
}

bool Importer::ReducesLastAxis(int r) const {
  const Value* x = Find(N(r).input(0));
  if (x == nullptr || x->dims.empty()) return false;
  const int64_t last = static_cast<int64_t>(x->dims.size()) - 1;
  std::vector<int64_t> axes;
  for (const auto& a : N(r).attribute()) {
    if (a.name() == "axes") axes.assign(a.ints().begin(), a.ints().end());
  }
  if (N(r).input_size() >= 2) {
    const onnx::TensorProto* t = Initializer(N(r).input(1));
    if (t == nullptr) return false;
    axes.assign(t->int64_data().begin(), t->int64_data().end());
  }
  return axes.size() == 1 && (axes[0] == -1 || axes[0] == last);
}

int Importer::NormEnd(const std::string& numerator, int sqrt_node,
                      std::vector<int>* nodes) const {
  const std::string& root = N(sqrt_node).output(0);
  const std::vector<int>& next = Consumers(root);
  if (next.size() != 1 || consumed_[next[0]]) return -1;
  int end = next[0];
  const onnx::NodeProto& e = N(end);
  if (Op(end) == "Div" && e.input(0) == numerator && e.input(1) == root) {
    nodes->push_back(end);
  } else if (Op(end) == "Reciprocal" ||
             (Op(end) == "Div" && e.input(1) == root && !Batched(e.input(0)))) {
    nodes->push_back(end);
    const int m = Single(e.output(0), "Mul");
    if (m < 0) return -1;
    const onnx::NodeProto& mul = N(m);
    if (!((mul.input(0) == numerator && mul.input(1) == e.output(0)) ||
          (mul.input(1) == numerator && mul.input(0) == e.output(0)))) {
      return -1;
    }
    nodes->push_back(m);
    end = m;
  } else {
    return -1;
  }
  const int cast = Single(N(end).output(0), "Cast");
  if (cast >= 0) {
    nodes->push_back(cast);
    end = cast;
  }
  return end;
}

std::pair<std::string, std::string> Importer::NormAffine(
    int end, uint64_t dim, std::vector<int>* nodes) {
  std::string scale, shift;
  const std::string& y = N(end).output(0);
  const int mul = Single(y, "Mul");
  if (mul < 0) return {scale, shift};
  const std::string& w =
      N(mul).input(0) == y ? N(mul).input(1) : N(mul).input(0);
  if (WeightElements(w) != dim || Claimed(w)) return {scale, shift};
  scale = w;
  nodes->push_back(mul);
  const int add = Single(N(mul).output(0), "Add");
  if (add >= 0) {
    const std::string& b =
        N(add).input(0) == N(mul).output(0) ? N(add).input(1) : N(add).input(0);
    if (b != w && WeightElements(b) == dim && !Claimed(b)) {
      shift = b;
      nodes->push_back(add);
    }
  }
  return {scale, shift};
}

int Importer::VarianceRoot(int square, std::vector<int>* nodes) const {
  const int r = Single(N(square).output(0), "ReduceMean");
  if (r < 0 || !ReducesLastAxis(r)) return -1;
  const int a = Single(N(r).output(0), "Add");
  if (a < 0 || !OthersConstant(a, N(r).output(0))) return -1;
  const int q = Single(N(a).output(0), "Sqrt");
  if (q < 0) return -1;
  nodes->insert(nodes->end(), {square, r, a, q});
  return q;
}

std::string Importer::Squared(int i) const {
  const onnx::NodeProto& n = N(i);
  if (n.input_size() != 2 || !Batched(n.input(0))) return "";
  if (Op(i) == "Pow" && !Batched(n.input(1))) return n.input(0);
  if (Op(i) == "Mul" && n.input(0) == n.input(1)) return n.input(0);
  return "";
}

void Importer::EmitNorm(const std::vector<int>& nodes, const std::string& x,
                        v1::Norm::Kind kind, const std::string& scale,
                        const std::string& shift) {
  const int64_t last = LastDim(x);
  if (last <= 0) return;
  const uint64_t dim = static_cast<uint64_t>(last);
  absl::StatusOr<uint64_t> p = Positions(nodes[0], x, dim);
  if (!p.ok()) return;
  v1::Layer layer;
  std::vector<std::string> names;
  for (int n : nodes) names.push_back(NodeName(n));
  layer.set_name(CommonPrefix(names));
  if (layer.name().empty()) layer.set_name(NodeName(nodes[0]));
  layer.set_positions(*p);
  v1::Norm* norm = layer.mutable_norm();
  norm->set_kind(kind);
  norm->set_dim(dim);
  norm->set_no_affine(scale.empty());
  if (kind == v1::Norm::LAYER && !scale.empty() && shift.empty()) {
    norm->set_no_bias(true);
  }
  for (int n : nodes) consumed_[n] = true;
  Claim(scale);
  Claim(shift);
  groups_.push_back(
      {*std::min_element(nodes.begin(), nodes.end()), std::move(layer)});
}

void Importer::MatchLayerNormOps(int mean) {
  const std::string& x = N(mean).input(0);
  if (!Batched(x) || !ReducesLastAxis(mean)) return;
  const std::string& mu = N(mean).output(0);
  const int sub = Single(mu, "Sub");
  if (sub < 0 || N(sub).input(0) != x || N(sub).input(1) != mu) return;
  const std::string& centered = N(sub).output(0);
  std::vector<int> nodes = {mean, sub};
  int square = -1;
  for (int c : Consumers(centered)) {
    if (!consumed_[c] && Squared(c) == centered) square = c;
  }
  if (square < 0 || Consumers(centered).size() != 2) return;
  const int root = VarianceRoot(square, &nodes);
  if (root < 0) return;
  const int end = NormEnd(centered, root, &nodes);
  if (end < 0) return;
  const auto [scale, shift] = NormAffine(
      end, static_cast<uint64_t>(std::max<int64_t>(0, LastDim(x))), &nodes);
  EmitNorm(nodes, x, v1::Norm::LAYER, scale, shift);
}

void Importer::MatchRmsNormOps(int square) {
  const std::string x = Squared(square);
  if (x.empty()) return;
  std::vector<int> nodes;
  const int root = VarianceRoot(square, &nodes);
  if (root < 0) return;
  const int end = NormEnd(x, root, &nodes);
  if (end < 0) return;
  const auto [scale, shift] = NormAffine(
      end, static_cast<uint64_t>(std::max<int64_t>(0, LastDim(x))), &nodes);
  // An RMSNorm has no shift: an Add after it is the rest of the graph's.
  if (!shift.empty()) nodes.pop_back();
  EmitNorm(nodes, x, v1::Norm::RMS, scale, "");
}

bool Importer::IsNormNode(int i) const {
  const std::string& op = Op(i);
  return op == "LayerNormalization" || op == "BatchNormalization" ||
         op == "InstanceNormalization";
}

absl::Status Importer::MapNorm(int i) {
  const onnx::NodeProto& n = N(i);
  const std::string& op = Op(i);
  v1::Layer layer;
  layer.set_name(NodeName(i));
  const bool affine = n.input_size() >= 2 && IsWeight(n.input(1));
  const bool bias = n.input_size() >= 3 && IsWeight(n.input(2));
  if ((affine && Claimed(n.input(1))) || (bias && Claimed(n.input(2)))) {
    return EmitShared(i);
  }
  uint64_t dim = 0;
  if (affine) {
    dim = WeightElements(n.input(1));
  } else if (op == "LayerNormalization") {
    dim = static_cast<uint64_t>(std::max<int64_t>(1, LastDim(n.input(0))));
  } else {
    const Value* x = Find(n.input(0));
    dim = x != nullptr && x->dims.size() >= 2 && x->dims[1] > 0
              ? static_cast<uint64_t>(x->dims[1])
              : 1;
  }
  ASSIGN_OR_RETURN(const uint64_t p, Positions(i, n.output(0), dim));
  layer.set_positions(p);
  v1::Norm* norm = layer.mutable_norm();
  norm->set_kind(op == "LayerNormalization"   ? v1::Norm::LAYER
                 : op == "BatchNormalization" ? v1::Norm::BATCH
                                              : v1::Norm::GROUP);
  norm->set_dim(dim);
  norm->set_no_affine(!affine);
  // The spec's norms have a bias with their weight except LayerNorm's
  // no_bias; a lone scale or bias stays a Parameters layer.
  bool keep_scale = affine;
  if (affine && !bias) {
    if (op == "LayerNormalization") {
      norm->set_no_bias(true);
    } else {
      notes_.push_back(absl::StrCat(NodeLabel(i),
                                    " has a scale but no bias; the spec "
                                    "counts its scale as parameters"));
      norm->set_no_affine(true);
      keep_scale = false;
    }
  }
  std::vector<std::string> weights;
  if (keep_scale) weights.push_back(n.input(1));
  if (affine && bias) weights.push_back(n.input(2));
  return EmitWeighted(i, std::move(layer), weights);
}

}  // namespace onnx_internal
}  // namespace headroom
