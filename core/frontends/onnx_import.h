#ifndef HEADROOM_CORE_FRONTENDS_ONNX_IMPORT_H_
#define HEADROOM_CORE_FRONTENDS_ONNX_IMPORT_H_

// ONNX front-end: a serialized ONNX ModelProto becomes a ModelSpec, so the
// memory model and its calibrated factors apply to an exported graph exactly
// as they apply to a catalog template or a Hugging Face config.
//
// The graph is parsed with Debian's ONNX library and shape-inferred with the
// batch axis set to one sample and symbolic lengths bound, so every tensor's
// size is a per-sample size (onnx_shapes.h; shape arithmetic on small
// tensors, which exports with dynamic axes are full of, is evaluated
// exactly). Nodes are then grouped into the spec's layer kinds, the same
// kinds the catalog and the Hugging Face front-end write, so that one
// architecture gives one answer whichever way it arrives. (A spec of one
// layer per node would count every reshape, scale and residual add the
// composite kinds already cover, and the calibrated factors were fitted on
// composite layers; grouping is what keeps GPT-2, BERT and ViT graphs, built
// by hand or by torch.onnx, within 0.01 % of their Hugging Face configs:
// three_ways_test.cc.)
//
//   - parameters: float initializers of two or more elements, each counted
//     once however many nodes read it (a tied LM head reads the embedding
//     table: a Linear with `tied`); an Identity of an initializer is a
//     parameter of its own (exporters keep one copy of equal-valued
//     parameters, such as fresh LayerNorm ones and zeros, and reach the
//     others that way); BatchNormalization's running statistics are
//     buffers, not parameters; scalars are constants.
//   - Gather from a weight by batch-dependent indices: Embedding. A Gather
//     whose indices do not depend on the inputs (a position table read with
//     constant positions) is broadcast once, not per sample: its table is a
//     Parameters layer, as the Hugging Face front-end writes it.
//   - attention: a MatMul of two activations that feeds a Softmax (through
//     scaling, masking, casts) is a score matrix; with the MatMul that
//     applies the probabilities to V, the linear projections that produce
//     Q, K and V (separate, or fused and split) and the projection after it,
//     it is one Attention layer (heads, head_dim, grouped K/V heads from the
//     shapes). The residual add after it belongs to it.
//   - MLP: a linear widening d -> f, parameter-free element-wise ops (an
//     activation, GELU written out, a gate product with a sibling d -> f
//     linear), and a linear f -> d: one Mlp layer (gated with the sibling).
//     The residual add after it belongs to it.
//   - other MatMul/Gemm with a weight: Linear; one whose output is a graph
//     output or a loss input is the logits (the step's transient buffer).
//   - Conv/ConvTranspose, LayerNormalization, BatchNormalization,
//     InstanceNormalization, LSTM/GRU/RNN: Conv, Norm, Recurrent layers;
//     LayerNorm and RMSNorm written out in element-wise ops (exports before
//     opset 17, Llama's RMSNorm) are Norm layers too.
//   - element-wise nodes on batch-dependent tensors not inside a group:
//     activations (and products of two activations), softmax, dropout,
//     pooling and reductions, and adds of two activations (a residual in a
//     conv net) become Elementwise layers of their output size; shape ops,
//     concatenation and arithmetic with a constant save nothing.
//   - initializers no group claims (a class token, a position table, a
//     PReLU slope): Parameters layers.
// Consecutive identical runs of layers become a Block with `repeat`, so
// activation checkpointing applies per block as it does for the catalog's.
//
// What a graph cannot say: a float buffer stored as an initializer (rotary
// inv_freq, a cached cos/sin table, a float mask) counts as parameters, and
// so does a tied LM head whose transpose an exporter folded into a new
// initializer (noted; export with do_constant_folding=False). Weights held
// in Constant nodes rather than initializers, and operators of another
// domain or newer than the model's opset, are not counted (noted); control
// flow (If, Loop, Scan subgraphs) is refused. Attention that is not
// MatMul -> Softmax -> MatMul with linear projections counts as an
// element-wise softmax (noted). An export in eval mode may fold
// BatchNormalization into its convolution; training-mode exports keep it.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// Largest serialized model accepted. Weights are not needed (see
// onnx_strip.h): a graph of a large model is a few hundred kilobytes
// without them.
inline constexpr size_t kMaxOnnxBytes = size_t{64} << 20;

// Most nodes a graph may have (exports of the largest models have tens of
// thousands).
inline constexpr int kMaxOnnxNodes = 250000;

struct OnnxOptions {
  // Binds every symbolic dimension other than the batch (a sequence length,
  // "seq", "sequence_length") to this many positions. 0: a graph with such a
  // dimension is refused with the dimension named. A graph whose inputs fix
  // every length keeps them (a note says so). Either way the spec's layers
  // describe the graph at these lengths: do not rescale it with
  // TrainingSetup.positions again.
  uint64_t positions = 0;
  // Spec name; empty takes the graph's name, else "onnx-model".
  std::string name;
};

// The spec a graph describes and what the conversion decided.
struct OnnxConversion {
  v1::ModelSpec spec;
  // Which axis of which input is the batch, and why.
  std::string batch_axis;
  // What a reviewer should know: the batch axis, symbolic dimensions bound,
  // patterns not recognized, tensors whose size is unknown.
  std::vector<std::string> notes;
};

// Converts serialized ONNX ModelProto bytes into a valid spec whose
// CountParams equals the parameter count of the graph's initializers (rules
// above).
//
// The batch axis: (1) a symbolic dimension (dim_param) that every graph
// input has is the batch; when several are shared, one named like a batch
// ("batch", "batch_size", "N", "B", "bs") wins, else the one at the lowest
// axis of the first input; an input's unnamed dynamic dimension counts only
// when the graph has a single input. (2) Otherwise a leading dimension of
// the same fixed size N in every input is the batch, exported at batch N
// (sizes are divided by N). (3) Otherwise the graph has no batch axis and is
// refused: it describes one fixed computation whatever the batch (the
// reference data excludes runs measured on such exports). Rank-0 inputs are
// ignored.
//
// INVALID_ARGUMENT, naming what is wrong: empty, oversized (kMaxOnnxBytes)
// or non-ONNX bytes, truncated bytes, more than kMaxOnnxNodes nodes, a node
// that reads an undefined value or does not fit its operator's schema,
// control flow, no batch axis, an input dimension of 0 or above 2^32, an
// unbound symbolic dimension, a failing shape inference, more than 10^14
// parameters.
absl::StatusOr<OnnxConversion> SpecFromOnnx(absl::string_view model_bytes,
                                            const OnnxOptions& options);

}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_ONNX_IMPORT_H_
