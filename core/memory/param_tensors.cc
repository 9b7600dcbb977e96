#include "core/memory/param_tensors.h"

#include <cstdint>
#include <initializer_list>

namespace headroom {
namespace {

using v1::Layer;

// a x b, or UINT64_MAX when that overflows: ValidateSpec holds a spec's
// count to kMaxParams with every product checked, so a valid spec never
// reaches it, and an invalid one reads as huge rather than wrapping small.
uint64_t SaturatingMul(uint64_t a, uint64_t b) {
  uint64_t n;
  return __builtin_mul_overflow(a, b, &n) ? UINT64_MAX : n;
}

struct Emitter {
  const std::function<void(const ParamTensor&)>& fn;
  int top_level = 0;
  uint64_t copies = 1;
  bool frozen = false;

  void Emit(std::initializer_list<uint64_t> shape,
            TensorRole role = TensorRole::kOther, const char* target = "",
            uint64_t times = 1) const {
    ParamTensor t;
    for (uint64_t d : shape) t.shape[t.rank++] = d;
    t.copies = SaturatingMul(copies, times);
    t.role = role;
    t.target = target;
    t.top_level = top_level;
    t.spec_frozen = frozen;
    if (t.Elements() != 0 && t.copies != 0) fn(t);
  }

  // An MLP's tensors (nn.Linear [out, in] each), `times` copies of it.
  void Mlp(uint64_t hidden, uint64_t ffn, bool gated, bool bias,
           uint64_t times) const {
    if (gated) Emit({ffn, hidden}, TensorRole::kLinear, "gate", times);
    Emit({ffn, hidden}, TensorRole::kLinear, "up", times);
    Emit({hidden, ffn}, TensorRole::kLinear, "down", times);
    if (bias) {
      if (gated) Emit({ffn}, TensorRole::kOther, "", times);
      Emit({ffn}, TensorRole::kOther, "", times);
      Emit({hidden}, TensorRole::kOther, "", times);
    }
  }

  // The tensors of one layer of each kind (Layer picks by kind).
  void Attention(const v1::Attention& a) const;
  void Conv(const v1::Conv& c) const;
  void Recurrent(const v1::Recurrent& r) const;

