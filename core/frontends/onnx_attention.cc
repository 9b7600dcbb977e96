// Attention: a MatMul of two activations that feeds a Softmax, the MatMul
// that applies the probabilities to V, the linear projections that produce
// Q, K and V (separate, or fused and split) and the projection after it are
// one Attention layer (onnx_import.h).

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

// Ops through which a projection's output travels to the score MatMul:
// head split, transposes, the fused-QKV split, scaling, rotary embeddings,
// grouped-query K/V repetition.
constexpr const char* kPlumbingOps[] = {
    "Reshape",  "Transpose", "Split",  "Slice",  "Squeeze", "Unsqueeze",
    "Identity", "Cast",      "Gather", "Expand", "Tile",    "Concat",
    "Mul",      "Div",       "Add",    "Sub",    "Neg",     "Flatten"};

// Ops between a score MatMul and its Softmax (scale, mask, bias).
constexpr const char* kScoreOps[] = {"Add",   "Sub",  "Mul",      "Div",
                                     "Where", "Cast", "Identity", "Reshape"};

}  // namespace

std::optional<LinearNode> Importer::TraceProjection(const std::string& tensor,
                                                    std::set<int>* region) {
  std::vector<int> queue;
  std::set<int> visited;
  const int start = Producer(tensor);
  if (start < 0) return std::nullopt;
  queue.push_back(start);
  std::optional<LinearNode> found;
  for (size_t q = 0;
       q < queue.size() && visited.size() < static_cast<size_t>(kMaxWalk);
       ++q) {
    const int n = queue[q];
    if (!visited.insert(n).second || consumed_[n]) continue;
    if (std::optional<LinearNode> l = LinearAt(n)) {
      found = l;
      break;
    }
    if (!OneOf(Op(n), kPlumbingOps)) continue;
    for (const std::string& in : N(n).input()) {
      if (in.empty() || !Batched(in) || IsWeight(in)) continue;
      const int p = Producer(in);
      if (p >= 0) queue.push_back(p);
    }
  }
  if (!found.has_value() || Claimed(found->weight)) return std::nullopt;
  // The visited nodes that the linear's output reaches.
  std::set<std::string> reached = {found->output};
  for (int n : visited) {  // std::set: ascending, a topological order
    if (n == found->node || n == found->bias_node) continue;
    bool from_region = false;
    for (const std::string& in : N(n).input()) {
      if (reached.count(in) != 0) from_region = true;
    }
    if (!from_region) continue;
    region->insert(n);
    for (const std::string& out : N(n).output()) reached.insert(out);
  }
  if (reached.count(tensor) == 0) return std::nullopt;
  return found;
}

void Importer::MatchAttention(int softmax) {
  AttentionMatch m;
  m.softmax = softmax;
  if (!FindScores(&m) || !FindContext(&m) || !ReadScoreShape(&m) ||
      !FindProjections(&m) || !FindOutputProjection(&m) || !ReadKvHeads(&m)) {
    return NoteUnmatchedSoftmax(softmax);
  }
  std::optional<v1::Layer> layer = AttentionLayer(m);
  if (!layer.has_value()) return NoteUnmatchedSoftmax(softmax);
  for (const LinearNode* l : {&*m.q, &*m.k, &*m.v, &*m.out}) {
    ConsumeLinear(*l);
    Claim(l->weight);
    Claim(l->bias);
  }
  for (const std::set<int>* nodes :
       {&m.region, &m.score_path, &m.prob_path, &m.out_path}) {
    for (int n : *nodes) consumed_[n] = true;
  }
  consumed_[m.scores] = true;
  consumed_[m.context] = true;
  AbsorbResidual(m.out->output);
  groups_.push_back(
      {std::min(m.q->node, std::min(m.k->node, m.v->node)), std::move(*layer)});
  ++attention_layers_;
}

// Back from the Softmax to the score MatMul through scale and mask.
bool Importer::FindScores(AttentionMatch* m) const {
  std::vector<std::pair<int, int>> queue;  // node, parent index
  const int start = Producer(N(m->softmax).input(0));
  if (start >= 0) queue.push_back({start, -1});
  std::set<int> seen;
  for (size_t q = 0; q < queue.size() && q < 32; ++q) {
    const int n = queue[q].first;
    if (!seen.insert(n).second || consumed_[n]) continue;
    if (Op(n) == "MatMul" && N(n).input_size() == 2 && Batched(N(n).input(0)) &&
        Batched(N(n).input(1)) && !WeightOf(N(n).input(1), false).has_value()) {
      m->scores = n;
      for (int k = queue[q].second; k >= 0; k = queue[k].second) {
        m->score_path.insert(queue[k].first);
      }
      return true;
    }
    if (!OneOf(Op(n), kScoreOps)) continue;
    for (const std::string& in : N(n).input()) {
      const int p = in.empty() ? -1 : Producer(in);
      if (p >= 0 && Batched(in)) {
        queue.push_back({p, static_cast<int>(q)});
      }
    }
  }
  return false;
}

