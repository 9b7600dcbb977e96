// Weighted single nodes: linears (MatMul/Gemm with a weight, and the bias
// Add after one), embeddings, convolutions and recurrent cells; and what
// the pattern matchers share about linears (claims, positions, residuals).

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/onnx_importer.h"
#include "core/memory/model_spec.h"

namespace headroom {
namespace onnx_internal {

std::optional<std::pair<std::string, bool>> Importer::WeightOf(
    const std::string& name, bool transposed, int depth) const {
  if (IsWeight(name)) return std::make_pair(name, transposed);
  const int p = Producer(name);
  if (p < 0 || depth > 4 || Batched(name)) return std::nullopt;
  if (Op(p) == "Transpose")
    return WeightOf(N(p).input(0), !transposed, depth + 1);
  if (Op(p) == "Identity" || Op(p) == "Cast") {
    return WeightOf(N(p).input(0), transposed, depth + 1);
  }
  return std::nullopt;
}

const std::optional<LinearNode>& Importer::Linear(int i) {
  if (!linear_done_[i]) {
    linear_done_[i] = true;
    linear_cache_[i] = MakeLinear(i);
  }
  return linear_cache_[i];
}

std::optional<LinearNode> Importer::MakeLinear(int i) const {
  const onnx::NodeProto& n = N(i);
  bool transposed = false;
  if (Op(i) == "MatMul") {
    if (n.input_size() != 2) return std::nullopt;
  } else if (Op(i) == "Gemm") {
    if (n.input_size() < 2 || IntAttr(i, "transA", 0) != 0) {
      return std::nullopt;
    }
    transposed = IntAttr(i, "transB", 0) != 0;
  } else {
    return std::nullopt;
  }
  if (!Batched(n.input(0)) || n.output_size() < 1) return std::nullopt;
  const auto weight = WeightOf(n.input(1), transposed);
  if (!weight.has_value()) return std::nullopt;
  const onnx::TensorProto& w = *Initializer(weight->first);
  if (w.dims_size() != 2) return std::nullopt;
  LinearNode linear;
  linear.node = i;
  linear.weight = weight->first;
  linear.input = n.input(0);
  linear.in = static_cast<uint64_t>(w.dims(weight->second ? 1 : 0));
  linear.out = static_cast<uint64_t>(w.dims(weight->second ? 0 : 1));
  const int64_t last = LastDim(linear.input);
  if (last >= 0 && static_cast<uint64_t>(last) != linear.in) {
    return std::nullopt;
  }
  linear.output = n.output(0);
  if (Op(i) == "Gemm" && n.input_size() >= 3 && n.input(2) != linear.weight &&
      WeightElements(n.input(2)) == linear.out) {
    linear.bias = n.input(2);
  } else if (Op(i) == "MatMul") {
    const std::vector<int>& next = Consumers(linear.output);
    if (next.size() == 1 && Op(next[0]) == "Add" &&
        N(next[0]).input_size() == 2) {
      const onnx::NodeProto& add = N(next[0]);
      const std::string& other =
          add.input(0) == linear.output ? add.input(1) : add.input(0);
      if (other != linear.weight && WeightElements(other) == linear.out) {
        linear.bias = other;
        linear.bias_node = next[0];
        linear.output = add.output(0);
      }
    }
  }
  return linear;
}

std::optional<LinearNode> Importer::LinearAt(int i) {
  if (Linear(i).has_value()) return Linear(i);
  if (Op(i) == "Add") {
    for (const std::string& in : N(i).input()) {
      const int p = Producer(in);
      if (p >= 0 && Linear(p).has_value() && Linear(p)->bias_node == i) {
        return Linear(p);
      }
    }
  }
  return std::nullopt;
}

void Importer::ConsumeLinear(const LinearNode& l) {
  consumed_[l.node] = true;
  if (l.bias_node >= 0) consumed_[l.bias_node] = true;
}

bool Importer::AnyClaimed(const std::vector<const LinearNode*>& parts) const {
  for (const LinearNode* l : parts) {
    if (Claimed(l->weight) || (!l->bias.empty() && Claimed(l->bias))) {
      return true;
    }
  }
  return false;
}

uint64_t Importer::HeldParams(
    const std::vector<const LinearNode*>& parts) const {
  std::set<std::string> names;
  for (const LinearNode* l : parts) {
    names.insert(l->weight);
    if (!l->bias.empty()) names.insert(l->bias);
  }
  uint64_t n = 0;
  for (const std::string& name : names) n += WeightElements(name);
  return n;
}

absl::StatusOr<uint64_t> Importer::Positions(int node,
                                             const std::string& tensor,
                                             uint64_t width) const {
  const uint64_t per_sample = PerSample(tensor);
  if (per_sample == 0 || width == 0 || per_sample % width != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        NodeLabel(node), ": the per-sample size of '", tensor,
        "' is unknown after shape inference (or not a multiple of ", width,
        "); the planner needs the size of every weighted layer's "
        "activations"));
  }
  return per_sample / width;
}

