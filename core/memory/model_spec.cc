#include "core/memory/model_spec.h"

#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "base/status_macros.h"

namespace headroom {
namespace {

using v1::Layer;

absl::Status CheckSize(uint64_t value, const std::string& field,
                       bool required) {
  if (value == 0 && !required) return absl::OkStatus();
  if (value == 0 || value > kMaxSpecDimension) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", value, " is out of range; allowed 1..",
                     kMaxSpecDimension));
  }
  return absl::OkStatus();
}

uint64_t HeadDim(const v1::Attention& a) {
  return a.head_dim() != 0 ? a.head_dim() : a.hidden() / a.heads();
}

uint64_t KvHeads(const v1::Attention& a) {
  return a.kv_heads() != 0 ? a.kv_heads() : a.heads();
}

// "Linear", "Embedding", "Conv", ... : the layer's kind as the spec's JSON
// names it, capitalized.
std::string KindName(const Layer& layer) {
  const auto* field = Layer::descriptor()->FindFieldByNumber(
      static_cast<int>(layer.kind_case()));
  if (field == nullptr) return "no kind";
  std::string name = field->name();
  if (!name.empty()) name[0] = absl::ascii_toupper(name[0]);
  return name;
}

// The sums and products of a parameter count, checked: a result that does
// not fit 64 bits saturates, and the first such is kept with its operands
// and the layer being counted, for ValidateSpec's error.
class ParamCounter {
 public:
  uint64_t Mul(uint64_t a, uint64_t b) {
    uint64_t n;
    if (!__builtin_mul_overflow(a, b, &n)) return n;
    Overflow(absl::StrCat(a, " x ", b));
    return UINT64_MAX;
  }
  uint64_t Add(uint64_t a, uint64_t b) {
    uint64_t n;
    if (!__builtin_add_overflow(a, b, &n)) return n;
    Overflow(absl::StrCat(a, " + ", b));
    return UINT64_MAX;
  }
  // Makes `layer` the one counted; returns the one counted before.
  const Layer* Enter(const Layer* layer) {
    const Layer* outer = layer_;
    layer_ = layer;
    return outer;
  }
  void Leave(const Layer* outer) { layer_ = outer; }

  bool overflowed() const { return !what_.empty(); }
  // "layer 'fc1' (Linear): 4294967296 x 4294967296"
  const std::string& what() const { return what_; }

 private:
  void Overflow(const std::string& product) {
    if (overflowed()) return;
    what_ = layer_ == nullptr ? product
                              : absl::StrCat("layer '", layer_->name(), "' (",
                                             KindName(*layer_), "): ", product);
  }

  const Layer* layer_ = nullptr;
  std::string what_;
};

uint64_t MlpParams(uint64_t hidden, uint64_t ffn, bool gated, bool bias,
                   ParamCounter& c) {
  uint64_t n = c.Mul(c.Mul(gated ? 3 : 2, hidden), ffn);
  if (bias) n = c.Add(n, c.Add(c.Mul(gated ? 2 : 1, ffn), hidden));
  return n;
}

uint64_t KernelVolume(const v1::Conv& c, ParamCounter& count) {
  const uint32_t dims = c.dims() == 0 ? 2 : c.dims();
  uint64_t volume = 1;
  if (c.kernel_size() == 1) {
    for (uint32_t i = 0; i < dims; ++i) volume = count.Mul(volume, c.kernel(0));
  } else {
    for (uint64_t k : c.kernel()) volume = count.Mul(volume, k);
  }
  return volume;
}

