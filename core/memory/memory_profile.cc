#include "core/memory/memory_profile.h"

#include <algorithm>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/units.h"
#include "core/memory/model_spec.h"
#include "core/memory/plan.h"
#include "core/memory/training_setup.h"

namespace headroom {
namespace {

using v1::Layer;

// Per-sample activation bytes of one layer copy (or block copy), split by
// component, plus the largest transient candidate and the size of the
// block's boundary tensor (what checkpointing keeps).
struct Activations {
  ComponentArray bytes{};
  double transient = 0;
  double boundary = 0;
  double largest = 0;  // the largest single tensor of one copy
};

struct Context {
  const v1::TrainingSetup* setup;
  double act_bytes;    // bytes per activation element: 4 (fp32) or 2 (16-bit)
  bool checkpointing;  // FULL, or SELECTIVE every block
  // SELECTIVE: every `checkpoint_every`-th copy recomputed (layer SAC), or
  // with 0 op-level SAC.
  bool selective = false;
  uint32_t checkpoint_every = 0;
  // CHUNKED_CE's pieces; 0: full logits.
  uint32_t loss_chunks = 0;
  double position_scale;  // setup positions / spec positions, for inherited
  // LoRA: the adapted linears, the rank, and the bytes each adapted linear
  // saves per input value (its input as the adapter's matmul sees it, and
  // the dropout mask) and per rank-R intermediate value.
  std::set<std::string> lora_targets;
  double lora_rank = 0;
  double lora_input_bytes = 0;
  double lora_rank_bytes = 0;