  void Layer(const v1::Layer& layer) const;
};

// q, k, v and o (nn.Linear [out, in] each), their biases and the q/k norms.
void Emitter::Attention(const v1::Attention& a) const {
  const uint64_t hd = a.head_dim() != 0 ? a.head_dim() : a.hidden() / a.heads();
  const uint64_t kvh = a.kv_heads() != 0 ? a.kv_heads() : a.heads();
  const uint64_t kin = a.kv_input_dim() != 0 ? a.kv_input_dim() : a.hidden();
  Emit({a.heads() * hd, a.hidden()}, TensorRole::kLinear, "q");
  Emit({kvh * hd, kin}, TensorRole::kLinear, "k");
  Emit({kvh * hd, kin}, TensorRole::kLinear, "v");
  Emit({a.hidden(), a.heads() * hd}, TensorRole::kLinear, "o");
  if (a.qkv_bias()) {
    Emit({a.heads() * hd});
    Emit({kvh * hd});
    Emit({kvh * hd});
  }
  if (a.out_bias()) Emit({a.hidden()});
  if (a.qk_norm()) {
    Emit({hd});
    Emit({hd});
  }
}

// One weight [out, in / groups, kernel...] (transposed: [in, out / groups,
// kernel...]) and its bias.
void Emitter::Conv(const v1::Conv& c) const {
  const uint64_t g = c.groups() == 0 ? 1 : c.groups();
  const uint32_t dims = c.dims() == 0 ? 2 : c.dims();
  ParamTensor t;
  t.shape[t.rank++] = c.transposed() ? c.in_channels() : c.out_channels();
  t.shape[t.rank++] =
      c.transposed() ? c.out_channels() / g : c.in_channels() / g;
  for (uint32_t i = 0; i < dims && t.rank < 5; ++i) {
    t.shape[t.rank++] = c.kernel_size() == 1 ? c.kernel(0) : c.kernel(i);
  }
  t.copies = copies;
  t.top_level = top_level;
  t.spec_frozen = frozen;
  if (t.Elements() != 0) fn(t);
  if (c.bias()) Emit({c.out_channels()});
}

// Per layer and direction: weight_ih, weight_hh and two biases.
void Emitter::Recurrent(const v1::Recurrent& r) const {
  const uint64_t gates = r.cell() == v1::Recurrent::LSTM  ? 4
                         : r.cell() == v1::Recurrent::GRU ? 3
                                                          : 1;
  const uint64_t dirs = r.bidirectional() ? 2 : 1;
  const uint32_t layers = r.num_layers() == 0 ? 1 : r.num_layers();
  const uint64_t h = r.hidden();
  for (uint32_t l = 0; l < layers; ++l) {
    const uint64_t in = l == 0 ? r.input_size() : h * dirs;
    Emit({gates * h, in}, TensorRole::kOther, "", dirs);
    Emit({gates * h, h}, TensorRole::kOther, "", dirs);
    if (!r.no_bias()) {
      Emit({gates * h}, TensorRole::kOther, "", 2 * dirs);
    }
  }
}

void Emitter::Layer(const v1::Layer& layer) const {
  Emitter inner = *this;
  inner.copies =
      SaturatingMul(copies, layer.repeat() == 0 ? 1 : layer.repeat());
  inner.frozen = frozen || layer.frozen();
  switch (layer.kind_case()) {
    case Layer::kEmbedding:
      inner.Emit({layer.embedding().num_embeddings(), layer.embedding().dim()},
                 TensorRole::kTable, "embed");
      break;
    case Layer::kLinear: {
      const auto& l = layer.linear();
      if (!l.tied()) {
        inner.Emit({l.out_features(), l.in_features()},
                   l.logits() ? TensorRole::kHead : TensorRole::kLinear,
                   l.logits() ? "lm_head" : "linear");
      }
      if (l.bias()) inner.Emit({l.out_features()});
      break;
    }
    case Layer::kNorm: {
      const auto& n = layer.norm();
      if (n.no_affine()) break;
      inner.Emit({n.dim()});
      const bool weight_only = n.kind() == v1::Norm::RMS ||
                               (n.kind() == v1::Norm::LAYER && n.no_bias());
      if (!weight_only) inner.Emit({n.dim()});
      break;
    }
    case Layer::kAttention:
      inner.Attention(layer.attention());
      break;
    case Layer::kMlp: {
      const auto& m = layer.mlp();
      inner.Mlp(m.hidden(), m.ffn(), m.gated(), m.bias(), 1);
      break;
    }
    case Layer::kMoe: {
      const auto& m = layer.moe();
      inner.Emit({m.experts(), m.hidden()}, TensorRole::kRouter);
      if (m.router_bias()) inner.Emit({m.experts()});
      inner.Mlp(m.hidden(), m.ffn(), m.gated(), false,
                m.experts() + m.shared_experts());
      break;
    }
    case Layer::kConv:
      inner.Conv(layer.conv());
      break;
    case Layer::kRecurrent:
      inner.Recurrent(layer.recurrent());
      break;
    case Layer::kParameters:
      inner.Emit({layer.parameters().count()});
      break;
    case Layer::kBlock:
      for (const v1::Layer& child : layer.block().layers()) inner.Layer(child);
      break;
    case Layer::kElementwise:
    case Layer::KIND_NOT_SET:
      break;
  }
}

// Calls `fn` for every tied logits linear under `layer`.
void VisitTiedHeads(const v1::Layer& layer, int top_level, uint64_t copies,
                    bool frozen,
                    const std::function<void(const ParamTensor&)>& fn) {
  copies = SaturatingMul(copies, layer.repeat() == 0 ? 1 : layer.repeat());
  frozen = frozen || layer.frozen();
  if (layer.has_block()) {
    for (const v1::Layer& child : layer.block().layers()) {
      VisitTiedHeads(child, top_level, copies, frozen, fn);
    }
    return;
  }
  if (!layer.has_linear() || !layer.linear().logits() ||
      !layer.linear().tied()) {
    return;
  }
  ParamTensor t;
  t.shape[t.rank++] = layer.linear().out_features();
  t.shape[t.rank++] = layer.linear().in_features();
  t.copies = copies;
  t.role = TensorRole::kHead;
  t.target = "lm_head";
  t.top_level = top_level;
  t.spec_frozen = frozen;
  if (t.Elements() != 0 && t.copies != 0) fn(t);
}

}  // namespace

void ForEachTiedHead(const v1::ModelSpec& spec,
                     const std::function<void(const ParamTensor&)>& fn) {
  for (int i = 0; i < spec.layers_size(); ++i) {
    VisitTiedHeads(spec.layers(i), i, 1, false, fn);
  }
}

uint64_t ParamTensor::Elements() const {
  if (rank == 0) return 0;
  uint64_t n = 1;
  for (int i = 0; i < rank; ++i) n = SaturatingMul(n, shape[i]);
  return n;
}

void ForEachParamTensor(const v1::ModelSpec& spec,
                        const std::function<void(const ParamTensor&)>& fn) {
  for (int i = 0; i < spec.layers_size(); ++i) {
    Emitter emitter{fn};
    emitter.top_level = i;
    emitter.Layer(spec.layers(i));
  }
}

}  // namespace headroom