uint64_t RecurrentParams(const v1::Recurrent& r, ParamCounter& c) {
  const uint64_t gates = r.cell() == v1::Recurrent::LSTM  ? 4
                         : r.cell() == v1::Recurrent::GRU ? 3
                                                          : 1;
  const uint64_t dirs = r.bidirectional() ? 2 : 1;
  const uint32_t layers = r.num_layers() == 0 ? 1 : r.num_layers();
  const uint64_t h = r.hidden();
  uint64_t n = 0;
  for (uint32_t l = 0; l < layers; ++l) {
    const uint64_t in = l == 0 ? r.input_size() : c.Mul(h, dirs);
    const uint64_t weights = c.Mul(c.Mul(gates, h), c.Add(in, h));
    const uint64_t biases = r.no_bias() ? 0 : c.Mul(2 * gates, h);
    n = c.Add(n, c.Mul(dirs, c.Add(weights, biases)));
  }
  return n;
}

uint64_t LayerParams(const Layer& layer, ParamCounter& c);

uint64_t SingleLayerParams(const Layer& layer, ParamCounter& c) {
  switch (layer.kind_case()) {
    case Layer::kEmbedding:
      return c.Mul(layer.embedding().num_embeddings(), layer.embedding().dim());
    case Layer::kLinear: {
      const auto& l = layer.linear();
      return c.Add(l.tied() ? 0 : c.Mul(l.in_features(), l.out_features()),
                   l.bias() ? l.out_features() : 0);
    }
    case Layer::kNorm: {
      const auto& n = layer.norm();
      if (n.no_affine()) return 0;
      if (n.kind() == v1::Norm::RMS) return n.dim();
      if (n.kind() == v1::Norm::LAYER && n.no_bias()) return n.dim();
      return c.Mul(2, n.dim());
    }
    case Layer::kAttention: {
      const auto& a = layer.attention();
      const uint64_t hd = HeadDim(a);
      const uint64_t kvh = KvHeads(a);
      const uint64_t kin =
          a.kv_input_dim() != 0 ? a.kv_input_dim() : a.hidden();
      const uint64_t q_width = c.Mul(a.heads(), hd);
      const uint64_t kv_width = c.Mul(kvh, hd);
      // q and o: hidden x heads x head_dim each; k and v: kin x kv width.
      uint64_t n = c.Add(c.Mul(2, c.Mul(a.hidden(), q_width)),
                         c.Mul(2, c.Mul(kin, kv_width)));
      if (a.qkv_bias()) n = c.Add(n, c.Add(q_width, c.Mul(2, kv_width)));
      if (a.out_bias()) n = c.Add(n, a.hidden());
      if (a.qk_norm()) n = c.Add(n, c.Mul(2, hd));
      return n;
    }
    case Layer::kMlp: {
      const auto& m = layer.mlp();
      return MlpParams(m.hidden(), m.ffn(), m.gated(), m.bias(), c);
    }
    case Layer::kMoe: {
      const auto& m = layer.moe();
      const uint64_t experts =
          c.Mul(c.Add(m.experts(), m.shared_experts()),
                MlpParams(m.hidden(), m.ffn(), m.gated(), false, c));
      const uint64_t router = c.Add(c.Mul(m.hidden(), m.experts()),
                                    m.router_bias() ? m.experts() : 0);
      return c.Add(experts, router);
    }
    case Layer::kConv: {
      const auto& conv = layer.conv();
      const uint64_t g = conv.groups() == 0 ? 1 : conv.groups();
      const uint64_t k = KernelVolume(conv, c);
      const uint64_t w =
          conv.transposed()
              ? c.Mul(c.Mul(conv.in_channels(), conv.out_channels() / g), k)
              : c.Mul(c.Mul(conv.out_channels(), conv.in_channels() / g), k);
      return c.Add(w, conv.bias() ? conv.out_channels() : 0);
    }
    case Layer::kRecurrent:
      return RecurrentParams(layer.recurrent(), c);
    case Layer::kElementwise:
      return 0;
    case Layer::kParameters:
      return layer.parameters().count();
    case Layer::kBlock: {
      uint64_t n = 0;
      for (const Layer& child : layer.block().layers()) {
        n = c.Add(n, LayerParams(child, c));
      }
      return n;
    }
    case Layer::KIND_NOT_SET:
      return 0;
  }
  return 0;
}

