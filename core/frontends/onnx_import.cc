#include "core/frontends/onnx_import.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/frontends/onnx_shapes.h"
#include "core/memory/model_spec.h"
#include "onnx/onnx_pb.h"

namespace headroom {
namespace {

using v1::Layer;

// Most parameters a graph may hold (as for a Hugging Face config).
constexpr double kMaxOnnxParams = 1e14;
// Largest tensor, per sample or as a weight, in elements.
constexpr uint64_t kMaxElements = uint64_t{1} << 50;
// How far the pattern searches walk from a node.
constexpr int kMaxWalk = 64;

bool IsFloatType(int32_t type) {
  return type == onnx::TensorProto::FLOAT ||
         type == onnx::TensorProto::FLOAT16 ||
         type == onnx::TensorProto::DOUBLE ||
         type == onnx::TensorProto::BFLOAT16;
}

// Whether `op` is in `ops`.
template <size_t N>
bool OneOf(const std::string& op, const char* const (&ops)[N]) {
  return std::find(std::begin(ops), std::end(ops), op) != std::end(ops);
}

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

// Parameter-free element-wise ops inside an MLP (activations, GELU written
// out, gate products).
constexpr const char* kMlpOps[] = {
    "Relu",      "Gelu",    "Sigmoid", "Tanh",        "Erf",
    "Mul",       "Div",     "Add",     "Sub",         "Pow",
    "Sqrt",      "Dropout", "Cast",    "Identity",    "Softplus",
    "LeakyRelu", "Elu",     "Selu",    "HardSigmoid", "HardSwish",
    "Clip",      "Exp",     "Neg",     "Mish",        "ThresholdedRelu",
    "Softsign",  "Celu"};

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

std::string DimsText(const std::vector<std::string>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

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
  Layer layer;
};

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(c));
  return s;
}

bool LooksLikeBatch(const std::string& symbol) {
  const std::string s = Lower(symbol);
  return s.find("batch") != std::string::npos || s == "n" || s == "b" ||
         s == "bs";
}

bool IsSeparator(char c) { return c == '/' || c == '.' || c == ':'; }

// Longest common prefix of names that ends at a separator (or a whole name),
// without the separator: "/h.0/attn" for "/h.0/attn/c_attn" and
// "/h.0/attn/c_proj".
std::string CommonPrefix(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string prefix = names[0];
  for (const std::string& n : names) {
    size_t i = 0;
    while (i < prefix.size() && i < n.size() && prefix[i] == n[i]) ++i;
    prefix.resize(i);
  }
  bool whole = true;
  for (const std::string& n : names) {
    if (n.size() != prefix.size() && !IsSeparator(n[prefix.size()])) {
      whole = false;
    }
  }
  if (!whole) {
    const size_t cut = prefix.find_last_of("/.:");
    prefix = cut == std::string::npos ? "" : prefix.substr(0, cut);
  }
  while (!prefix.empty() && IsSeparator(prefix.back())) prefix.pop_back();
  return prefix;
}

// A group's name from its first and last nodes' names: their common path
// with both last components, "/h.0/attn/c_attn+c_proj".
std::string GroupName(const std::string& first, const std::string& last) {
  if (first == last) return first;
  const std::string prefix = CommonPrefix({first, last});
  size_t a = prefix.size();
  size_t b = prefix.size();
  std::string separator;
  if (a < first.size() && IsSeparator(first[a]) && b < last.size() &&
      last[b] == first[a]) {
    separator = std::string(1, first[a]);
    ++a;
    ++b;
  }
  const std::string head = first.substr(a);
  const std::string tail = last.substr(b);
  if (head.find_first_of("/.:") != std::string::npos ||
      tail.find_first_of("/.:") != std::string::npos || head.empty() ||
      tail.empty()) {
    return prefix.empty() ? first : prefix;
  }
  return absl::StrCat(prefix, separator, head, "+", tail);
}

class Importer {
 public:
  Importer(onnx::ModelProto model, const OnnxOptions& options)
      : model_(std::move(model)), options_(options) {}

  absl::StatusOr<OnnxConversion> Run() {
    RETURN_IF_ERROR(CheckOnnxStructure(model_));
    RETURN_IF_ERROR(FindBatchAxis());
    RETURN_IF_ERROR(InferOnnxShapes(&model_));
    RETURN_IF_ERROR(Index());
    RETURN_IF_ERROR(CheckWeights());
    MatchEmbeddings();
    // Norms written out (exports before opset 17, RMSNorm): LayerNorm
    // first, whose variance branch would otherwise read as an RMSNorm.
    for (int i = 0; i < NodeCount(); ++i) {
      if (Op(i) == "ReduceMean" && !consumed_[i]) MatchLayerNormOps(i);
    }
    for (int i = 0; i < NodeCount(); ++i) {
      if ((Op(i) == "Pow" || Op(i) == "Mul") && !consumed_[i]) {
        MatchRmsNormOps(i);
      }
    }
    for (int i = 0; i < NodeCount(); ++i) {
      if (Op(i) == "Softmax" && !consumed_[i]) MatchAttention(i);
    }
    for (int i = 0; i < NodeCount(); ++i) {
      if (!consumed_[i] && Linear(i).has_value()) MatchMlp(i);
    }
    for (int i = 0; i < NodeCount(); ++i) {
      if (!consumed_[i]) RETURN_IF_ERROR(MapNode(i));
    }
    AddUnclaimedWeights();
    return Assemble();
  }

 private:
  const onnx::GraphProto& graph() const { return model_.graph(); }
  int NodeCount() const { return graph().node_size(); }
  const onnx::NodeProto& N(int i) const { return graph().node(i); }
  // The node's operator; "" for one the importer treats as opaque (another
  // domain's, or not in the model's opset), so no pattern matches it.
  const std::string& Op(int i) const {
    static const std::string kOpaque;
    return standard_[i] ? N(i).op_type() : kOpaque;
  }

