// MLPs: a linear widening d -> f, parameter-free element-wise ops (an
// activation, GELU written out, a gate product with a sibling d -> f
// linear), and a linear f -> d are one Mlp layer (onnx_import.h).

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/frontends/onnx_importer.h"
#include "core/memory/model_spec.h"

namespace headroom {
namespace onnx_internal {
namespace {

// Parameter-free element-wise ops inside an MLP (activations, GELU written
// out, gate products).
constexpr const char* kMlpOps[] = {
    "Relu",      "Gelu",    "Sigmoid", "Tanh",        "Erf",
    "Mul",       "Div",     "Add",     "Sub",         "Pow",
    "Sqrt",      "Dropout", "Cast",    "Identity",    "Softplus",
    "LeakyRelu", "Elu",     "Selu",    "HardSigmoid", "HardSwish",
    "Clip",      "Exp",     "Neg",     "Mish",        "ThresholdedRelu",
    "Softsign",  "Celu"};

}  // namespace

void Importer::MatchMlp(int up_node) {
  const LinearNode up = *Linear(up_node);
  if (Claimed(up.weight)) return;
  const uint64_t d = up.in;
  const uint64_t f = up.out;
  std::set<int> region;
  std::set<std::string> reached = {up.output};
  std::optional<LinearNode> down;
  std::optional<LinearNode> gate;
  if (!MlpRegion(up, &region, &reached, &down)) return;
  if (!MlpGate(up, region, reached, &gate)) return;
  const bool bias = !up.bias.empty();
  if (bias != !down->bias.empty() ||
      (gate.has_value() && bias != !gate->bias.empty()) ||
      Claimed(down->weight)) {
    return;
  }
  absl::StatusOr<uint64_t> positions = Positions(up_node, up.output, f);
  if (!positions.ok()) return;
  v1::Layer layer;
  layer.set_name(GroupName(NodeName(up_node), NodeName(down->node)));
  layer.set_positions(*positions);
  v1::Mlp* mlp = layer.mutable_mlp();
  mlp->set_hidden(d);
  mlp->set_ffn(f);
  mlp->set_gated(gate.has_value());
  mlp->set_bias(bias);
  std::vector<const LinearNode*> parts = {&up, &*down};
  if (gate.has_value()) parts.push_back(&*gate);
  if (AnyClaimed(parts) || CountLayerParams(layer) != HeldParams(parts)) {
    return;
  }
  int anchor = up_node;
  for (const LinearNode* l : parts) {
    ConsumeLinear(*l);
    Claim(l->weight);
    Claim(l->bias);
    anchor = std::min(anchor, l->node);
  }
  for (int n : region) consumed_[n] = true;
  AbsorbResidual(down->output);
  groups_.push_back({anchor, std::move(layer)});
}

bool Importer::MlpRegion(const LinearNode& up, std::set<int>* region,
                         std::set<std::string>* reached,
                         std::optional<LinearNode>* down) {
  const uint64_t d = up.in;
  const uint64_t f = up.out;
  std::vector<std::string> frontier = {up.output};
  while (!frontier.empty()) {
    const std::string t = frontier.back();
    frontier.pop_back();
    if (graph_outputs_.count(t) != 0) return false;
    for (int c : Consumers(t)) {
      if (consumed_[c] || region->count(c) != 0) continue;
      if (Linear(c).has_value() && Linear(c)->input == t) {
        const LinearNode& l = *Linear(c);
        if (t == up.output || l.in != f || l.out != d ||
            (down->has_value() && (*down)->node != c)) {
          return false;
        }
        *down = l;
        continue;
      }
      if (!OneOf(Op(c), kMlpOps)) return false;
      if (static_cast<int>(region->size()) >= kMaxWalk / 2) return false;
      region->insert(c);
      for (const std::string& out : N(c).output()) {
        if (out.empty()) continue;
        reached->insert(out);
        frontier.push_back(out);
      }
    }
  }
  return down->has_value() && !region->empty();
}

bool Importer::MlpGate(const LinearNode& up, const std::set<int>& region,
                       const std::set<std::string>& reached,
                       std::optional<LinearNode>* gate) {
  const uint64_t f = up.out;
  // Every batch-dependent input of the region comes from the up
  // projection, the region itself, or a gate projection of the same input.
  for (int n : region) {
    for (const std::string& in : N(n).input()) {
      if (in.empty() || reached.count(in) != 0 || !Batched(in)) continue;
      const int p = Producer(in);
      const std::optional<LinearNode> g = p >= 0 ? LinearAt(p) : std::nullopt;
      if (!g.has_value() || g->output != in || g->input != up.input ||
          g->out != f || consumed_[g->node] || Claimed(g->weight) ||
          (gate->has_value() && (*gate)->node != g->node)) {
        return false;
      }
      *gate = g;
    }
  }
  if (gate->has_value()) {
    // The gate's output feeds only the region.
    for (int c : Consumers((*gate)->output)) {
      if (region.count(c) == 0) return false;
    }
  }
  return true;
}

}  // namespace onnx_internal
}  // namespace headroom