// Parameters of one layer, repeat included, counted by `c`.
uint64_t LayerParams(const Layer& layer, ParamCounter& c) {
  const Layer* outer = c.Enter(&layer);
  const uint64_t single = SingleLayerParams(layer, c);
  const uint64_t n = c.Mul(layer.repeat() == 0 ? 1 : layer.repeat(), single);
  c.Leave(outer);
  return n;
}

// Each kind's fields: INVALID_ARGUMENT naming the field under `path` and
// the allowed values (ValidateLayer picks by kind).
absl::Status ValidateNorm(const Layer& layer, const std::string& path) {
  if (layer.norm().kind() == v1::Norm::KIND_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".norm.kind is not set; allowed LAYER, RMS, BATCH, GROUP"));
  }
  if (!v1::Norm::Kind_IsValid(layer.norm().kind())) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".norm.kind = ", layer.norm().kind(),
                     " is not known; allowed LAYER, RMS, BATCH, GROUP"));
  }
  return CheckSize(layer.norm().dim(), path + ".norm.dim", true);
}

absl::Status ValidateElementwise(const Layer& layer, const std::string& path) {
  if (layer.elementwise().op() == v1::Elementwise::OP_UNSPECIFIED) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ".elementwise.op is not set; allowed ACTIVATION, POOL, DROPOUT, "
        "ADD, CONCAT, SOFTMAX"));
  }
  if (!v1::Elementwise::Op_IsValid(layer.elementwise().op())) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".elementwise.op = ", layer.elementwise().op(),
        " is not known; allowed ACTIVATION, POOL, DROPOUT, ADD, CONCAT, "
        "SOFTMAX"));
  }
  return CheckSize(layer.elementwise().dim(), path + ".elementwise.dim", true);
}

absl::Status ValidateAttention(const Layer& layer, const std::string& path) {
  const auto& a = layer.attention();
  const std::string p = path + ".attention";
  RETURN_IF_ERROR(CheckSize(a.hidden(), p + ".hidden", true));
  RETURN_IF_ERROR(CheckSize(a.heads(), p + ".heads", true));
  RETURN_IF_ERROR(CheckSize(a.kv_heads(), p + ".kv_heads", false));
  RETURN_IF_ERROR(CheckSize(a.head_dim(), p + ".head_dim", false));
  RETURN_IF_ERROR(CheckSize(a.kv_input_dim(), p + ".kv_input_dim", false));
  RETURN_IF_ERROR(CheckSize(a.kv_positions(), p + ".kv_positions", false));
  RETURN_IF_ERROR(CheckSize(a.window(), p + ".window", false));
  if (a.head_dim() == 0 && a.hidden() % a.heads() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ".heads = ", a.heads(), " does not divide hidden = ", a.hidden(),
        "; set head_dim or use a divisor of hidden"));
  }
  if (KvHeads(a) > a.heads() || a.heads() % KvHeads(a) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ".kv_heads = ", a.kv_heads(), " must divide heads = ", a.heads()));
  }
  return absl::OkStatus();
}

absl::Status ValidateMoe(const Layer& layer, const std::string& path) {
  const auto& m = layer.moe();
  const std::string p = path + ".moe";
  RETURN_IF_ERROR(CheckSize(m.hidden(), p + ".hidden", true));
  RETURN_IF_ERROR(CheckSize(m.ffn(), p + ".ffn", true));
  RETURN_IF_ERROR(CheckSize(m.experts(), p + ".experts", true));
  RETURN_IF_ERROR(CheckSize(m.top_k(), p + ".top_k", true));
  if (m.top_k() > m.experts()) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ".top_k = ", m.top_k(), " is out of range; allowed 1..",
                     m.experts(), " (experts)"));
  }
  return CheckSize(m.shared_experts(), p + ".shared_experts", false);
}

