#ifndef HEADROOM_CORE_FRONTENDS_ONNX_IMPORTER_H_
#define HEADROOM_CORE_FRONTENDS_ONNX_IMPORTER_H_

// The ONNX importer's internals, shared by its files: one class whose state
// is the graph's indexes and the layers matched so far, and whose methods
// are defined by op family:
//
//   onnx_import.cc          parsing, the pass order (Run), group names
//   onnx_batch_axis.cc      the batch axis and the bound lengths
//   onnx_graph_index.cc     values, producers, consumers, weights
//   onnx_linear.cc          linears, embeddings, conv and recurrent nodes
//   onnx_norms.cc           norm nodes and norms written out in ops
//   onnx_attention.cc       attention: scores, projections, heads
//   onnx_mlp.cc             MLPs: up, activation (gate), down
//   onnx_elementwise.cc     single nodes, element-wise layers, leftovers
//   onnx_spec_assembly.cc   the spec: order, positions, repeats, notes
//
// Not part of the front-end's interface: callers use onnx_import.h.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/frontends/onnx_import.h"
#include "headroom/v1/model.pb.h"
#include "onnx/onnx_pb.h"

namespace headroom {
namespace onnx_internal {

// Most parameters a graph may hold (as for a Hugging Face config).
inline constexpr double kMaxOnnxParams = 1e14;
// Largest tensor, per sample or as a weight, in elements.
inline constexpr uint64_t kMaxElements = uint64_t{1} << 50;
// How far the pattern searches walk from a node.
inline constexpr int kMaxWalk = 64;

// Whether an ONNX element type is a floating-point one (a parameter's).
bool IsFloatType(int32_t type);

// Whether `op` is in `ops`.
template <size_t N>
bool OneOf(const std::string& op, const char* const (&ops)[N]) {
  return std::find(std::begin(ops), std::end(ops), op) != std::end(ops);
}

// Longest common prefix of names that ends at a separator ('/', '.', ':')
// or at a whole name, without the separator: "/h.0/attn" for
// "/h.0/attn/c_attn" and "/h.0/attn/c_proj".
std::string CommonPrefix(const std::vector<std::string>& names);

// A group's name from its first and last nodes' names: their common path
// with both last components, "/h.0/attn/c_attn+c_proj"; the common path
// alone when a remainder is not one component.
std::string GroupName(const std::string& first, const std::string& last);

// Runs of identical layers (or identical sequences of up to 64 layers)
// become one block with `repeat`: the stack of a transformer, as the catalog
// writes it. Names do not take part in the comparison; the block is named by
// the layers' common prefix without a trailing index ("block" if none).
// More than 20,000 layers are returned as they are.
std::vector<v1::Layer> CompressRepeats(std::vector<v1::Layer> layers);

// What the importer knows about one named value of the graph.
struct Value {
  bool known = false;  // every dimension has a size
  std::vector<int64_t> dims;
  int32_t elem_type = 0;
  // Computed from a graph input's data (not only from constants or shapes):
  // one copy per sample.
  bool batched = false;
  // Elements per sample; 0 when unknown or not batched.
  uint64_t per_sample = 0;
};

// A MatMul or Gemm whose second operand is a weight (directly, or through a
// Transpose of one), with the bias Add after it when there is one.
struct LinearNode {
  int node = -1;
  int bias_node = -1;
  std::string weight;
  std::string bias;
  std::string input;
  std::string output;  // after the bias
  uint64_t in = 0;
  uint64_t out = 0;
};

// A recognized layer and where it sits in the graph.
struct Group {
  int anchor = 0;
  v1::Layer layer;
};

// What an attention match has found so far, from its Softmax outwards.
struct AttentionMatch {
  int softmax = -1;
  int scores = -1;   // the Q.K^T MatMul
  int context = -1;  // the probabilities.V MatMul
  // Nodes between the scores and the Softmax, between the Softmax and the
  // context, between the context and the output projection, and between the
  // Q/K/V projections and the MatMuls.
  std::set<int> score_path;
  std::set<int> prob_path;
  std::set<int> out_path;
  std::set<int> region;
  uint64_t heads = 0;
  uint64_t head_dim = 0;
  uint64_t kv_heads = 0;
  uint64_t q_len = 0;
  uint64_t k_len = 0;
  std::optional<LinearNode> q, k, v, out;
};

// A graph input's axes, as FindBatchAxis reads them.
struct GraphInput {
  std::string name;
  std::vector<std::string> symbols;  // per axis; "" for a fixed size
  std::vector<std::string> text;     // per axis, for messages
};

// Converts one parsed graph (SpecFromOnnx's rules, onnx_import.h). Run once.
class Importer {
 public:
  Importer(onnx::ModelProto model, const OnnxOptions& options)
      : model_(std::move(model)), options_(options) {}