// Forward from the Softmax to the MatMul that applies the probabilities to V.
bool Importer::FindContext(AttentionMatch* m) const {
  m->prob_path = {m->softmax};
  std::string cur = N(m->softmax).output(0);
  for (int step = 0; step < 4; ++step) {
    const std::vector<int>& next = Consumers(cur);
    if (next.size() != 1) break;
    const int c = next[0];
    if (Op(c) == "MatMul" && N(c).input(0) == cur && Batched(N(c).input(1))) {
      m->context = c;
      return true;
    }
    if (Op(c) != "Dropout" && Op(c) != "Cast" && Op(c) != "Identity") break;
    m->prob_path.insert(c);
    cur = N(c).output(0);
  }
  return false;
}

// Heads and lengths from the score shape [.., heads, q, k].
bool Importer::ReadScoreShape(AttentionMatch* m) const {
  const Value* s = Find(N(m->scores).output(0));
  const int64_t head_dim = LastDim(N(m->scores).input(0));
  if (s == nullptr || !s->known || s->dims.size() < 3 || s->per_sample == 0 ||
      head_dim <= 0) {
    return false;
  }
  m->q_len = static_cast<uint64_t>(s->dims[s->dims.size() - 2]);
  m->k_len = static_cast<uint64_t>(s->dims.back());
  if (m->q_len == 0 || m->k_len == 0 ||
      s->per_sample % (m->q_len * m->k_len) != 0) {
    return false;
  }
  m->heads = s->per_sample / (m->q_len * m->k_len);
  m->head_dim = static_cast<uint64_t>(head_dim);
  return true;
}

bool Importer::FindProjections(AttentionMatch* m) {
  m->q = TraceProjection(N(m->scores).input(0), &m->region);
  m->k = TraceProjection(N(m->scores).input(1), &m->region);
  m->v = TraceProjection(N(m->context).input(1), &m->region);
  return m->q.has_value() && m->k.has_value() && m->v.has_value();
}

// Forward from the context to the output projection.
bool Importer::FindOutputProjection(AttentionMatch* m) {
  std::string cur = N(m->context).output(0);
  for (int step = 0; step < 8 && !m->out.has_value(); ++step) {
    const std::vector<int>& next = Consumers(cur);
    if (next.size() != 1) break;
    const int c = next[0];
    if (Linear(c).has_value() && Linear(c)->input == cur) {
      m->out = Linear(c);
      break;
    }
    const std::string& op = Op(c);
    if (op != "Transpose" && op != "Reshape" && op != "Identity" &&
        op != "Cast" && op != "Flatten") {
      break;
    }
    m->out_path.insert(c);
    cur = N(c).output(0);
  }
  return m->out.has_value() && !Claimed(m->out->weight);
}

// K/V heads from the Q, K and V widths, from separate or fused projections.
bool Importer::ReadKvHeads(AttentionMatch* m) const {
  const LinearNode& q = *m->q;
  const LinearNode& k = *m->k;
  const LinearNode& v = *m->v;
  const uint64_t hd = m->head_dim;
  const uint64_t q_width = m->heads * hd;
  const bool fused_qkv = q.node == k.node && k.node == v.node;
  const bool fused_kv = !fused_qkv && k.node == v.node;
  if (fused_qkv) {
    if (q.out <= q_width || (q.out - q_width) % (2 * hd) != 0) return false;
    m->kv_heads = (q.out - q_width) / (2 * hd);
  } else {
    if (q.out != q_width || q.node == k.node || q.node == v.node) return false;
    if (fused_kv) {
      if (k.out % (2 * hd) != 0) return false;
      m->kv_heads = k.out / (2 * hd);
    } else {
      if (k.out % hd != 0 || v.out != k.out) return false;
      m->kv_heads = k.out / hd;
    }
  }
  return m->kv_heads != 0 && m->heads % m->kv_heads == 0;
}

std::optional<v1::Layer> Importer::AttentionLayer(
    const AttentionMatch& m) const {
  const LinearNode& q = *m.q;
  const LinearNode& k = *m.k;
  const LinearNode& v = *m.v;
  const LinearNode& o = *m.out;
  const uint64_t hd = m.head_dim;
  v1::Layer layer;
  layer.set_name(GroupName(NodeName(q.node), NodeName(o.node)));
  layer.set_positions(m.q_len);
  v1::Attention* a = layer.mutable_attention();
  a->set_hidden(o.out);
  a->set_heads(m.heads);
  if (m.kv_heads != m.heads) a->set_kv_heads(m.kv_heads);
  if (o.out % m.heads != 0 || o.out / m.heads != hd) a->set_head_dim(hd);
  if (k.in != o.out) a->set_kv_input_dim(k.in);
  if (m.k_len != m.q_len) a->set_kv_positions(m.k_len);
  a->set_qkv_bias(!q.bias.empty());
  a->set_out_bias(!o.bias.empty());
  // The spec's attention must hold exactly the projections' parameters
  // (one bias setting for Q, K and V, the query width equal to the
  // output's): otherwise the graph is something else.
  const std::vector<const LinearNode*> parts = {&q, &k, &v, &o};
  const uint64_t graph_params = HeldParams(parts);
  const bool same_bias =
      q.bias.empty() == k.bias.empty() && k.bias.empty() == v.bias.empty();
  if (!same_bias || q.in != o.out || AnyClaimed(parts) ||
      CountLayerParams(layer) != graph_params) {
    return std::nullopt;
  }
  return layer;
}

}  // namespace onnx_internal
}  // namespace headroom