absl::Status ValidateConv(const Layer& layer, const std::string& path) {
  const auto& c = layer.conv();
  const std::string p = path + ".conv";
  RETURN_IF_ERROR(CheckSize(c.in_channels(), p + ".in_channels", true));
  RETURN_IF_ERROR(CheckSize(c.out_channels(), p + ".out_channels", true));
  RETURN_IF_ERROR(CheckSize(c.groups(), p + ".groups", false));
  RETURN_IF_ERROR(CheckSize(c.in_positions(), p + ".in_positions", false));
  if (c.dims() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ".dims = ", c.dims(), " is out of range; allowed 0 (=2), 1, 2, 3"));
  }
  const uint32_t dims = c.dims() == 0 ? 2 : c.dims();
  if (c.kernel_size() != 1 && c.kernel_size() != static_cast<int>(dims)) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ".kernel has ", c.kernel_size(),
                     " values; allowed 1 or ", dims, " (dims)"));
  }
  for (int i = 0; i < c.kernel_size(); ++i) {
    RETURN_IF_ERROR(
        CheckSize(c.kernel(i), absl::StrCat(p, ".kernel[", i, "]"), true));
  }
  const uint64_t g = c.groups() == 0 ? 1 : c.groups();
  if (c.in_channels() % g != 0 || c.out_channels() % g != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ".groups = ", g, " must divide in_channels and out_channels"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRecurrent(const Layer& layer, const std::string& path) {
  const auto& r = layer.recurrent();
  const std::string p = path + ".recurrent";
  if (r.cell() == v1::Recurrent::CELL_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ".cell is not set; allowed RNN, LSTM, GRU"));
  }
  if (!v1::Recurrent::Cell_IsValid(r.cell())) {
    return absl::InvalidArgumentError(absl::StrCat(
        p, ".cell = ", r.cell(), " is not known; allowed RNN, LSTM, GRU"));
  }
  RETURN_IF_ERROR(CheckSize(r.input_size(), p + ".input_size", true));
  RETURN_IF_ERROR(CheckSize(r.hidden(), p + ".hidden", true));
  if (r.num_layers() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat(p, ".num_layers = ", r.num_layers(),
                     " is out of range; allowed 0..1000"));
  }
  return absl::OkStatus();
}

absl::Status ValidateLayer(const Layer& layer, const std::string& path,
                           uint64_t inherited_positions, int depth);

// A block's nesting and each of its layers, which inherit `positions`.
absl::Status ValidateBlock(const Layer& layer, const std::string& path,
                           uint64_t positions, int depth) {
  if (depth >= kMaxBlockDepth) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".block nests deeper than ", kMaxBlockDepth, " levels"));
  }
  if (layer.block().layers().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ".block.layers is empty; a block needs at least one layer"));
  }
  for (int i = 0; i < layer.block().layers_size(); ++i) {
    RETURN_IF_ERROR(ValidateLayer(layer.block().layers(i),
                                  absl::StrCat(path, ".block.layers[", i, "]"),
                                  positions, depth + 1));
  }
  return absl::OkStatus();
}