bool Importer::IsLogits(const std::string& tensor, int depth) const {
  if (graph_outputs_.count(tensor) != 0) return true;
  if (depth > 8) return false;
  for (int c : Consumers(tensor)) {
    const std::string& op = Op(c);
    if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss" ||
        op == "LogSoftmax") {
      return true;
    }
    if ((op == "Reshape" || op == "Identity" || op == "Flatten" ||
         op == "Squeeze" || op == "Transpose" || op == "Cast") &&
        N(c).input(0) == tensor && IsLogits(N(c).output(0), depth + 1)) {
      return true;
    }
  }
  return false;
}

void Importer::AbsorbResidual(const std::string& output) {
  std::string cur = output;
  std::vector<int> chain;
  for (int step = 0; step < 4; ++step) {
    const std::vector<int>& next = Consumers(cur);
    if (next.size() != 1 || consumed_[next[0]]) return;
    const int c = next[0];
    // Dropout, casts, and the transpose back to batch-first (PyTorch's
    // MultiheadAttention) come before the add.
    if (Op(c) == "Dropout" || Op(c) == "Identity" || Op(c) == "Cast" ||
        Op(c) == "Transpose" || Op(c) == "Reshape") {
      chain.push_back(c);
      cur = N(c).output(0);
      continue;
    }
    if (Op(c) == "Add" && N(c).input_size() == 2 && Batched(N(c).input(0)) &&
        Batched(N(c).input(1))) {
      chain.push_back(c);
      for (int k : chain) consumed_[k] = true;
    }
    return;
  }
}

void Importer::MatchEmbeddings() {
  for (int i = 0; i < NodeCount(); ++i) {
    if (Op(i) != "Gather" || N(i).input_size() != 2) continue;
    const std::string& table = N(i).input(0);
    if (!IsWeight(table) || Initializer(table)->dims_size() != 2 ||
        IntAttr(i, "axis", 0) != 0 || !Batched(N(i).input(1)) ||
        Claimed(table)) {
      continue;
    }
    Claim(table);
    embeddings_.insert(i);
  }
}

absl::Status Importer::MapEmbedding(int i) {
  const onnx::NodeProto& n = N(i);
  v1::Layer layer;
  layer.set_name(NodeName(i));
  const onnx::TensorProto& table = *Initializer(n.input(0));
  const uint64_t dim = static_cast<uint64_t>(table.dims(1));
  ASSIGN_OR_RETURN(const uint64_t p, Positions(i, n.output(0), dim));
  layer.set_positions(p);
  layer.mutable_embedding()->set_num_embeddings(
      static_cast<uint64_t>(table.dims(0)));
  layer.mutable_embedding()->set_dim(dim);
  return Emit(i, std::move(layer));
}

absl::Status Importer::MapLinear(int i, const LinearNode& l) {
  v1::Layer layer;
  layer.set_name(NodeName(i));
  ConsumeLinear(l);
  absl::StatusOr<uint64_t> p = Positions(i, l.output, l.out);
  if (!p.ok()) p = Positions(i, l.input, l.in);
  if (!p.ok()) return p.status();
  layer.set_positions(*p);
  v1::Linear* linear = layer.mutable_linear();
  linear->set_in_features(l.in);
  linear->set_out_features(l.out);
  linear->set_bias(!l.bias.empty() && !Claimed(l.bias));
  linear->set_tied(Claimed(l.weight));
  linear->set_logits(IsLogits(l.output));
  if (!l.bias.empty() && Claimed(l.bias)) {
    notes_.push_back(absl::StrCat(NodeLabel(i),
                                  " adds a bias another "
                                  "layer already counts"));
  }
  if (linear->logits() && !linear->tied()) NoteFoldedTie(i, l);
  Claim(l.weight);
  Claim(l.bias);
  return Emit(i, std::move(layer));
}

void Importer::NoteFoldedTie(int i, const LinearNode& l) {
  for (int e : embeddings_) {
    const onnx::TensorProto& table = *Initializer(N(e).input(0));
    if (static_cast<uint64_t>(table.dims(0)) == l.out &&
        static_cast<uint64_t>(table.dims(1)) == l.in) {
      notes_.push_back(absl::StrCat(
          NodeLabel(i), " has its own ", l.out, "x", l.in,
          " weight, the shape of the embedding table: if the model ties "
          "them, the exporter folded the tie away (export with "
          "do_constant_folding=False) and the table counts twice"));
      break;
    }
  }
}