  Importer(const Importer&) = delete;
  Importer& operator=(const Importer&) = delete;

  // Checks, indexes and matches the graph, then assembles the spec.
  absl::StatusOr<OnnxConversion> Run();

 private:
  // --- the graph (onnx_graph_index.cc) -------------------------------------

  const onnx::GraphProto& graph() const { return model_.graph(); }
  int NodeCount() const { return graph().node_size(); }
  const onnx::NodeProto& N(int i) const { return graph().node(i); }
  // The node's operator; "" for one the importer treats as opaque (another
  // domain's, or not in the model's opset), so no pattern matches it.
  const std::string& Op(int i) const {
    static const std::string kOpaque;
    return standard_[i] ? N(i).op_type() : kOpaque;
  }
  // The node's name without a trailing "/OP" ("/h.0/attn/c_attn/MatMul" ->
  // "/h.0/attn/c_attn"); its first output (or OP and index) when unnamed.
  std::string NodeName(int i) const;
  // "node 'NAME' (OP)", for notes and messages.
  std::string NodeLabel(int i) const;
  // The node's integer attribute `name`, or `fallback`.
  int64_t IntAttr(int i, const std::string& name, int64_t fallback) const;

  const Value* Find(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? nullptr : &it->second;
  }
  bool Batched(const std::string& name) const {
    const Value* v = Find(name);
    return v != nullptr && v->batched;
  }
  uint64_t PerSample(const std::string& name) const {
    const Value* v = Find(name);
    return v == nullptr ? 0 : v->per_sample;
  }
  // The size of the last axis, when known; -1 otherwise.
  int64_t LastDim(const std::string& name) const {
    const Value* v = Find(name);
    if (v == nullptr || v->dims.empty()) return -1;
    return v->dims.back();
  }
  // The node that writes `name`; -1 for an input or initializer.
  int Producer(const std::string& name) const {
    auto it = producer_.find(name);
    return it == producer_.end() ? -1 : it->second;
  }
  // The nodes that read `name`'s data (Shape and Size do not), in order.
  const std::vector<int>& Consumers(const std::string& name) const {
    static const std::vector<int> kNone;
    auto it = consumers_.find(name);
    return it == consumers_.end() ? kNone : it->second;
  }
  const onnx::TensorProto* Initializer(const std::string& name) const {
    auto it = initializers_.find(name);
    return it == initializers_.end() ? nullptr : it->second;
  }
  static uint64_t Elements(const onnx::TensorProto& t) {
    uint64_t n = 1;
    for (int64_t d : t.dims()) n *= static_cast<uint64_t>(d);
    return n;
  }
  // A trainable parameter tensor: a float initializer of 2+ elements that
  // is not a running statistic.
  bool IsWeight(const std::string& name) const {
    const onnx::TensorProto* t = Initializer(name);
    return t != nullptr && IsFloatType(t->data_type()) && Elements(*t) >= 2 &&
           buffers_.count(name) == 0;
  }
  uint64_t WeightElements(const std::string& name) const {
    return IsWeight(name) ? Elements(*Initializer(name)) : 0;
  }

  // Builds the indexes (values, producers, consumers, initializers and
  // their Identity aliases) from the inferred graph. INVALID_ARGUMENT for a
  // tensor over kMaxElements per sample.
  absl::Status Index();
  // The declared and inferred type and shape of every value.
  void IndexValues();
  // Producers, consumers, batch-dependence and opaque operators, node by
  // node in graph order.
  void IndexNodes(int opset);
  // Each batched value's elements per sample.
  absl::Status PerSampleSizes();
  // Collects the running statistics (buffers), the parameter total and the
  // weights' order. INVALID_ARGUMENT over kMaxOnnxParams.
  absl::Status CheckWeights();

  // --- the batch axis (onnx_batch_axis.cc) ---------------------------------

  // Finds the batch axis and binds the other symbolic lengths (rules in
  // onnx_import.h), then writes them into the graph's shapes.
  absl::Status FindBatchAxis();
  // The graph inputs that are not initializers, with their axes.
  absl::StatusOr<std::vector<GraphInput>> ReadInputs() const;
  // Sets batch_symbol_ (rule 1) or batch_divisor_ (rule 2), and batch_axis_.
  absl::Status ChooseBatchAxis(const std::vector<GraphInput>& inputs);
  // Binds every other symbol to options_.positions, with a note each.
  absl::Status BindLengths(const std::vector<GraphInput>& inputs);
  // Writes the batch (one sample) and the bound lengths into the graph's
  // declared shapes before shape inference.
  void ApplyBindings();