absl::Status ValidateLayer(const Layer& layer, const std::string& path,
                           uint64_t inherited_positions, int depth) {
  if (layer.repeat() > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ".repeat = ", layer.repeat(),
                     " is out of range; allowed 0..100000"));
  }
  RETURN_IF_ERROR(CheckSize(layer.positions(), path + ".positions", false));
  const uint64_t positions =
      layer.positions() != 0 ? layer.positions() : inherited_positions;
  const bool needs_positions = layer.kind_case() != Layer::kParameters &&
                               layer.kind_case() != Layer::kBlock;
  if (needs_positions && positions == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ".positions is not set and the spec has no default positions; "
        "allowed 1..",
        kMaxSpecDimension));
  }
  switch (layer.kind_case()) {
    case Layer::KIND_NOT_SET:
      return absl::InvalidArgumentError(absl::StrCat(
          path,
          " has no kind; allowed: embedding, linear, norm, attention, mlp, "
          "moe, conv, recurrent, elementwise, parameters, block"));
    case Layer::kEmbedding:
      RETURN_IF_ERROR(CheckSize(layer.embedding().num_embeddings(),
                                path + ".embedding.num_embeddings", true));
      RETURN_IF_ERROR(
          CheckSize(layer.embedding().dim(), path + ".embedding.dim", true));
      return CheckSize(layer.embedding().lookups(), path + ".embedding.lookups",
                       false);
    case Layer::kLinear:
      RETURN_IF_ERROR(CheckSize(layer.linear().in_features(),
                                path + ".linear.in_features", true));
      return CheckSize(layer.linear().out_features(),
                       path + ".linear.out_features", true);
    case Layer::kNorm:
      return ValidateNorm(layer, path);
    case Layer::kAttention:
      return ValidateAttention(layer, path);
    case Layer::kMlp:
      RETURN_IF_ERROR(
          CheckSize(layer.mlp().hidden(), path + ".mlp.hidden", true));
      return CheckSize(layer.mlp().ffn(), path + ".mlp.ffn", true);
    case Layer::kMoe:
      return ValidateMoe(layer, path);
    case Layer::kConv:
      return ValidateConv(layer, path);
    case Layer::kRecurrent:
      return ValidateRecurrent(layer, path);
    case Layer::kElementwise:
      return ValidateElementwise(layer, path);
    case Layer::kParameters:
      return CheckSize(layer.parameters().count(), path + ".parameters.count",
                       true);
    case Layer::kBlock:
      return ValidateBlock(layer, path, positions, depth);
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t CountLayerParams(const Layer& layer) {
  ParamCounter counter;
  return LayerParams(layer, counter);
}

namespace {

uint64_t TrainableParams(const Layer& layer) {
  if (layer.frozen()) return 0;
  if (layer.kind_case() != Layer::kBlock) return CountLayerParams(layer);
  uint64_t n = 0;
  for (const Layer& child : layer.block().layers()) n += TrainableParams(child);
  return (layer.repeat() == 0 ? 1 : layer.repeat()) * n;
}

}  // namespace

uint64_t CountTrainableParams(const v1::ModelSpec& spec) {
  uint64_t n = 0;
  for (const Layer& layer : spec.layers()) n += TrainableParams(layer);
  return n;
}

uint64_t CountParams(const v1::ModelSpec& spec) {
  ParamCounter counter;
  uint64_t n = 0;
  for (const Layer& layer : spec.layers()) {
    n = counter.Add(n, LayerParams(layer, counter));
  }
  return n;
}

absl::Status ValidateSpec(const v1::ModelSpec& spec) {
  if (spec.name().empty()) {
    return absl::InvalidArgumentError(
        "spec.name is empty; give the model a name (lowercase, digits, "
        "dashes)");
  }
  if (spec.layers().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.layers is empty for model '", spec.name(),
                     "'; a spec needs at least one layer"));
  }
  RETURN_IF_ERROR(CheckSize(spec.positions(), "spec.positions", false));
  for (int i = 0; i < spec.layers_size(); ++i) {
    RETURN_IF_ERROR(ValidateLayer(spec.layers(i),
                                  absl::StrCat("spec.layers[", i, "]"),
                                  spec.positions(), 0));
  }
  // Every count checked: a 2^32 x 2^32 linear once counted as 0 parameters
  // and fit any card.
  ParamCounter counter;
  uint64_t params = 0;
  for (int i = 0; i < spec.layers_size(); ++i) {
    params = counter.Add(params, LayerParams(spec.layers(i), counter));
    if (counter.overflowed()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec.layers[", i, "]: ", counter.what(),
                       " overflows the parameter count"));
    }
  }
  if (params > kMaxParams) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec '", spec.name(), "' has ", params,
                     " parameters; allowed up to ", kMaxParams));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::ModelSpec> ParseSpecJson(absl::string_view json,
                                            absl::string_view what) {
  v1::ModelSpec spec;
  RETURN_IF_ERROR(ParseJson(json, what, /*ignore_unknown=*/false, &spec));
  const absl::Status status = ValidateSpec(spec);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", status.message()));
  }
  return spec;
}

}  // namespace headroom