  std::string NodeName(int i) const {
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

  std::string NodeLabel(int i) const { return OnnxNodeLabel(N(i), i); }

  int64_t IntAttr(int i, const std::string& name, int64_t fallback) const {
    for (const auto& a : N(i).attribute()) {
      if (a.name() == name) return a.i();
    }
    return fallback;
  }

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
  // The size of the last axis, when known.
  int64_t LastDim(const std::string& name) const {
    const Value* v = Find(name);
    if (v == nullptr || v->dims.empty()) return -1;
    return v->dims.back();
  }
  int Producer(const std::string& name) const {
    auto it = producer_.find(name);
    return it == producer_.end() ? -1 : it->second;
  }
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

  // --- the batch axis ------------------------------------------------------

  absl::Status FindBatchAxis() {
    std::set<std::string> init_names;
    for (const auto& t : graph().initializer()) init_names.insert(t.name());
    struct Input {
      std::string name;
      std::vector<std::string> symbols;  // per axis; "" for a fixed size
      std::vector<std::string> text;     // per axis, for messages
    };
    std::vector<Input> inputs;
    for (const auto& in : graph().input()) {
      if (init_names.count(in.name()) != 0) continue;
      if (!in.type().has_tensor_type()) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph input '", in.name(),
                         "' is not a tensor; the planner reads tensor inputs "
                         "only"));
      }
      if (!in.type().tensor_type().has_shape()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph input '", in.name(),
            "' has no shape; export the model with input shapes (a batch "
            "axis and the sample's dimensions)"));
      }
      const auto& shape = in.type().tensor_type().shape();
      Input input{in.name(), {}, {}};
      for (int axis = 0; axis < shape.dim_size(); ++axis) {
        const auto& dim = shape.dim(axis);
        if (dim.has_dim_value()) {
          if (dim.dim_value() < 1 ||
              static_cast<uint64_t>(dim.dim_value()) > kMaxSpecDimension) {
            return absl::InvalidArgumentError(absl::StrCat(
                "graph input '", in.name(), "' dims[", axis,
                "] = ", dim.dim_value(), " is out of range; allowed 1..",
                kMaxSpecDimension));
          }
          input.symbols.push_back("");
          input.text.push_back(absl::StrCat(dim.dim_value()));
        } else if (!dim.dim_param().empty()) {
          input.symbols.push_back(dim.dim_param());
          input.text.push_back(dim.dim_param());
        } else {
          input.symbols.push_back(absl::StrCat("?", in.name(), ":", axis));
          input.text.push_back("?");
        }
      }
      if (!input.symbols.empty()) inputs.push_back(std::move(input));
    }
    if (inputs.empty()) {
      return absl::InvalidArgumentError(
          "graph has no inputs with a batch axis (no graph input of rank 1 "
          "or more); the planner needs the inputs a batch of samples enters "
          "through");
    }
    for (const Input& in : inputs) {
      input_text_.push_back(absl::StrCat(in.name, " ", DimsText(in.text)));
    }

    // (1) A symbol every input has.
    std::vector<std::string> shared;
    for (const std::string& symbol : inputs[0].symbols) {
      if (symbol.empty()) continue;
      if (symbol[0] == '?' && inputs.size() > 1) continue;
      bool everywhere = true;
      for (const Input& in : inputs) {
        if (std::find(in.symbols.begin(), in.symbols.end(), symbol) ==
            in.symbols.end()) {
          everywhere = false;
        }
      }
      if (everywhere &&
          std::find(shared.begin(), shared.end(), symbol) == shared.end()) {
        shared.push_back(symbol);
      }
    }
    if (!shared.empty()) {
      batch_symbol_ = shared[0];
      for (const std::string& s : shared) {
        if (LooksLikeBatch(s)) {
          batch_symbol_ = s;
          break;
        }
      }
      std::vector<std::string> where;
      for (const Input& in : inputs) {
        const int axis = static_cast<int>(
            std::find(in.symbols.begin(), in.symbols.end(), batch_symbol_) -
            in.symbols.begin());
        where.push_back(absl::StrCat(in.name, " axis ", axis));
      }
      batch_axis_ = absl::StrCat(
          "batch axis: ",
          batch_symbol_[0] == '?'
              ? std::string("the dynamic dimension")
              : absl::StrCat("symbolic dimension '", batch_symbol_, "'"),
          " (", absl::StrJoin(where, ", "), ")",
          shared.size() > 1 && inputs.size() > 1
              ? absl::StrCat("; every input shares ",
                             absl::StrJoin(shared, ", "),
                             ": this one is named like a batch or comes first")
              : "");
    } else {
      // (2) A leading dimension of one fixed size in every input.
      bool fixed = true;
      int64_t n = -1;
      for (const Input& in : inputs) {
        if (!in.symbols[0].empty()) {
          fixed = false;
          break;
        }
        const int64_t size = std::stoll(in.text[0]);
        if (n >= 0 && size != n) fixed = false;
        n = size;
      }
      if (!fixed) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph inputs have no batch axis: no symbolic dimension is shared "
            "by every input and their leading dimensions differ (",
            absl::StrJoin(input_text_, ", "),
            "), so the graph is one fixed computation whatever the batch; "
            "export it with a dynamic batch axis (torch.onnx.export "
            "dynamic_axes={\"input\": {0: \"batch\"}})"));
      }
      batch_divisor_ = static_cast<uint64_t>(n);
      batch_axis_ = absl::StrCat(
          "batch axis: axis 0 of every input, exported "
          "at batch ",
          n, " (sizes divided by ", n, ")");
    }

    // Every other symbol is a length the caller binds.
    for (const Input& in : inputs) {
      for (size_t axis = 0; axis < in.symbols.size(); ++axis) {
        const std::string& s = in.symbols[axis];
        if (s.empty() || s == batch_symbol_ || bound_.count(s) != 0) continue;
        if (options_.positions == 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "graph input '", in.name, "' axis ", axis, " is symbolic (",
              s[0] == '?' ? "unnamed" : absl::StrCat("'", s, "'"),
              ") and is not the batch; give the number of positions to bind "
              "it (setup.positions, --positions)"));
        }
        if (options_.positions > kMaxSpecDimension) {
          return absl::InvalidArgumentError(
              absl::StrCat("positions = ", options_.positions,
                           " is out of range; allowed 1..", kMaxSpecDimension));
        }
        bound_.insert(s);
        notes_.push_back(absl::StrCat(
            "symbolic dimension ",
            s[0] == '?' ? absl::StrCat("at ", in.name, " axis ", axis)
                        : absl::StrCat("'", s, "'"),
            " bound to ", options_.positions, " positions"));
      }
    }
    if (options_.positions != 0 && bound_.empty()) {
      notes_.push_back(
          absl::StrCat("positions = ", options_.positions,
                       " not used: the graph's inputs fix every length"));
    }
    ApplyBindings();
    return absl::OkStatus();
  }

  // Writes the batch (one sample) and the bound lengths into the graph's
  // declared shapes before shape inference.
  void ApplyBindings() {
    std::set<std::string> init_names;
    for (const auto& t : graph().initializer()) init_names.insert(t.name());
    auto bind = [&](onnx::ValueInfoProto* info, bool is_input) {
      if (!info->type().has_tensor_type() ||
          !info->type().tensor_type().has_shape()) {
        return;
      }
      auto* shape =
          info->mutable_type()->mutable_tensor_type()->mutable_shape();
      for (int axis = 0; axis < shape->dim_size(); ++axis) {
        auto* dim = shape->mutable_dim(axis);
        if (dim->has_dim_value()) continue;
        const std::string symbol =
            !dim->dim_param().empty()
                ? dim->dim_param()
                : (is_input ? absl::StrCat("?", info->name(), ":", axis) : "");
        if (symbol.empty()) continue;
        if (symbol == batch_symbol_) {
          dim->set_dim_value(1);
        } else if (bound_.count(symbol) != 0) {
          dim->set_dim_value(static_cast<int64_t>(options_.positions));
        }
      }
    };
    onnx::GraphProto* g = model_.mutable_graph();
    for (auto& in : *g->mutable_input()) {
      if (init_names.count(in.name()) == 0) bind(&in, true);
    }
    for (auto& out : *g->mutable_output()) bind(&out, false);
    for (auto& info : *g->mutable_value_info()) bind(&info, false);
  }

  // --- shapes and indexes --------------------------------------------------

  absl::Status Index() {
    const onnx::GraphProto& g = graph();
    const int opset = OnnxDefaultOpset(model_);
    standard_.resize(NodeCount());
    for (int i = 0; i < NodeCount(); ++i) {
      standard_[i] = IsStandardOnnxOp(N(i), opset);
    }
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

  absl::Status CheckWeights() {
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

  // --- weights and linears -------------------------------------------------

  // The weight a MatMul operand reads: an initializer, or a Transpose (or
  // Identity/Cast) of one; `transposed` when stored [out, in].
  std::optional<std::pair<std::string, bool>> WeightOf(const std::string& name,
                                                       bool transposed,
                                                       int depth = 0) const {
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

  const std::optional<LinearNode>& Linear(int i) {
    if (!linear_done_[i]) {
      linear_done_[i] = true;
      linear_cache_[i] = MakeLinear(i);
    }
    return linear_cache_[i];
  }

  std::optional<LinearNode> MakeLinear(int i) const {
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

  // The linear a node belongs to (its MatMul/Gemm or its bias Add).
  std::optional<LinearNode> LinearAt(int i) {
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

  void ConsumeLinear(const LinearNode& l) {
    consumed_[l.node] = true;
    if (l.bias_node >= 0) consumed_[l.bias_node] = true;
  }

  bool Claimed(const std::string& weight) const {
    return claimed_.count(weight) != 0;
  }
  void Claim(const std::string& weight) {
    if (!weight.empty()) claimed_.insert(weight);
  }
  // Whether another layer already counts a weight or bias of these linears.
  bool AnyClaimed(const std::vector<const LinearNode*>& parts) const {
    for (const LinearNode* l : parts) {
      if (Claimed(l->weight) || (!l->bias.empty() && Claimed(l->bias))) {
        return true;
      }
    }
    return false;
  }

  // What a group of linears holds: each distinct weight and bias once (a
  // group whose spec kind counts more is not that kind).
  uint64_t HeldParams(const std::vector<const LinearNode*>& parts) const {
    std::set<std::string> names;
    for (const LinearNode* l : parts) {
      names.insert(l->weight);
      if (!l->bias.empty()) names.insert(l->bias);
    }
    uint64_t n = 0;
    for (const std::string& name : names) n += WeightElements(name);
    return n;
  }

  // Positions of a layer whose `tensor` has `width` values per position.
  absl::StatusOr<uint64_t> Positions(int node, const std::string& tensor,
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

  // Whether `tensor` reaches a graph output (through reshapes only) or a
  // loss: the logits.
  bool IsLogits(const std::string& tensor, int depth = 0) const {
    if (graph_outputs_.count(tensor) != 0) return true;
    if (depth > 8) return false;
    for (int c : Consumers(tensor)) {
      const std::string& op = Op(c);
      if (op == "SoftmaxCrossEntropyLoss" ||
          op == "NegativeLogLikelihoodLoss" || op == "LogSoftmax") {
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

  // Marks the residual add (after an optional dropout) that sums a group's
  // output with the stream: it belongs to the group.
  void AbsorbResidual(const std::string& output) {
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

  // --- embeddings ----------------------------------------------------------

  void MatchEmbeddings() {
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

  // --- norms written out ---------------------------------------------------

  // The only consumer of `tensor`, when it is an unconsumed `op`; else -1.
  int Single(const std::string& tensor, const char* op) const {
    const std::vector<int>& next = Consumers(tensor);
    if (next.size() != 1 || consumed_[next[0]] || Op(next[0]) != op) return -1;
    return next[0];
  }

  // Whether node i's inputs other than `tensor` are constants.
  bool OthersConstant(int i, const std::string& tensor) const {
    for (const std::string& in : N(i).input()) {
      if (in != tensor && Batched(in)) return false;
    }
    return true;
  }

  // ReduceMean over the last axis only (axes attribute before opset 18,
  // an axes input from 18).
  bool ReducesLastAxis(int r) const {
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

  // From sqrt(mean + eps) to the normalized value: numerator / sqrt, or
  // numerator * (1 / sqrt) through Reciprocal or Div(1, .), then an
  // optional Cast. Returns the last node, -1 when the shape differs.
  int NormEnd(const std::string& numerator, int sqrt_node,
              std::vector<int>* nodes) const {
    const std::string& root = N(sqrt_node).output(0);
    const std::vector<int>& next = Consumers(root);
    if (next.size() != 1 || consumed_[next[0]]) return -1;
    int end = next[0];
    const onnx::NodeProto& e = N(end);
    if (Op(end) == "Div" && e.input(0) == numerator && e.input(1) == root) {
      nodes->push_back(end);
    } else if (Op(end) == "Reciprocal" ||
               (Op(end) == "Div" && e.input(1) == root &&
                !Batched(e.input(0)))) {
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

  // The scale (and shift) after a normalized value: Mul by a weight of
  // `dim` values, then Add of one. Appends the nodes; returns the weights.
  std::pair<std::string, std::string> NormAffine(int end, uint64_t dim,
                                                 std::vector<int>* nodes) {
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
      const std::string& b = N(add).input(0) == N(mul).output(0)
                                 ? N(add).input(1)
                                 : N(add).input(0);
      if (b != w && WeightElements(b) == dim && !Claimed(b)) {
        shift = b;
        nodes->push_back(add);
      }
    }
    return {scale, shift};
  }

  // mean(x^2) + eps, square root: the variance branch from `square`.
  int VarianceRoot(int square, std::vector<int>* nodes) const {
    const int r = Single(N(square).output(0), "ReduceMean");
    if (r < 0 || !ReducesLastAxis(r)) return -1;
    const int a = Single(N(r).output(0), "Add");
    if (a < 0 || !OthersConstant(a, N(r).output(0))) return -1;
    const int q = Single(N(a).output(0), "Sqrt");
    if (q < 0) return -1;
    nodes->insert(nodes->end(), {square, r, a, q});
    return q;
  }

  // x^2 as Pow(x, 2) or Mul(x, x); the squared tensor, or "".
  std::string Squared(int i) const {
    const onnx::NodeProto& n = N(i);
    if (n.input_size() != 2 || !Batched(n.input(0))) return "";
    if (Op(i) == "Pow" && !Batched(n.input(1))) return n.input(0);
    if (Op(i) == "Mul" && n.input(0) == n.input(1)) return n.input(0);
    return "";
  }

  void EmitNorm(const std::vector<int>& nodes, const std::string& x,
                v1::Norm::Kind kind, const std::string& scale,
                const std::string& shift) {
    const int64_t last = LastDim(x);
    if (last <= 0) return;
    const uint64_t dim = static_cast<uint64_t>(last);
    absl::StatusOr<uint64_t> p = Positions(nodes[0], x, dim);
    if (!p.ok()) return;
    Layer layer;
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

  // (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) [* gamma + beta].
  void MatchLayerNormOps(int mean) {
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

  // x / sqrt(mean(x^2) + eps) [* weight].
  void MatchRmsNormOps(int square) {
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

  // --- attention -----------------------------------------------------------

  // Walks back from `tensor` through plumbing to the nearest linear; the
  // nodes on the way from the linear to `tensor` go into `region`.
  std::optional<LinearNode> TraceProjection(const std::string& tensor,
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

  void MatchAttention(int softmax) {
    const std::string& probs_in = N(softmax).input(0);
    // Back to the score MatMul through scale and mask.
    std::set<int> score_path;
    int scores = -1;
    {
      std::vector<std::pair<int, int>> queue;  // node, parent index
      const int start = Producer(probs_in);
      if (start >= 0) queue.push_back({start, -1});
      std::set<int> seen;
      for (size_t q = 0; q < queue.size() && q < 32; ++q) {
        const int n = queue[q].first;
        if (!seen.insert(n).second || consumed_[n]) continue;
        if (Op(n) == "MatMul" && N(n).input_size() == 2 &&
            Batched(N(n).input(0)) && Batched(N(n).input(1)) &&
            !WeightOf(N(n).input(1), false).has_value()) {
          scores = n;
          for (int k = queue[q].second; k >= 0; k = queue[k].second) {
            score_path.insert(queue[k].first);
          }
          break;
        }
        if (!OneOf(Op(n), kScoreOps)) continue;
        for (const std::string& in : N(n).input()) {
          const int p = in.empty() ? -1 : Producer(in);
          if (p >= 0 && Batched(in)) {
            queue.push_back({p, static_cast<int>(q)});
          }
        }
      }
    }
    if (scores < 0) return NoteUnmatchedSoftmax(softmax);
    // Forward to the MatMul that applies the probabilities to V.
    std::set<int> prob_path = {softmax};
    std::string cur = N(softmax).output(0);
    int context = -1;
    for (int step = 0; step < 4; ++step) {
      const std::vector<int>& next = Consumers(cur);
      if (next.size() != 1) break;
      const int c = next[0];
      if (Op(c) == "MatMul" && N(c).input(0) == cur && Batched(N(c).input(1))) {
        context = c;
        break;
      }
      if (Op(c) != "Dropout" && Op(c) != "Cast" && Op(c) != "Identity") break;
      prob_path.insert(c);
      cur = N(c).output(0);
    }
    if (context < 0) return NoteUnmatchedSoftmax(softmax);

    // Heads and lengths from the score shape [.., heads, q, k].
    const Value* s = Find(N(scores).output(0));
    const int64_t head_dim = LastDim(N(scores).input(0));
    if (s == nullptr || !s->known || s->dims.size() < 3 || s->per_sample == 0 ||
        head_dim <= 0) {
      return NoteUnmatchedSoftmax(softmax);
    }
    const uint64_t q_len = static_cast<uint64_t>(s->dims[s->dims.size() - 2]);
    const uint64_t k_len = static_cast<uint64_t>(s->dims.back());
    if (q_len == 0 || k_len == 0 || s->per_sample % (q_len * k_len) != 0) {
      return NoteUnmatchedSoftmax(softmax);
    }
    const uint64_t heads = s->per_sample / (q_len * k_len);
    const uint64_t hd = static_cast<uint64_t>(head_dim);

    std::set<int> region;
    const std::optional<LinearNode> pq =
        TraceProjection(N(scores).input(0), &region);
    const std::optional<LinearNode> pk =
        TraceProjection(N(scores).input(1), &region);
    const std::optional<LinearNode> pv =
        TraceProjection(N(context).input(1), &region);
    if (!pq.has_value() || !pk.has_value() || !pv.has_value()) {
      return NoteUnmatchedSoftmax(softmax);
    }
    // Forward from the context to the output projection.
    std::set<int> out_path;
    std::optional<LinearNode> po;
    cur = N(context).output(0);
    for (int step = 0; step < 8 && !po.has_value(); ++step) {
      const std::vector<int>& next = Consumers(cur);
      if (next.size() != 1) break;
      const int c = next[0];
      if (Linear(c).has_value() && Linear(c)->input == cur) {
        po = Linear(c);
        break;
      }
      const std::string& op = Op(c);
      if (op != "Transpose" && op != "Reshape" && op != "Identity" &&
          op != "Cast" && op != "Flatten") {
        break;
      }
      out_path.insert(c);
      cur = N(c).output(0);
    }
    if (!po.has_value() || Claimed(po->weight)) {
      return NoteUnmatchedSoftmax(softmax);
    }

    // Q, K, V widths, from separate or fused projections.
    uint64_t kv_heads = 0;
    const bool fused_qkv = pq->node == pk->node && pk->node == pv->node;
    const bool fused_kv = !fused_qkv && pk->node == pv->node;
    if (fused_qkv) {
      if (pq->out <= heads * hd || (pq->out - heads * hd) % (2 * hd) != 0) {
        return NoteUnmatchedSoftmax(softmax);
      }
      kv_heads = (pq->out - heads * hd) / (2 * hd);
    } else {
      if (pq->out != heads * hd || pq->node == pk->node ||
          pq->node == pv->node) {
        return NoteUnmatchedSoftmax(softmax);
      }
      if (fused_kv) {
        if (pk->out % (2 * hd) != 0) return NoteUnmatchedSoftmax(softmax);
        kv_heads = pk->out / (2 * hd);
      } else {
        if (pk->out % hd != 0 || pv->out != pk->out) {
          return NoteUnmatchedSoftmax(softmax);
        }
        kv_heads = pk->out / hd;
      }
    }
    if (kv_heads == 0 || heads % kv_heads != 0) {
      return NoteUnmatchedSoftmax(softmax);
    }
    Layer layer;
    layer.set_name(GroupName(NodeName(pq->node), NodeName(po->node)));
    layer.set_positions(q_len);
    v1::Attention* a = layer.mutable_attention();
    a->set_hidden(po->out);
    a->set_heads(heads);
    if (kv_heads != heads) a->set_kv_heads(kv_heads);
    if (po->out % heads != 0 || po->out / heads != hd) a->set_head_dim(hd);
    if (pk->in != po->out) a->set_kv_input_dim(pk->in);
    if (k_len != q_len) a->set_kv_positions(k_len);
    a->set_qkv_bias(!pq->bias.empty());
    a->set_out_bias(!po->bias.empty());
    // The spec's attention must hold exactly the projections' parameters
    // (one bias setting for Q, K and V, the query width equal to the
    // output's): otherwise the graph is something else.
    const std::vector<const LinearNode*> parts = {&*pq, &*pk, &*pv, &*po};
    const uint64_t graph_params = HeldParams(parts);
    const bool same_bias = pq->bias.empty() == pk->bias.empty() &&
                           pk->bias.empty() == pv->bias.empty();
    if (!same_bias || pq->in != po->out || AnyClaimed(parts) ||
        CountLayerParams(layer) != graph_params) {
      return NoteUnmatchedSoftmax(softmax);
    }
    for (const LinearNode* l : parts) {
      ConsumeLinear(*l);
      Claim(l->weight);
      Claim(l->bias);
    }
    for (const std::set<int>* nodes :
         {&region, &score_path, &prob_path, &out_path}) {
      for (int n : *nodes) consumed_[n] = true;
    }
    consumed_[scores] = true;
    consumed_[context] = true;
    AbsorbResidual(po->output);
    groups_.push_back(
        {std::min(pq->node, std::min(pk->node, pv->node)), std::move(layer)});
    ++attention_layers_;
  }

  void NoteUnmatchedSoftmax(int softmax) {
    unmatched_softmax_.push_back(softmax);
  }

  // --- MLPs ----------------------------------------------------------------

  void MatchMlp(int up_node) {
    const LinearNode up = *Linear(up_node);
    if (Claimed(up.weight)) return;
    const uint64_t d = up.in;
    const uint64_t f = up.out;
    std::set<int> region;
    std::set<std::string> reached = {up.output};
    std::optional<LinearNode> down;
    std::optional<LinearNode> gate;
    std::vector<std::string> frontier = {up.output};
    while (!frontier.empty()) {
      const std::string t = frontier.back();
      frontier.pop_back();
      if (graph_outputs_.count(t) != 0) return;
      for (int c : Consumers(t)) {
        if (consumed_[c] || region.count(c) != 0) continue;
        if (Linear(c).has_value() && Linear(c)->input == t) {
          const LinearNode& l = *Linear(c);
          if (t == up.output || l.in != f || l.out != d ||
              (down.has_value() && down->node != c)) {
            return;
          }
          down = l;
          continue;
        }
        if (!OneOf(Op(c), kMlpOps)) return;
        if (static_cast<int>(region.size()) >= kMaxWalk / 2) return;
        region.insert(c);
        for (const std::string& out : N(c).output()) {
          if (out.empty()) continue;
          reached.insert(out);
          frontier.push_back(out);
        }
      }
    }
    if (!down.has_value() || region.empty()) return;
    // Every batch-dependent input of the region comes from the up
    // projection, the region itself, or a gate projection of the same input.
    for (int n : region) {
      for (const std::string& in : N(n).input()) {
        if (in.empty() || reached.count(in) != 0 || !Batched(in)) continue;
        const int p = Producer(in);
        const std::optional<LinearNode> g = p >= 0 ? LinearAt(p) : std::nullopt;
        if (!g.has_value() || g->output != in || g->input != up.input ||
            g->out != f || consumed_[g->node] || Claimed(g->weight) ||
            (gate.has_value() && gate->node != g->node)) {
          return;
        }
        gate = g;
      }
    }
    if (gate.has_value()) {
      // The gate's output feeds only the region.
      for (int c : Consumers(gate->output)) {
        if (region.count(c) == 0) return;
      }
    }
    const bool bias = !up.bias.empty();
    if (bias != !down->bias.empty() ||
        (gate.has_value() && bias != !gate->bias.empty()) ||
        Claimed(down->weight)) {
      return;
    }
    absl::StatusOr<uint64_t> positions = Positions(up_node, up.output, f);
    if (!positions.ok()) return;
    Layer layer;
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

  // --- single nodes --------------------------------------------------------

  absl::Status MapNode(int i) {
    const onnx::NodeProto& n = N(i);
    const std::string& op = Op(i);
    Layer layer;
    layer.set_name(NodeName(i));
    if (embeddings_.count(i) != 0) {
      const onnx::TensorProto& table = *Initializer(n.input(0));
      const uint64_t dim = static_cast<uint64_t>(table.dims(1));
      ASSIGN_OR_RETURN(const uint64_t p, Positions(i, n.output(0), dim));
      layer.set_positions(p);
      layer.mutable_embedding()->set_num_embeddings(
          static_cast<uint64_t>(table.dims(0)));
      layer.mutable_embedding()->set_dim(dim);
      return Emit(i, std::move(layer));
    }
    if (const std::optional<LinearNode> l = LinearAt(i)) {
      ConsumeLinear(*l);
      absl::StatusOr<uint64_t> p = Positions(i, l->output, l->out);
      if (!p.ok()) p = Positions(i, l->input, l->in);
      if (!p.ok()) return p.status();
      layer.set_positions(*p);
      v1::Linear* linear = layer.mutable_linear();
      linear->set_in_features(l->in);
      linear->set_out_features(l->out);
      linear->set_bias(!l->bias.empty() && !Claimed(l->bias));
      linear->set_tied(Claimed(l->weight));
      linear->set_logits(IsLogits(l->output));
      if (!l->bias.empty() && Claimed(l->bias)) {
        notes_.push_back(absl::StrCat(NodeLabel(i),
                                      " adds a bias another "
                                      "layer already counts"));
      }
      if (linear->logits() && !linear->tied()) {
        for (int e : embeddings_) {
          const onnx::TensorProto& table = *Initializer(N(e).input(0));
          if (static_cast<uint64_t>(table.dims(0)) == l->out &&
              static_cast<uint64_t>(table.dims(1)) == l->in) {
            notes_.push_back(absl::StrCat(
                NodeLabel(i), " has its own ", l->out, "x", l->in,
                " weight, the shape of the embedding table: if the model ties "
                "them, the exporter folded the tie away (export with "
                "do_constant_folding=False) and the table counts twice"));
            break;
          }
        }
      }
      Claim(l->weight);
      Claim(l->bias);
      return Emit(i, std::move(layer));
    }
    if ((op == "Conv" || op == "ConvTranspose") && n.input_size() >= 2 &&
        IsWeight(n.input(1)) && Initializer(n.input(1))->dims_size() >= 3 &&
        Initializer(n.input(1))->dims_size() <= 5) {
      const onnx::TensorProto& w = *Initializer(n.input(1));
      const bool transposed = op == "ConvTranspose";
      const uint64_t groups =
          static_cast<uint64_t>(std::max<int64_t>(1, IntAttr(i, "group", 1)));
      const uint64_t out_channels =
          static_cast<uint64_t>(w.dims(1)) * (transposed ? groups : 1);
      const uint64_t in_channels =
          transposed ? static_cast<uint64_t>(w.dims(0))
                     : static_cast<uint64_t>(w.dims(1)) * groups;
      const uint64_t out_ch =
          transposed ? out_channels : static_cast<uint64_t>(w.dims(0));
      const bool bias = n.input_size() >= 3 && IsWeight(n.input(2));
      if (Claimed(n.input(1)) || (bias && Claimed(n.input(2)))) {
        return EmitShared(i);
      }
      ASSIGN_OR_RETURN(const uint64_t p, Positions(i, n.output(0), out_ch));
      ASSIGN_OR_RETURN(const uint64_t in_p,
                       Positions(i, n.input(0), in_channels));
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
    if (op == "LayerNormalization" || op == "BatchNormalization" ||
        op == "InstanceNormalization") {
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
    if ((op == "LSTM" || op == "GRU" || op == "RNN") && n.input_size() >= 3 &&
        IsWeight(n.input(1)) && IsWeight(n.input(2)) &&
        Initializer(n.input(1))->dims_size() == 3) {
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
    return MapElementwise(i);
  }

  absl::Status Emit(int i, Layer layer) {
    groups_.push_back({i, std::move(layer)});
    return absl::OkStatus();
  }

  // Emits a layer that owns `weights`, when the spec's count for its kind
  // equals what they hold; otherwise the node's output only (its weights
  // become Parameters layers).
  absl::Status EmitWeighted(int i, Layer layer,
                            const std::vector<std::string>& weights) {
    const std::set<std::string> distinct(weights.begin(), weights.end());
    uint64_t held = 0;
    for (const std::string& w : distinct) held += WeightElements(w);
    if (CountLayerParams(layer) != held) return EmitShared(i);
    for (const std::string& w : weights) Claim(w);
    return Emit(i, std::move(layer));
  }

  // A weighted node whose weights another layer already counts (or whose
  // weights do not fit the spec's kind): its output only.
  absl::Status EmitShared(int i) {
    notes_.push_back(absl::StrCat(
        NodeLabel(i),
        " reads weights another layer counts, or of a layout the spec does "
        "not describe: its output is counted, its weights are parameters"));
    return EmitValue(i, v1::Elementwise::ADD);
  }

  absl::Status EmitValue(int i, v1::Elementwise::Op op) {
    const std::string& out = N(i).output(0);
    if (!Batched(out)) return absl::OkStatus();
    const uint64_t per_sample = PerSample(out);
    if (per_sample == 0) {
      unknown_shape_ops_.insert(Op(i));
      return absl::OkStatus();
    }
    const int64_t last = LastDim(out);
    const uint64_t dim =
        last > 0 && per_sample % static_cast<uint64_t>(last) == 0
            ? static_cast<uint64_t>(last)
            : per_sample;
    Layer layer;
    layer.set_name(NodeName(i));
    layer.set_positions(per_sample / dim);
    layer.mutable_elementwise()->set_op(op);
    layer.mutable_elementwise()->set_dim(dim);
    return Emit(i, std::move(layer));
  }

  absl::Status MapElementwise(int i) {
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

  void AddUnclaimedWeights() {
    for (const std::string& w : weight_order_) {
      if (Claimed(w)) continue;
      const std::vector<int>& users = Consumers(w);
      int anchor = users.empty() ? 0 : users[0];
      Layer layer;
      layer.set_name(w);
      layer.mutable_parameters()->set_count(WeightElements(w));
      groups_.push_back({anchor, std::move(layer)});
      Claim(w);
    }
  }

  // --- the spec ------------------------------------------------------------

  absl::StatusOr<OnnxConversion> Assemble() {
    std::stable_sort(
        groups_.begin(), groups_.end(),
        [](const Group& a, const Group& b) { return a.anchor < b.anchor; });
    OnnxConversion out;
    v1::ModelSpec& spec = out.spec;
    spec.set_name(SpecName());
    bool conv = false;
    bool recurrent = false;
    std::map<uint64_t, int> positions_count;
    for (const Group& g : groups_) {
      if (g.layer.has_conv()) conv = true;
      if (g.layer.has_recurrent()) recurrent = true;
      if (g.layer.positions() != 0) ++positions_count[g.layer.positions()];
    }
    spec.set_family(attention_layers_ > 0 ? "transformer"
                    : recurrent           ? "recurrent"
                    : conv                ? "conv"
                                          : "other");
    uint64_t positions = 0;
    int best = 0;
    for (const auto& [p, count] : positions_count) {
      if (count >= best) {
        best = count;
        positions = p;
      }
    }
    spec.set_positions(positions);
    std::vector<Layer> layers;
    layers.reserve(groups_.size());
    for (Group& g : groups_) {
      if (g.layer.positions() == positions) g.layer.set_positions(0);
      layers.push_back(std::move(g.layer));
    }
    for (Layer& layer : CompressRepeats(std::move(layers))) {
      *spec.add_layers() = std::move(layer);
    }
    if (spec.layers().empty()) {
      return absl::InvalidArgumentError(
          "graph has no weights and no per-sample activations: nothing for "
          "the memory model to count");
    }
    std::string opset = "?";
    for (const auto& o : model_.opset_import()) {
      if (o.domain().empty() || o.domain() == "ai.onnx") {
        opset = absl::StrCat(o.version());
      }
    }
    spec.set_source(absl::StrCat(
        "ONNX graph '", graph().name(), "' (IR version ", model_.ir_version(),
        ", opset ", opset,
        model_.producer_name().empty()
            ? std::string()
            : absl::StrCat(", from ", model_.producer_name(),
                           model_.producer_version().empty() ? "" : " ",
                           model_.producer_version()),
        "), ", NodeCount(),
        " nodes, mapped to layers by headroom's ONNX "
        "front-end."));
    spec.set_input_source(absl::StrCat(
        "graph inputs ", absl::StrJoin(input_text_, ", "), "; ", batch_axis_));

    // The spec's notes; the conversion's notes lead with the batch axis,
    // which the spec keeps in input_source.
    std::vector<std::string> notes = std::move(notes_);
    if (!unmatched_softmax_.empty()) {
      std::vector<std::string> names;
      for (int s : unmatched_softmax_) names.push_back(NodeLabel(s));
      if (names.size() > 3) names.resize(3);
      notes.push_back(absl::StrCat(
          unmatched_softmax_.size(),
          " Softmax nodes are not fed by a recognizable attention (a "
          "MatMul of linear Q and K projections, then a MatMul with V and "
          "an output projection) and count as element-wise softmax: ",
          absl::StrJoin(names, ", ")));
    }
    if (activation_matmuls_ > 0) {
      notes.push_back(absl::StrCat(
          activation_matmuls_,
          " MatMul nodes multiply two activations outside attention; their "
          "outputs are not counted"));
    }
    if (!unknown_shape_ops_.empty()) {
      notes.push_back(
          absl::StrCat("outputs of ", absl::StrJoin(unknown_shape_ops_, ", "),
                       " nodes have no inferred shape and add nothing"));
    }
    if (!foreign_ops_.empty()) {
      notes.push_back(absl::StrCat(
          "operators the importer does not know are not analysed: ",
          absl::StrJoin(foreign_ops_, ", ")));
    }
    spec.set_notes(absl::StrJoin(notes, "; "));
    notes.insert(notes.begin(), batch_axis_);

    const absl::Status valid = ValidateSpec(spec);
    if (!valid.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the graph converts to a spec the planner cannot use: ",
                       valid.message()));
    }
    if (static_cast<double>(CountParams(spec)) != total_params_) {
      return absl::InternalError(absl::StrCat(
          "ONNX import counted ", CountParams(spec),
          " parameters in layers but the initializers hold ", total_params_));
    }
    out.batch_axis = batch_axis_;
    out.notes = std::move(notes);
    return out;
  }

  std::string SpecName() const {
    std::string raw = !options_.name.empty()    ? options_.name
                      : !graph().name().empty() ? graph().name()
                                                : "onnx-model";
    std::string name;
    for (char c : raw) {
      const char l = static_cast<char>(std::tolower(c));
      if (std::isalnum(static_cast<unsigned char>(l))) {
        name.push_back(l);
      } else if (!name.empty() && name.back() != '-') {
        name.push_back('-');
      }
    }
    while (!name.empty() && name.back() == '-') name.pop_back();
    return name.empty() ? "onnx-model" : name;
  }

  // Runs of identical layers (or identical sequences of layers) become one
  // block with `repeat`: the stack of a transformer, as the catalog writes
  // it. Names do not take part in the comparison.
  static std::vector<Layer> CompressRepeats(std::vector<Layer> layers) {
    const size_t n = layers.size();
    if (n < 2 || n > 20000) return layers;
    std::vector<std::string> keys(n);
    for (size_t i = 0; i < n; ++i) {
      Layer copy = layers[i];
      copy.clear_name();
      keys[i] = copy.SerializeAsString();
    }
    auto same = [&](size_t a, size_t b, size_t len) {
      for (size_t k = 0; k < len; ++k) {
        if (keys[a + k] != keys[b + k]) return false;
      }
      return true;
    };
    std::vector<Layer> out;
    size_t i = 0;
    while (i < n) {
      size_t best_len = 0;
      size_t best_repeat = 1;
      for (size_t len = 1; len <= 64 && i + 2 * len <= n; ++len) {
        size_t repeat = 1;
        while (i + (repeat + 1) * len <= n && same(i, i + repeat * len, len)) {
          ++repeat;
        }
        if (repeat >= 2 && len * repeat > best_len * best_repeat) {
          best_len = len;
          best_repeat = repeat;
        }
      }
      if (best_len == 0 || best_repeat > 100000) {
        out.push_back(std::move(layers[i]));
        ++i;
        continue;
      }
      Layer block;
      std::vector<std::string> names;
      for (size_t k = 0; k < best_len; ++k)
        names.push_back(layers[i + k].name());
      std::string name = CommonPrefix(names);
      while (!name.empty() &&
             (std::isdigit(static_cast<unsigned char>(name.back())) ||
              name.back() == '.' || name.back() == '/' || name.back() == '_')) {
        name.pop_back();
      }
      block.set_name(name.empty() ? "block" : name);
      block.set_repeat(static_cast<uint32_t>(best_repeat));
      for (size_t k = 0; k < best_len; ++k) {
        *block.mutable_block()->add_layers() = std::move(layers[i + k]);
      }
      out.push_back(std::move(block));
      i += best_len * best_repeat;
    }
    return out;
  }

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

absl::StatusOr<onnx::ModelProto> ParseModel(absl::string_view bytes) {
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        "ONNX model is empty; expected a serialized ONNX ModelProto");
  }
  if (bytes.size() > kMaxOnnxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ONNX model is ", bytes.size(), " bytes; allowed up to ", kMaxOnnxBytes,
        " (the planner reads shapes only: send the graph without its "
        "weights, as `headroom` does, or exported with external data)"));
  }
  onnx::ModelProto model;
  if (!model.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::InvalidArgumentError(
        "not an ONNX model: the bytes do not parse as an ONNX ModelProto "
        "(truncated, or another format)");
  }
  if (model.ir_version() < 1 || model.ir_version() > 100 ||
      !model.has_graph() || model.graph().node_size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("not an ONNX model: ",
                     model.ir_version() < 1 || model.ir_version() > 100
                         ? absl::StrCat("ir_version ", model.ir_version(),
                                        " is out of range (ONNX uses 1..10)")
                         : std::string("it has no graph with nodes"),
                     " (truncated, or another format)"));
  }
  bool default_opset = false;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") default_opset = true;
  }
  if (!default_opset) {
    return absl::InvalidArgumentError(
        "ONNX model imports no opset of the default domain (opset_import "
        "with domain \"\"); the planner reads standard ONNX operators");
  }
  if (model.graph().node_size() > kMaxOnnxNodes) {
    return absl::InvalidArgumentError(
        absl::StrCat("ONNX graph has ", model.graph().node_size(),
                     " nodes; allowed up to ", kMaxOnnxNodes));
  }
  return model;
}

}  // namespace

absl::StatusOr<OnnxConversion> SpecFromOnnx(absl::string_view model_bytes,
                                            const OnnxOptions& options) {
  ASSIGN_OR_RETURN(onnx::ModelProto model, ParseModel(model_bytes));
  Importer importer(std::move(model), options);
  return importer.Run();
}

}  // namespace headroom