  bool Adapted(const char* target) const {
    return lora_targets.count(target) != 0;
  }
  // What an adapted linear saves per sample: `positions` rows of `in`
  // values into the adapter.
  double LoraBytes(double positions, double in) const {
    return positions * (in * lora_input_bytes + lora_rank * lora_rank_bytes);
  }
};

double Positions(const Layer& layer, double inherited) {
  return layer.positions() != 0 ? static_cast<double>(layer.positions())
                                : inherited;
}

Activations LayerActivations(const Layer& layer, double positions,
                             const Context& ctx);

using Layers = google::protobuf::RepeatedPtrField<Layer>;

ComponentArray OpSacSaved(const Layer& layer, double p, const Context& ctx);

// What one child of a block adds: its activations times its repeat count,
// or under checkpointing its boundaries plus one copy's activations.
Activations ChildContribution(const Layer& child, double positions,
                              const Context& ctx) {
  const double p = Positions(child, positions);
  Activations a = LayerActivations(child, p, ctx);
  const double repeat = child.repeat() == 0 ? 1 : child.repeat();
  if (ctx.selective && repeat > 1) {
    if (ctx.checkpoint_every == 0) {
      // Op-level SAC: each copy keeps its boundary and the outputs of the
      // ops the policy saves; one copy's rest is rebuilt during backward.
      const ComponentArray saved = OpSacSaved(child, p, ctx);
      for (int c = 0; c < kNumComponents; ++c) {
        a.bytes[c] = repeat * saved[c] + std::max(0.0, a.bytes[c] - saved[c]);
      }
      a.bytes[kOutputs] += repeat * a.boundary;
      return a;
    }
    // Layer SAC: torchtune's checkpoint_wrapper counts the wrapped blocks
    // and checkpoints those where `_count % every_x_layer == 0`
    // (torchtune/training/activations.py @ bd2a0fc): floor(repeat / N)
    // copies keep only their boundary, the rest everything; one
    // checkpointed copy's activations are rebuilt at a time.
    const double checkpointed =
        std::floor(repeat / static_cast<double>(ctx.checkpoint_every));
    for (int c = 0; c < kNumComponents; ++c) {
      a.bytes[c] *= repeat - checkpointed + (checkpointed > 0 ? 1 : 0);
    }
    a.bytes[kOutputs] += checkpointed * a.boundary;
    return a;
  }
  if (ctx.checkpointing && repeat > 1) {
    // Checkpointed stack: each copy keeps its boundary output; one copy's
    // activations are rebuilt at a time during backward.
    a.bytes[kOutputs] += repeat * a.boundary;
  } else {
    for (int c = 0; c < kNumComponents; ++c) a.bytes[c] *= repeat;
  }
  return a;
}

Activations BlockActivations(const Layers& layers, double positions,
                             const Context& ctx) {
  Activations total;
  for (const Layer& child : layers) {
    const Activations a = ChildContribution(child, positions, ctx);
    for (int c = 0; c < kNumComponents; ++c) total.bytes[c] += a.bytes[c];
    total.transient = std::max(total.transient, a.transient);
    total.boundary = std::max(total.boundary, a.boundary);
    total.largest = std::max(total.largest, a.largest);
  }
  return total;
}

// What an MLP's adapted projections save for one pass of `p` positions.
double MlpLoraBytes(const Context& ctx, double p, double hidden, double ffn,
                    bool gated) {
  double bytes = 0;
  if (gated && ctx.Adapted("gate")) bytes += ctx.LoraBytes(p, hidden);
  if (ctx.Adapted("up")) bytes += ctx.LoraBytes(p, hidden);
  if (ctx.Adapted("down")) bytes += ctx.LoraBytes(p, ffn);
  return bytes;
}

// Under torchtitan's op-level SAC, what one copy of a layer keeps: the
// policy saves the outputs of compute-intensive ops (matmuls, SDPA,
// convolutions) "except every second mm/linear", and recomputes the rest
// (SelectiveAC, torchtitan/distributed/activation_checkpoint.py
// @ b5bcd76): half of the projections' outputs, the attention output and
// its log-sum-exp (fused) or the score matrices (eager), a convolution's
// output. Norms, activations and elementwise ops are recomputed.
ComponentArray OpSacSaved(const Layer& layer, double p, const Context& ctx) {
  const double b = ctx.act_bytes;
  ComponentArray saved{};
  if (layer.frozen()) return saved;
  switch (layer.kind_case()) {
    case Layer::kAttention: {
      const auto& a = layer.attention();
      const double hd = static_cast<double>(
          a.head_dim() != 0 ? a.head_dim() : a.hidden() / a.heads());
      const double heads = static_cast<double>(a.heads());
      const double kvh =
          static_cast<double>(a.kv_heads() != 0 ? a.kv_heads() : a.heads());
      const double kv_p =
          a.kv_positions() != 0
              ? static_cast<double>(a.kv_positions()) *
                    (layer.positions() == 0 ? ctx.position_scale : 1)
              : p;
      const double projections = p * heads * hd + 2 * kv_p * kvh * hd +
                                 p * static_cast<double>(a.hidden());
      saved[kOutputs] += 0.5 * projections * b + p * heads * hd * b;
      if (FusedAttention(a, *ctx.setup)) {
        saved[kInternal] += p * heads * 4.0;
      } else {
        const double keys =
            a.window() != 0 ? std::min(kv_p, static_cast<double>(a.window()))
                            : kv_p;
        saved[kAttention] += heads * p * keys * b;
      }
      break;
    }
    case Layer::kMlp: {
      // gate and up outputs where the intermediates are counted, down's
      // where the layer's output is.
      const auto& m = layer.mlp();
      const double ups = m.gated() ? 2.0 : 1.0;
      saved[kInternal] += 0.5 * p * ups * static_cast<double>(m.ffn()) * b;
      saved[kOutputs] += 0.5 * p * static_cast<double>(m.hidden()) * b;
      break;
    }
    case Layer::kMoe: {
      // The routed and shared experts a token passes through; the router's
      // matmul is force-recomputed (force_recompute_mm_shapes_by_fqns
      // defaults to moe.router.gate).
      const auto& m = layer.moe();
      const double active = static_cast<double>(m.top_k() + m.shared_experts());
      const double ups = m.gated() ? 2.0 : 1.0;
      saved[kInternal] +=
          0.5 * active * p * ups * static_cast<double>(m.ffn()) * b;
      saved[kOutputs] += 0.5 * active * p * static_cast<double>(m.hidden()) * b;
      break;
    }
    case Layer::kLinear:
      if (!layer.linear().logits()) {
        saved[kOutputs] +=
            0.5 * p * static_cast<double>(layer.linear().out_features()) * b;
      }
      break;
    case Layer::kConv:
      saved[kOutputs] +=
          p * static_cast<double>(layer.conv().out_channels()) * b;
      break;
    case Layer::kBlock:
      for (const Layer& child : layer.block().layers()) {
        const double repeat = child.repeat() == 0 ? 1 : child.repeat();
        const ComponentArray c = OpSacSaved(child, Positions(child, p), ctx);
        for (int i = 0; i < kNumComponents; ++i) saved[i] += repeat * c[i];
      }
      break;
    default:
      break;
  }
  return saved;
}

// The logits transient of a head with `o` outputs per sample (positions x
// vocab). Full: fp32 logits and their gradient live together at the loss.
// Chunked (torchtune's chunked_output + CEWithChunkedOutputLoss,
// torchtune/modules/transformer.py and modules/loss/
// ce_chunked_output_loss.py @ bd2a0fc; litgpt's lm_head_chunk_size and
// chunked_cross_entropy, litgpt/model.py and litgpt/utils.py @ 2685705):
// the head's output is produced for every chunk before the loss runs
// (a list of chunks, o values in compute dtype in all), then the loss
// upcasts one chunk at a time: that chunk's fp32 copy (none when the
// compute dtype is fp32) and its gradient.
double LogitsTransient(double o, double positions, const Context& ctx) {
  if (ctx.loss_chunks == 0) return o * 4.0 * 2.0;
  const double chunk =
      o *
      ChunkedLogitsFraction(static_cast<uint64_t>(positions), ctx.loss_chunks);
  return o * ctx.act_bytes + chunk * 4.0 * (ctx.act_bytes < 4 ? 2.0 : 1.0);
}

// The activations one copy of a layer of each kind saves per sample at `p`
// positions (LayerActivations picks by kind; the layer is not frozen).
Activations EmbeddingActivations(const Layer& layer, double p,
                                 const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& e = layer.embedding();
  const double d = static_cast<double>(e.dim());
  bytes[kOutputs] += p * d * b;
  if (e.lookups() > 1) bytes[kInternal] += p * e.lookups() * d * b;
  // PEFT's lora.Embedding looks the ids up in A^T and multiplies by B^T:
  // the B matmul saves the [positions, r] lookup (Embedding.forward,
  // peft src/peft/tuners/lora/layer.py @ 5d602fd); no dropout on ids.
  if (ctx.Adapted("embed")) {
    bytes[kInternal] += p * ctx.lora_rank * ctx.lora_rank_bytes;
  }
  out.boundary = p * d * b;
  out.largest = out.boundary;
  return out;
}

Activations LinearActivations(const Layer& layer, double p,
                              const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& l = layer.linear();
  const double o = p * static_cast<double>(l.out_features());
  if (l.logits()) {
    out.transient = LogitsTransient(o, p, ctx);
    out.largest = o * 4.0;
    // An adapted head saves its input for the adapter as any linear.
    if (ctx.Adapted("lm_head")) {
      bytes[kInternal] +=
          ctx.LoraBytes(p, static_cast<double>(l.in_features()));
    }
  } else {
    bytes[kOutputs] += o * b;
    out.largest = o * b;
    if (ctx.Adapted("linear")) {
      bytes[kInternal] +=
          ctx.LoraBytes(p, static_cast<double>(l.in_features()));
    }
  }
  out.boundary = o * b;
  return out;
}

Activations NormActivations(const Layer& layer, double p, const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& n = layer.norm();
  const double d = static_cast<double>(n.dim());
  bytes[kOutputs] += p * d * b;
  // Mean and reciprocal std (fp32) per normalized row.
  if (n.kind() == v1::Norm::LAYER || n.kind() == v1::Norm::RMS) {
    bytes[kInternal] += p * 2.0 * 4.0;
  }
  out.boundary = p * d * b;
  out.largest = out.boundary;
  return out;
}

Activations AttentionActivations(const Layer& layer, double p,
                                 const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& a = layer.attention();
  const double hd = static_cast<double>(
      a.head_dim() != 0 ? a.head_dim() : a.hidden() / a.heads());
  const double heads = static_cast<double>(a.heads());
  const double kvh =
      static_cast<double>(a.kv_heads() != 0 ? a.kv_heads() : a.heads());
  double kv_p = a.kv_positions() != 0
                    ? static_cast<double>(a.kv_positions()) *
                          (layer.positions() == 0 ? ctx.position_scale : 1)
                    : p;
  const double keys =
      a.window() != 0 ? std::min(kv_p, static_cast<double>(a.window())) : kv_p;
  // q, k, v, the attention context, and the output projection.
  bytes[kOutputs] += (2 * p * heads * hd + 2 * kv_p * kvh * hd +
                      p * static_cast<double>(a.hidden())) *
                     b;
  if (FusedAttention(a, *ctx.setup)) {
    bytes[kInternal] += p * heads * 4.0;  // log-sum-exp per row
  } else {
    // Softmax saves its probabilities, batch x heads x q x k; their
    // backward holds the gradient of the probabilities and of the scores.
    // Attention dropout adds its one-byte mask and the dropped
    // probabilities the value matmul saves.
    const double scores = heads * p * keys;
    bytes[kAttention] += scores * (a.dropout() > 0 ? 1.0 + 2.0 * b : b);
    out.transient = scores * 2.0 * b;
    out.largest = scores * b;
  }
  const double kin = static_cast<double>(
      a.kv_input_dim() != 0 ? a.kv_input_dim() : a.hidden());
  if (ctx.Adapted("q")) {
    bytes[kInternal] += ctx.LoraBytes(p, static_cast<double>(a.hidden()));
  }
  if (ctx.Adapted("k")) bytes[kInternal] += ctx.LoraBytes(kv_p, kin);
  if (ctx.Adapted("v")) bytes[kInternal] += ctx.LoraBytes(kv_p, kin);
  if (ctx.Adapted("o")) bytes[kInternal] += ctx.LoraBytes(p, heads * hd);
  out.boundary = p * static_cast<double>(a.hidden()) * b;
  out.largest = std::max(
      {out.largest, out.boundary, p * heads * hd * b, kv_p * kvh * hd * b});
  return out;
}

Activations MlpActivations(const Layer& layer, double p, const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& m = layer.mlp();
  bytes[kInternal] +=
      p * static_cast<double>(m.ffn()) * b * (m.gated() ? 3.0 : 2.0);
  bytes[kOutputs] += p * static_cast<double>(m.hidden()) * b;
  out.boundary = p * static_cast<double>(m.hidden()) * b;
  out.largest = p * static_cast<double>(std::max(m.ffn(), m.hidden())) * b;
  bytes[kInternal] += MlpLoraBytes(ctx, p, static_cast<double>(m.hidden()),
                                   static_cast<double>(m.ffn()), m.gated());
  return out;
}

Activations MoeActivations(const Layer& layer, double p, const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& m = layer.moe();
  const double active = static_cast<double>(m.top_k() + m.shared_experts());
  bytes[kInternal] +=
      p * active * static_cast<double>(m.ffn()) * b * (m.gated() ? 3.0 : 2.0);
  bytes[kInternal] += p * static_cast<double>(m.experts()) * 4.0;
  bytes[kOutputs] += p * (active + 1) * static_cast<double>(m.hidden()) * b;
  // Each token passes through top_k routed and every shared expert.
  bytes[kInternal] +=
      active * MlpLoraBytes(ctx, p, static_cast<double>(m.hidden()),
                            static_cast<double>(m.ffn()), m.gated());
  out.boundary = p * static_cast<double>(m.hidden()) * b;
  out.largest = out.boundary;
  return out;
}

Activations ConvActivations(const Layer& layer, double p, const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& c = layer.conv();
  const double o = p * static_cast<double>(c.out_channels());
  const double in_p =
      c.in_positions() != 0 ? static_cast<double>(c.in_positions()) : p;
  const double i = in_p * static_cast<double>(c.in_channels());
  bytes[kOutputs] += o * b;
  // Backward holds the input gradient and the output gradient at once.
  out.transient = (o + i) * b;
  out.boundary = o * b;
  out.largest = std::max(o, i) * b;
  return out;
}

Activations RecurrentActivations(const Layer& layer, double p,
                                 const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& r = layer.recurrent();
  const double gates = r.cell() == v1::Recurrent::LSTM  ? 4
                       : r.cell() == v1::Recurrent::GRU ? 3
                                                        : 1;
  const double states = r.cell() == v1::Recurrent::LSTM ? 2 : 1;
  const double dirs = r.bidirectional() ? 2 : 1;
  const double layers = r.num_layers() == 0 ? 1 : r.num_layers();
  const double h = static_cast<double>(r.hidden());
  // Gate pre-activations and cell/hidden states of every time step.
  bytes[kRecurrent] += layers * dirs * p * (gates + states) * h * b;
  bytes[kOutputs] += layers * p * dirs * h * b;
  out.boundary = p * dirs * h * b;
  out.largest = out.boundary;
  return out;
}

Activations ElementwiseActivations(const Layer& layer, double p,
                                   const Context& ctx) {
  const double b = ctx.act_bytes;
  Activations out;
  auto& bytes = out.bytes;
  const auto& e = layer.elementwise();
  const double v = p * static_cast<double>(e.dim());
  switch (e.op()) {
    case v1::Elementwise::DROPOUT:
      bytes[kInternal] += v;  // one-byte mask
      break;
    case v1::Elementwise::ACTIVATION:
    case v1::Elementwise::SOFTMAX:
      bytes[kInternal] += v * b;
      break;
    default:
      bytes[kOutputs] += v * b;
      break;
  }
  out.boundary = v * b;
  out.largest = out.boundary;
  return out;
}

Activations LayerActivations(const Layer& layer, double p, const Context& ctx) {
  Activations out;
  if (layer.frozen()) return out;  // runs under no_grad: nothing saved
  switch (layer.kind_case()) {
    case Layer::kEmbedding:
      return EmbeddingActivations(layer, p, ctx);
    case Layer::kLinear:
      return LinearActivations(layer, p, ctx);
    case Layer::kNorm:
      return NormActivations(layer, p, ctx);
    case Layer::kAttention:
      return AttentionActivations(layer, p, ctx);
    case Layer::kMlp:
      return MlpActivations(layer, p, ctx);
    case Layer::kMoe:
      return MoeActivations(layer, p, ctx);
    case Layer::kConv:
      return ConvActivations(layer, p, ctx);
    case Layer::kRecurrent:
      return RecurrentActivations(layer, p, ctx);
    case Layer::kElementwise:
      return ElementwiseActivations(layer, p, ctx);
    case Layer::kParameters:
      break;
    case Layer::kBlock:
      return BlockActivations(layer.block().layers(), p, ctx);
    case Layer::KIND_NOT_SET:
      break;
  }
  return out;
}

// Under activation offloading, the per-sample bytes of each component
// that leave the GPU. torchtune's OffloadActivations moves every saved
// tensor of >= 1 KiB (min_offload_size=1024) to pinned host memory during
// forward; with use_streams it keeps up to max_fwd_stash_size=5 tensors
// in flight in forward and, in backward, the tensors of the node being
// computed and the ones prefetched for the next (torchtune/training/
// _activation_offloading.py @ bd2a0fc): two copies of a repeated block
// stay (the rebuilt copy and two boundaries under full checkpointing).
// get_act_offloading_ctx_manager wraps model.output in a NoOpManager, so
// the head's input stays on the GPU. Tensors under 1 KiB are not counted.
ComponentArray OffloadedActivations(const Layers& layers, double positions,
                                    const Context& ctx) {
  ComponentArray host{};
  double head_input = 0;  // saved by the head, an earlier layer's output
  for (const Layer& child : layers) {
    const double p = Positions(child, positions);
    const Activations all = ChildContribution(child, p, ctx);
    const double repeat = child.repeat() == 0 ? 1 : child.repeat();
    ComponentArray kept{};
    if (repeat > 1) {
      const Activations one = LayerActivations(child, p, ctx);
      if (ctx.checkpointing) {
        kept = one.bytes;
        kept[kOutputs] += 2 * one.boundary;
      } else {
        for (int c = 0; c < kNumComponents; ++c) {
          kept[c] = all.bytes[c] * 2.0 / repeat;
        }
      }
    } else if (child.has_linear() && child.linear().logits() &&
               !child.frozen()) {
      head_input +=
          p * static_cast<double>(child.linear().in_features()) * ctx.act_bytes;
      kept[kInternal] = all.bytes[kInternal];  // an adapted head's input
    }
    for (int c = 0; c < kNumComponents; ++c) {
      if (c == kTransient) continue;
      host[c] += std::max(0.0, all.bytes[c] - kept[c]);
    }
  }
  host[kOutputs] = std::max(0.0, host[kOutputs] - head_input);
  return host;
}

Context MakeContext(const v1::ModelSpec& spec, const Plan& plan,
                    double* default_positions) {
  const v1::TrainingSetup& setup = plan.setup;
  Context ctx;
  ctx.setup = &setup;
  ctx.act_bytes = plan.compute_bytes;
  ctx.lora_targets = plan.lora_targets;
  if (!ctx.lora_targets.empty()) {
    // PEFT keeps adapters in fp32 and casts each adapted linear's input to
    // it: under 16-bit weights that fp32 copy is what the A matmul saves;
    // under autocast the 16-bit copy autocast makes of it; in fp32 the
    // input itself (already counted) unless dropout made a new one.
    // Adapters in the weights' own dtype (litgpt, torchtune) cast nothing:
    // only dropout makes a new input. Dropout adds its one-byte mask.
    const bool dropout = setup.lora().dropout() > 0;
    const bool mixed = MixedPrecision(setup);
    const bool cast = plan.adapter_bytes != plan.weight_bytes;
    ctx.lora_rank = setup.lora().rank();
    ctx.lora_input_bytes = cast && TrueHalfPrecision(setup) ? 4.0
                           : mixed                          ? 2.0
                           : dropout                        ? plan.compute_bytes
                                                            : 0.0;
    if (dropout) ctx.lora_input_bytes += 1.0;
    ctx.lora_rank_bytes = mixed ? 2.0 : plan.adapter_bytes;
  }
  const v1::TrainingSetup::Checkpointing checkpointing = CheckpointingOf(setup);
  ctx.checkpointing = checkpointing == v1::TrainingSetup::FULL ||
                      (checkpointing == v1::TrainingSetup::SELECTIVE &&
                       setup.checkpoint_every() == 1);
  ctx.selective = checkpointing == v1::TrainingSetup::SELECTIVE &&
                  setup.checkpoint_every() != 1;
  ctx.checkpoint_every = setup.checkpoint_every();
  ctx.loss_chunks = LossChunks(setup);
  *default_positions = static_cast<double>(spec.positions());
  ctx.position_scale = 1.0;
  if (setup.positions() != 0) {
    if (spec.positions() != 0) {
      ctx.position_scale = static_cast<double>(setup.positions()) /
                           static_cast<double>(spec.positions());
    }
    *default_positions = static_cast<double>(setup.positions());
  }
  return ctx;
}

}  // namespace

const std::array<const char*, kNumComponents>& ComponentNames() {
  static const std::array<const char*, kNumComponents> names = {
      "optimizer", "outputs",   "attention",
      "internal",  "recurrent", "transient"};
  return names;
}

ComponentArray MemoryProfile::BytesAt(uint64_t batch) const {
  ComponentArray out;
  const double b = static_cast<double>(batch);
  for (int c = 0; c < kNumComponents; ++c) {
    out[c] = fixed_bytes[c] + b * per_sample_bytes[c];
  }
  return out;
}

const char* MomentName(Moment moment) {
  return moment == Moment::kUpdate ? "optimizer update" : "backward start";
}

Moment PeakMoment(const ComponentArray& backward, const ComponentArray& update,
                  const ComponentArray& factors) {
  return PeakGb(update, factors) > PeakGb(backward, factors)
             ? Moment::kUpdate
             : Moment::kBackward;
}

ComponentArray MemoryProfile::PeakBytesAt(uint64_t batch,
                                          const ComponentArray& factors,
                                          Moment* moment) const {
  const ComponentArray backward = BytesAt(batch);
  const Moment at = PeakMoment(backward, update_bytes, factors);
  if (moment != nullptr) *moment = at;
  return at == Moment::kUpdate ? update_bytes : backward;
}

absl::StatusOr<MemoryProfile> BuildProfile(const v1::ModelSpec& spec,
                                           const v1::TrainingSetup& setup) {
  ASSIGN_OR_RETURN(const Plan plan, ResolvePlan(spec, setup));
  return BuildProfile(spec, plan);
}

absl::StatusOr<MemoryProfile> BuildProfile(const v1::ModelSpec& spec,
                                           const Plan& plan) {
  const v1::TrainingSetup& setup = plan.setup;
  ASSIGN_OR_RETURN(const FrozenSpec frozen, ApplyFreeze(spec, setup));
  MemoryProfile profile;
  profile.states = ComputeModelStates(frozen, setup, plan.adapter_bytes);
  profile.params = profile.states.params;
  double default_positions = 0;
  const Context ctx = MakeContext(frozen.spec, plan, &default_positions);
  const Activations act =
      BlockActivations(frozen.spec.layers(), default_positions, ctx);
  // Under gradient accumulation a step's batch runs as grad_accum
  // microbatches: the activations are one microbatch's.
  const double microbatches = static_cast<double>(plan.accum);
  profile.per_sample_bytes = act.bytes;
  if (setup.activation_offloading()) {
    const ComponentArray host =
        OffloadedActivations(frozen.spec.layers(), default_positions, ctx);
    for (int c = 0; c < kNumComponents; ++c) {
      profile.per_sample_bytes[c] -= host[c];
      profile.host_activation_bytes_per_sample += host[c] / microbatches;
    }
  }
  profile.per_sample_bytes[kTransient] = act.transient;
  for (double& bytes : profile.per_sample_bytes) bytes /= microbatches;
  profile.largest_tensor_per_sample = act.largest / microbatches;

  // Everything proportional to parameters (ModelStates, training_setup.h).
  // The step's memory peaks at one of two moments:
  //  - backward start: the weights as stored, gradients and the
  //    optimizer's state, every saved activation, and the backward's first
  //    buffers (the transient, and a quantized base's one dequantized
  //    weight); under autocast also the 16-bit copies of the trained
  //    weights the forward cached. The gradients count as resident:
  //    zero_grad() zeroes them in place before PyTorch 2.0 and with
  //    set_to_none=False, which is what the shipped calibration runs show;
  //    with set_to_none=True they are allocated during the backward, and
  //    this is an upper bound by at most one gradient per trained
  //    parameter. Under gradient accumulation they are resident between
  //    microbatches anyway; stepped in backward, only one tensor's is.
  //  - optimizer update: weights, state, gradients, and the update's
  //    temporaries (PyTorch's multi-tensor AdamW builds one intermediate
  //    per trainable parameter; a one-tensor-at-a-time step only the
  //    largest tensor's); the activations are gone by then.
  const ModelStates& st = profile.states;
  // Paged optimizer state is CUDA managed memory: the driver pages it to
  // the host when the card runs short, and torch's allocator never sees it.
  const double resident = st.weights + st.states - st.paged_states;
  if (setup.optimizer_in_backward()) {
    profile.fixed_bytes[kOptimizer] =
        resident + st.in_backward_buffers + st.half_copies;
    profile.update_bytes[kOptimizer] = resident + st.in_backward_buffers;
  } else {
    profile.fixed_bytes[kOptimizer] = resident + st.gradients + st.half_copies;
    profile.update_bytes[kOptimizer] =
        resident + st.gradients + st.update_temporaries;
  }
  profile.fixed_bytes[kTransient] = st.dequantized;
  ApplyParallel(frozen.spec, plan, &profile);
  return profile;
}

std::vector<std::string> ProfileAssumptions(const MemoryProfile& profile) {
  std::vector<std::string> out;
  if (profile.host_activation_bytes_per_sample > 0) {
    out.push_back(absl::StrCat(
        "activation offloading: ",
        FormatBytesAsGb(profile.host_activation_bytes_per_sample, 3),
        " of saved activations per sample in pinned host memory (times the "
        "batch), not in the GPU peak"));
  }
  return out;
}

ComponentArray FactorArray(const v1::Factors& f) {
  return {f.optimizer(), f.outputs(),   f.attention(),
          f.internal(),  f.recurrent(), f.transient()};
}

v1::Factors FactorsFromArray(const ComponentArray& v) {
  v1::Factors f;
  f.set_optimizer(v[kOptimizer]);
  f.set_outputs(v[kOutputs]);
  f.set_attention(v[kAttention]);
  f.set_internal(v[kInternal]);
  f.set_recurrent(v[kRecurrent]);
  f.set_transient(v[kTransient]);
  return f;
}

double PeakGb(const ComponentArray& bytes, const ComponentArray& factors) {
  double total = 0;
  for (int c = 0; c < kNumComponents; ++c) total += bytes[c] * factors[c];
  return total / 1e9;
}

absl::StatusOr<std::vector<LayerShare>> LayerBreakdown(
    const v1::ModelSpec& original, const v1::TrainingSetup& asked) {
  ASSIGN_OR_RETURN(const Plan plan, ResolvePlan(original, asked));
  ASSIGN_OR_RETURN(const FrozenSpec frozen, ApplyFreeze(original, plan.setup));
  const v1::ModelSpec& spec = frozen.spec;
  double default_positions = 0;
  const Context ctx = MakeContext(spec, plan, &default_positions);
  std::vector<LayerShare> shares;
  shares.reserve(spec.layers_size());
  for (int i = 0; i < spec.layers_size(); ++i) {
    const Layer& layer = spec.layers(i);
    const Activations a = ChildContribution(layer, default_positions, ctx);
    LayerShare share;
    share.name =
        layer.name().empty() ? absl::StrCat("layers[", i, "]") : layer.name();
    share.repeat = layer.repeat() == 0 ? 1 : layer.repeat();
    share.params = CountLayerParams(layer);
    share.per_sample_bytes = a.bytes;
    share.per_sample_bytes[kTransient] = a.transient;
    shares.push_back(std::move(share));
  }
  return shares;
}

}  // namespace headroom