  // --- weights and linears (onnx_linear.cc) --------------------------------

  // The weight a MatMul operand reads: an initializer, or a Transpose (or
  // Identity/Cast) of one; `transposed` when stored [out, in].
  std::optional<std::pair<std::string, bool>> WeightOf(const std::string& name,
                                                       bool transposed,
                                                       int depth = 0) const;
  // Node i as a linear (cached), or nullopt.
  const std::optional<LinearNode>& Linear(int i);
  std::optional<LinearNode> MakeLinear(int i) const;
  // The linear a node belongs to (its MatMul/Gemm or its bias Add).
  std::optional<LinearNode> LinearAt(int i);
  void ConsumeLinear(const LinearNode& l);

  bool Claimed(const std::string& weight) const {
    return claimed_.count(weight) != 0;
  }
  void Claim(const std::string& weight) {
    if (!weight.empty()) claimed_.insert(weight);
  }
  // Whether another layer already counts a weight or bias of these linears.
  bool AnyClaimed(const std::vector<const LinearNode*>& parts) const;
  // What a group of linears holds: each distinct weight and bias once (a
  // group whose spec kind counts more is not that kind).
  uint64_t HeldParams(const std::vector<const LinearNode*>& parts) const;
  // Positions of a layer whose `tensor` has `width` values per position.
  // INVALID_ARGUMENT naming the node when the size is unknown.
  absl::StatusOr<uint64_t> Positions(int node, const std::string& tensor,
                                     uint64_t width) const;
  // Whether `tensor` reaches a graph output (through reshapes only) or a
  // loss: the logits.
  bool IsLogits(const std::string& tensor, int depth = 0) const;
  // Marks the residual add (after an optional dropout) that sums a group's
  // output with the stream: it belongs to the group.
  void AbsorbResidual(const std::string& output);

  // Gathers from a 2-D weight by batch-dependent indices: embeddings.
  void MatchEmbeddings();
  // Single weighted nodes: an embedding Gather (one MatchEmbeddings found),
  // the linear `l` that node i belongs to, a convolution and a recurrent
  // cell (when IsConvNode, IsRecurrentNode). Each emits the node's layer;
  // INVALID_ARGUMENT when its activations' size is unknown.
  absl::Status MapEmbedding(int i);
  absl::Status MapLinear(int i, const LinearNode& l);
  bool IsConvNode(int i) const;
  absl::Status MapConv(int i);
  bool IsRecurrentNode(int i) const;
  absl::Status MapRecurrent(int i);
  // The note on a logits linear with its own weight of the embedding
  // table's shape (a tie the exporter folded away).
  void NoteFoldedTie(int i, const LinearNode& l);

  // --- norms (onnx_norms.cc) -----------------------------------------------

  // The only consumer of `tensor`, when it is an unconsumed `op`; else -1.
  int Single(const std::string& tensor, const char* op) const;
  // Whether node i's inputs other than `tensor` are constants.
  bool OthersConstant(int i, const std::string& tensor) const;
  // ReduceMean over the last axis only (axes attribute before opset 18,
  // an axes input from 18).
  bool ReducesLastAxis(int r) const;
  // From sqrt(mean + eps) to the normalized value: numerator / sqrt, or
  // numerator * (1 / sqrt) through Reciprocal or Div(1, .), then an
  // optional Cast. Returns the last node, -1 when the shape differs.
  int NormEnd(const std::string& numerator, int sqrt_node,
              std::vector<int>* nodes) const;
  // The scale (and shift) after a normalized value: Mul by a weight of
  // `dim` values, then Add of one. Appends the nodes; returns the weights.
  std::pair<std::string, std::string> NormAffine(int end, uint64_t dim,
                                                 std::vector<int>* nodes);
  // mean(x^2) + eps, square root: the variance branch from `square`.
  int VarianceRoot(int square, std::vector<int>* nodes) const;
  // x^2 as Pow(x, 2) or Mul(x, x); the squared tensor, or "".
  std::string Squared(int i) const;
  void EmitNorm(const std::vector<int>& nodes, const std::string& x,
                v1::Norm::Kind kind, const std::string& scale,
                const std::string& shift);
  // (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* gamma + beta].
  void MatchLayerNormOps(int mean);
  // x / sqrt(mean(x^2) + eps) [* weight].
  void MatchRmsNormOps(int square);
  // LayerNormalization, BatchNormalization, InstanceNormalization nodes.
  bool IsNormNode(int i) const;
  absl::Status MapNorm(int i);

  // --- attention (onnx_attention.cc) ---------------------------------------

