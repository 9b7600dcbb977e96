#ifndef HEADROOM_TESTS_CORE_FRONTENDS_ONNX_TEST_GRAPHS_H_
#define HEADROOM_TESTS_CORE_FRONTENDS_ONNX_TEST_GRAPHS_H_

// ONNX graphs built in C++ with the onnx::ModelProto API, as torch.onnx
// exports them (opset 17: MatMul + Add linears, LayerNormalization, heads
// split by Reshape/Transpose), for the ONNX front-end's tests.

#include <cstdint>
#include <string>
#include <vector>

#include "onnx/onnx_pb.h"

namespace headroom::testing {

// A dimension of a graph input: a size, or a symbol ("batch", "seq").
struct Dim {
  Dim(int64_t v) : value(v) {}      // NOLINT: implicit on purpose
  Dim(const char* p) : param(p) {}  // NOLINT
  int64_t value = -1;
  std::string param;
};

onnx::AttributeProto IntAttr(const std::string& name, int64_t value);
onnx::AttributeProto IntsAttr(const std::string& name,
                              const std::vector<int64_t>& values);
onnx::AttributeProto FloatAttr(const std::string& name, float value);

class GraphBuilder {
 public:
  explicit GraphBuilder(const std::string& name, int opset = 17);

  // A float graph input (or INT64 for token ids).
  std::string Input(const std::string& name, const std::vector<Dim>& dims,
                    int32_t elem_type = onnx::TensorProto::FLOAT);
  // A float weight with dims and no data (the planner reads no values);
  // with `with_data`, zero-filled raw_data of the right size.
  std::string Weight(const std::string& name, const std::vector<int64_t>& dims,
                     bool with_data = false);
  // An INT64 constant initializer holding `values` (shapes, axes, indices).
  std::string Ints(const std::string& name, const std::vector<int64_t>& values);
  // A float scalar constant initializer.
  std::string Scalar(const std::string& name, float value);
  // A node; returns its outputs, named "<name>:0", "<name>:1", ...
  std::vector<std::string> Node(
      const std::string& op, const std::vector<std::string>& inputs,
      const std::string& name,
      const std::vector<onnx::AttributeProto>& attrs = {}, int outputs = 1);
  // The same with one output.
  std::string Op(const std::string& op, const std::vector<std::string>& inputs,
                 const std::string& name,
                 const std::vector<onnx::AttributeProto>& attrs = {});
  void Output(const std::string& tensor);

  // y = x W + b; W stored [in, out] as torch exports nn.Linear.
  std::string Linear(const std::string& x, int64_t in, int64_t out, bool bias,
                     const std::string& name, bool with_data = false);
  std::string LayerNorm(const std::string& x, int64_t dim,
                        const std::string& name);
  // GELU written out (erf form), as opset-17 exports write nn.GELU.
  std::string Gelu(const std::string& x, const std::string& name);
  // Multi-head self-attention on x [batch, seq, hidden]: separate or fused
  // Q/K/V projections with biases, scaled scores, an optional additive mask
  // [batch, 1, 1, seq], softmax, context, output projection.
  std::string Attention(const std::string& x, int64_t hidden, int64_t heads,
                        bool fused_qkv, const std::string& mask,
                        const std::string& name);
  // hidden -> ffn -> hidden with GELU and biases.
  std::string Mlp(const std::string& x, int64_t hidden, int64_t ffn,
                  const std::string& name);

  onnx::ModelProto& model() { return model_; }
  std::string Serialize() const { return model_.SerializeAsString(); }

 private:
  onnx::ModelProto model_;
  onnx::GraphProto* graph_;
};

// Architectures of the three-ways test, sized by their published configs.
struct TransformerShape {
  int64_t layers = 12;
  int64_t hidden = 768;
  int64_t heads = 12;
  int64_t ffn = 3072;
  int64_t vocab = 0;      // text models
  int64_t positions = 0;  // text: sequence length
};

// GPT-2 (GPT2LMHeadModel): wte + wpe (read at constant positions), pre-LN
// blocks with fused c_attn and a causal mask, ln_f, LM head tied to wte.
// The input's sequence axis is the symbol "sequence". The options describe
// the catalog's measured export instead (no wpe, untied head with a bias).
struct Gpt2Options {
  bool position_table = true;
  bool tied_head = true;
  bool head_bias = false;
};
std::string Gpt2Graph(const TransformerShape& shape,
                      const Gpt2Options& options = {});

// BERT (BertModel): word embeddings + position and token-type tables read at
// constant indices, embedding LayerNorm, post-LN encoder with an additive
// attention mask from a second input, pooler dense + tanh on [CLS]. Without
// position tables: the catalog's measured export.
std::string BertGraph(const TransformerShape& shape,
                      bool position_tables = true);

// ViT (ViTModel): patch conv, class token, position table, pre-LN encoder,
// final LayerNorm, pooler dense + tanh on the class token. With `classes`:
// the catalog's measured export instead (no class token or position table,
// mean pool over the patches, a `classes`-way head).
std::string VitGraph(const TransformerShape& shape, int64_t image,
                     int64_t patch, int64_t classes = 0);

// Llama (LlamaForCausalLM) as opset-17 exports write it: token embeddings,
// RMSNorm written out (x * 1/sqrt(mean(x^2) + eps) * weight), attention
// with grouped K/V heads (repeated by Expand) and rotary embeddings computed
// from a position_ids input and the inv_freq buffer, SwiGLU MLP (SiLU as
// x * sigmoid(x)), final norm, untied LM head. Inputs [batch, positions].
struct LlamaShape {
  int64_t layers = 2;
  int64_t hidden = 256;
  int64_t heads = 8;
  int64_t kv_heads = 2;
  int64_t ffn = 688;
  int64_t vocab = 1000;
  int64_t positions = 128;
};
std::string LlamaGraph(const LlamaShape& shape);

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_CORE_FRONTENDS_ONNX_TEST_GRAPHS_H_