bool Importer::IsConvNode(int i) const {
  const onnx::NodeProto& n = N(i);
  const std::string& op = Op(i);
  return (op == "Conv" || op == "ConvTranspose") && n.input_size() >= 2 &&
         IsWeight(n.input(1)) && Initializer(n.input(1))->dims_size() >= 3 &&
         Initializer(n.input(1))->dims_size() <= 5;
}

absl::Status Importer::MapConv(int i) {
  const onnx::NodeProto& n = N(i);
  const std::string& op = Op(i);
  v1::Layer layer;
  layer.set_name(NodeName(i));
  const onnx::TensorProto& w = *Initializer(n.input(1));
  const bool transposed = op == "ConvTranspose";
  const uint64_t groups =
      static_cast<uint64_t>(std::max<int64_t>(1, IntAttr(i, "group", 1)));
  const uint64_t out_channels =
      static_cast<uint64_t>(w.dims(1)) * (transposed ? groups : 1);
  const uint64_t in_channels = transposed
                                   ? static_cast<uint64_t>(w.dims(0))
                                   : static_cast<uint64_t>(w.dims(1)) * groups;
  const uint64_t out_ch =
      transposed ? out_channels : static_cast<uint64_t>(w.dims(0));
  const bool bias = n.input_size() >= 3 && IsWeight(n.input(2));
  if (Claimed(n.input(1)) || (bias && Claimed(n.input(2)))) {
    return EmitShared(i);
  }
  ASSIGN_OR_RETURN(const uint64_t p, Positions(i, n.output(0), out_ch));
  ASSIGN_OR_RETURN(const uint64_t in_p, Positions(i, n.input(0), in_channels));
  layer.set_positions(p);
  v1::Conv* conv = layer.mutable_conv();
  conv->set_in_channels(in_channels);
  conv->set_out_channels(out_ch);
  for (int k = 2; k < w.dims_size(); ++k) {
    conv->add_kernel(static_cast<uint64_t>(w.dims(k)));
  }
  conv->set_dims(static_cast<uint32_t>(w.dims_size() - 2));
  if (groups != 1) conv->set_groups(groups);
  conv->set_bias(bias);
  conv->set_transposed(transposed);
  if (in_p != p) conv->set_in_positions(in_p);
  std::vector<std::string> weights = {n.input(1)};
  if (bias) weights.push_back(n.input(2));
  return EmitWeighted(i, std::move(layer), weights);
}

bool Importer::IsRecurrentNode(int i) const {
  const onnx::NodeProto& n = N(i);
  const std::string& op = Op(i);
  return (op == "LSTM" || op == "GRU" || op == "RNN") && n.input_size() >= 3 &&
         IsWeight(n.input(1)) && IsWeight(n.input(2)) &&
         Initializer(n.input(1))->dims_size() == 3;
}

absl::Status Importer::MapRecurrent(int i) {
  const onnx::NodeProto& n = N(i);
  const std::string& op = Op(i);
  v1::Layer layer;
  layer.set_name(NodeName(i));
  const onnx::TensorProto& w = *Initializer(n.input(1));
  const bool bias = n.input_size() >= 4 && IsWeight(n.input(3));
  if (Claimed(n.input(1)) || Claimed(n.input(2)) ||
      (bias && Claimed(n.input(3)))) {
    return EmitShared(i);
  }
  const uint64_t gates = op == "LSTM" ? 4 : op == "GRU" ? 3 : 1;
  const uint64_t dirs = static_cast<uint64_t>(w.dims(0));
  const uint64_t hidden = static_cast<uint64_t>(w.dims(1)) / gates;
  const uint64_t input_size = static_cast<uint64_t>(w.dims(2));
  if (dirs < 1 || dirs > 2 || hidden == 0) return EmitShared(i);
  ASSIGN_OR_RETURN(const uint64_t p, Positions(i, n.input(0), input_size));
  layer.set_positions(p);
  v1::Recurrent* r = layer.mutable_recurrent();
  r->set_cell(op == "LSTM"  ? v1::Recurrent::LSTM
              : op == "GRU" ? v1::Recurrent::GRU
                            : v1::Recurrent::RNN);
  r->set_input_size(input_size);
  r->set_hidden(hidden);
  r->set_num_layers(1);
  r->set_bidirectional(dirs == 2);
  r->set_no_bias(!bias);
  std::vector<std::string> weights = {n.input(1), n.input(2)};
  if (bias) weights.push_back(n.input(3));
  return EmitWeighted(i, std::move(layer), weights);
}

}  // namespace onnx_internal
}  // namespace headroom