  // Walks back from `tensor` through plumbing to the nearest linear; the
  // nodes on the way from the linear to `tensor` go into `region`.
  std::optional<LinearNode> TraceProjection(const std::string& tensor,
                                            std::set<int>* region);
  // One Attention layer around a Softmax, or a note that it is not one.
  void MatchAttention(int softmax);
  // Each step of MatchAttention fills `m`; false when the graph is not
  // attention there.
  bool FindScores(AttentionMatch* m) const;
  bool FindContext(AttentionMatch* m) const;
  bool ReadScoreShape(AttentionMatch* m) const;
  bool FindProjections(AttentionMatch* m);
  bool FindOutputProjection(AttentionMatch* m);
  bool ReadKvHeads(AttentionMatch* m) const;
  // The spec's layer for a match; nullopt when its parameters are not the
  // projections' (then the graph is something else).
  std::optional<v1::Layer> AttentionLayer(const AttentionMatch& m) const;
  void NoteUnmatchedSoftmax(int softmax) {
    unmatched_softmax_.push_back(softmax);
  }

  // --- MLPs (onnx_mlp.cc) --------------------------------------------------

  // One Mlp layer from an up projection, when the pattern is there.
  void MatchMlp(int up_node);
  // The element-wise region after `up` and the down projection it ends in;
  // false when something else reads the region.
  bool MlpRegion(const LinearNode& up, std::set<int>* region,
                 std::set<std::string>* reached,
                 std::optional<LinearNode>* down);
  // The gate projection feeding the region, if any; false when a region
  // input is neither the region's, the up projection's nor a gate's.
  bool MlpGate(const LinearNode& up, const std::set<int>& region,
               const std::set<std::string>& reached,
               std::optional<LinearNode>* gate);

  // --- single nodes (onnx_elementwise.cc) ----------------------------------

  // The layer of one node no pattern consumed.
  absl::Status MapNode(int i);
  absl::Status Emit(int i, v1::Layer layer);
  // Emits a layer that owns `weights`, when the spec's count for its kind
  // equals what they hold; otherwise the node's output only (its weights
  // become Parameters layers).
  absl::Status EmitWeighted(int i, v1::Layer layer,
                            const std::vector<std::string>& weights);
  // A weighted node whose weights another layer already counts (or whose
  // weights do not fit the spec's kind): its output only.
  absl::Status EmitShared(int i);
  // An Elementwise layer of the node's output size (nothing when the output
  // is not batched; a note when its size is unknown).
  absl::Status EmitValue(int i, v1::Elementwise::Op op);
  absl::Status MapElementwise(int i);
  // Parameters layers for weights no layer claimed.
  void AddUnclaimedWeights();

  // --- the spec (onnx_spec_assembly.cc) ------------------------------------

  absl::StatusOr<OnnxConversion> Assemble();
  // The spec's family and the most common positions (0 in the layers that
  // have them); then the layers, repeats compressed.
  void AddLayers(v1::ModelSpec* spec);
  // The spec's source and input_source.
  void Describe(v1::ModelSpec* spec) const;
  // notes_ and what the matching counted, for a reviewer.
  std::vector<std::string> CollectNotes();
  // Options' name, the graph's, or "onnx-model", as a lower-case slug.
  std::string SpecName() const;

  onnx::ModelProto model_;
  OnnxOptions options_;

  // The batch and the bound lengths.
  std::string batch_symbol_;
  uint64_t batch_divisor_ = 1;
  std::string batch_axis_;
  std::set<std::string> bound_;
  std::vector<std::string> input_text_;

  // Graph indexes.
  std::unordered_map<std::string, Value> values_;
  std::unordered_map<std::string, int> producer_;
  std::unordered_map<std::string, std::vector<int>> consumers_;
  std::unordered_map<std::string, const onnx::TensorProto*> initializers_;
  std::unordered_set<std::string> graph_outputs_;
  std::unordered_set<std::string> buffers_;
  std::vector<std::string> aliases_;  // Identity copies of initializers
  std::vector<std::string> weight_order_;
  double total_params_ = 0;

  // Matching state.
  std::vector<bool> standard_;  // the node is a standard operator (Op)
  std::vector<bool> consumed_;
  std::vector<std::optional<LinearNode>> linear_cache_;
  std::vector<bool> linear_done_;
  std::set<std::string> claimed_;
  std::set<int> embeddings_;
  std::vector<Group> groups_;
  int attention_layers_ = 0;

  // For the notes.
  std::vector<std::string> notes_;
  std::vector<int> unmatched_softmax_;
  int activation_matmuls_ = 0;
  std::set<std::string> unknown_shape_ops_;
  std::set<std::string> foreign_ops_;
};

}  // namespace onnx_internal
}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_ONNX_IMPORTER_H_
