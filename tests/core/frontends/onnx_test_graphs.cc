#include "tests/core/frontends/onnx_test_graphs.h"

#include <cmath>

namespace headroom::testing {

onnx::AttributeProto IntAttr(const std::string& name, int64_t value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(value);
  return a;
}

onnx::AttributeProto IntsAttr(const std::string& name,
                              const std::vector<int64_t>& values) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) a.add_ints(v);
  return a;
}

onnx::AttributeProto FloatAttr(const std::string& name, float value) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(value);
  return a;
}

GraphBuilder::GraphBuilder(const std::string& name, int opset) {
  model_.set_ir_version(8);
  model_.set_producer_name("headroom-test");
  onnx::OperatorSetIdProto* o = model_.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  graph_ = model_.mutable_graph();
  graph_->set_name(name);
}

std::string GraphBuilder::Input(const std::string& name,
                                const std::vector<Dim>& dims,
                                int32_t elem_type) {
  onnx::ValueInfoProto* in = graph_->add_input();
  in->set_name(name);
  auto* tensor = in->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  auto* shape = tensor->mutable_shape();
  for (const Dim& d : dims) {
    auto* dim = shape->add_dim();
    if (d.param.empty()) {
      dim->set_dim_value(d.value);
    } else {
      dim->set_dim_param(d.param);
    }
  }
  return name;
}

std::string GraphBuilder::Weight(const std::string& name,
                                 const std::vector<int64_t>& dims,
                                 bool with_data) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t elements = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    elements *= d;
  }
  if (with_data) t->set_raw_data(std::string(elements * 4, '\0'));
  return name;
}

std::string GraphBuilder::Ints(const std::string& name,
                               const std::vector<int64_t>& values) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::INT64);
  t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
  return name;
}

std::string GraphBuilder::Scalar(const std::string& name, float value) {
  onnx::TensorProto* t = graph_->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  t->add_float_data(value);
  return name;
}

std::vector<std::string> GraphBuilder::Node(
    const std::string& op, const std::vector<std::string>& inputs,
    const std::string& name, const std::vector<onnx::AttributeProto>& attrs,
    int outputs) {
  onnx::NodeProto* n = graph_->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const std::string& in : inputs) n->add_input(in);
  std::vector<std::string> out;
  for (int i = 0; i < outputs; ++i) {
    out.push_back(name + ":" + std::to_string(i));
    n->add_output(out.back());
  }
  for (const onnx::AttributeProto& a : attrs) *n->add_attribute() = a;
  return out;
}

std::string GraphBuilder::Op(const std::string& op,
                             const std::vector<std::string>& inputs,
                             const std::string& name,
                             const std::vector<onnx::AttributeProto>& attrs) {
  return Node(op, inputs, name, attrs, 1)[0];
}

void GraphBuilder::Output(const std::string& tensor) {
  onnx::ValueInfoProto* out = graph_->add_output();
  out->set_name(tensor);
}

std::string GraphBuilder::Linear(const std::string& x, int64_t in, int64_t out,
                                 bool bias, const std::string& name,
                                 bool with_data) {
  const std::string w = Weight(name + ".weight", {in, out}, with_data);
  std::string y = Op("MatMul", {x, w}, name + "/MatMul");
  if (bias) {
    const std::string b = Weight(name + ".bias", {out}, with_data);
    y = Op("Add", {y, b}, name + "/Add");
  }
  return y;
}

std::string GraphBuilder::LayerNorm(const std::string& x, int64_t dim,
                                    const std::string& name) {
  const std::string scale = Weight(name + ".weight", {dim});
  const std::string bias = Weight(name + ".bias", {dim});
  return Op("LayerNormalization", {x, scale, bias},
            name + "/LayerNormalization",
            {IntAttr("axis", -1), FloatAttr("epsilon", 1e-5f)});
}

std::string GraphBuilder::Gelu(const std::string& x, const std::string& name) {
  const std::string sqrt2 = Scalar(name + ".sqrt2", std::sqrt(2.0f));
  const std::string one = Scalar(name + ".one", 1.0f);
  const std::string half = Scalar(name + ".half", 0.5f);
  std::string t = Op("Div", {x, sqrt2}, name + "/Div");
  t = Op("Erf", {t}, name + "/Erf");
  t = Op("Add", {t, one}, name + "/Add");
  t = Op("Mul", {x, t}, name + "/Mul");
  return Op("Mul", {t, half}, name + "/Mul_1");
}

std::string GraphBuilder::Attention(const std::string& x, int64_t hidden,
                                    int64_t heads, bool fused_qkv,
                                    const std::string& mask,
                                    const std::string& name) {
  const int64_t hd = hidden / heads;
  std::string q, k, v;
  if (fused_qkv) {
    const std::string qkv =
        Linear(x, hidden, 3 * hidden, true, name + ".c_attn");
    const std::string split = Ints(name + ".split", {hidden, hidden, hidden});
    const std::vector<std::string> parts =
        Node("Split", {qkv, split}, name + "/Split", {IntAttr("axis", 2)}, 3);
    q = parts[0];
    k = parts[1];
    v = parts[2];
  } else {
    q = Linear(x, hidden, hidden, true, name + ".query");
    k = Linear(x, hidden, hidden, true, name + ".key");
    v = Linear(x, hidden, hidden, true, name + ".value");
  }
  const std::string heads_shape =
      Ints(name + ".heads_shape", {0, 0, heads, hd});
  auto split_heads = [&](const std::string& t, const std::string& tag,
                         const std::vector<int64_t>& perm) {
    const std::string r =
        Op("Reshape", {t, heads_shape}, name + "/Reshape_" + tag);
    return Op("Transpose", {r}, name + "/Transpose_" + tag,
              {IntsAttr("perm", perm)});
  };
  q = split_heads(q, "q", {0, 2, 1, 3});
  k = split_heads(k, "k", {0, 2, 3, 1});
  v = split_heads(v, "v", {0, 2, 1, 3});
  std::string scores = Op("MatMul", {q, k}, name + "/MatMul_scores");
  const std::string scale =
      Scalar(name + ".scale", std::sqrt(static_cast<float>(hd)));
  scores = Op("Div", {scores, scale}, name + "/Div_scale");
  if (!mask.empty()) scores = Op("Add", {scores, mask}, name + "/Add_mask");
  const std::string probs =
      Op("Softmax", {scores}, name + "/Softmax", {IntAttr("axis", -1)});
  std::string context = Op("MatMul", {probs, v}, name + "/MatMul_context");
  context = Op("Transpose", {context}, name + "/Transpose_context",
               {IntsAttr("perm", {0, 2, 1, 3})});
  const std::string merged_shape = Ints(name + ".merged_shape", {0, 0, hidden});
  context = Op("Reshape", {context, merged_shape}, name + "/Reshape_context");
  return Linear(context, hidden, hidden, true,
                name + (fused_qkv ? ".c_proj" : ".output"));
}

std::string GraphBuilder::Mlp(const std::string& x, int64_t hidden, int64_t ffn,
                              const std::string& name) {
  std::string h = Linear(x, hidden, ffn, true, name + ".fc1");
  h = Gelu(h, name + ".act");
  return Linear(h, ffn, hidden, true, name + ".fc2");
}

namespace {

std::vector<int64_t> Range(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace

std::string Gpt2Graph(const TransformerShape& s, const Gpt2Options& options) {
  GraphBuilder g("gpt2");
  const std::string ids =
      g.Input("input_ids", {"batch", "sequence"}, onnx::TensorProto::INT64);
  const std::string wte =
      g.Weight("transformer.wte.weight", {s.vocab, s.hidden});
  std::string h = g.Op("Gather", {wte, ids}, "/transformer/wte/Gather");
  if (options.position_table) {
    const std::string wpe =
        g.Weight("transformer.wpe.weight", {s.positions, s.hidden});
    const std::string positions = g.Ints("position_ids", Range(s.positions));
    const std::string pe =
        g.Op("Gather", {wpe, positions}, "/transformer/wpe/Gather");
    h = g.Op("Add", {h, pe}, "/transformer/Add");
  }
  // Causal mask: a bool buffer, as GPT2Attention registers it.
  onnx::TensorProto* causal = g.model().mutable_graph()->add_initializer();
  causal->set_name("causal_mask");
  causal->set_data_type(onnx::TensorProto::BOOL);
  for (int64_t d : {int64_t{1}, int64_t{1}, s.positions, s.positions}) {
    causal->add_dims(d);
  }
  const std::string masked = g.Scalar("masked_bias", -1e4f);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "/transformer/h." + std::to_string(l);
    const std::string a = g.LayerNorm(h, s.hidden, p + "/ln_1");
    // GPT-2's causal mask selects the scores (Where), not an additive mask.
    const int64_t hd = s.hidden / s.heads;
    const std::string qkv =
        g.Linear(a, s.hidden, 3 * s.hidden, true, p + "/attn/c_attn");
    const std::string split =
        g.Ints(p + ".split", {s.hidden, s.hidden, s.hidden});
    const std::vector<std::string> parts = g.Node(
        "Split", {qkv, split}, p + "/attn/Split", {IntAttr("axis", 2)}, 3);
    const std::string heads_shape =
        g.Ints(p + ".heads_shape", {0, 0, s.heads, hd});
    auto heads = [&](const std::string& t, const std::string& tag,
                     const std::vector<int64_t>& perm) {
      const std::string r =
          g.Op("Reshape", {t, heads_shape}, p + "/attn/Reshape_" + tag);
      return g.Op("Transpose", {r}, p + "/attn/Transpose_" + tag,
                  {IntsAttr("perm", perm)});
    };
    const std::string q = heads(parts[0], "q", {0, 2, 1, 3});
    const std::string k = heads(parts[1], "k", {0, 2, 3, 1});
    const std::string v = heads(parts[2], "v", {0, 2, 1, 3});
    std::string scores = g.Op("MatMul", {q, k}, p + "/attn/MatMul");
    scores = g.Op(
        "Div",
        {scores, g.Scalar(p + ".scale", std::sqrt(static_cast<float>(hd)))},
        p + "/attn/Div");
    scores = g.Op("Where", {"causal_mask", scores, masked}, p + "/attn/Where");
    const std::string probs =
        g.Op("Softmax", {scores}, p + "/attn/Softmax", {IntAttr("axis", -1)});
    std::string ctx = g.Op("MatMul", {probs, v}, p + "/attn/MatMul_1");
    ctx = g.Op("Transpose", {ctx}, p + "/attn/Transpose_ctx",
               {IntsAttr("perm", {0, 2, 1, 3})});
    ctx = g.Op("Reshape", {ctx, g.Ints(p + ".merged", {0, 0, s.hidden})},
               p + "/attn/Reshape_ctx");
    const std::string attn =
        g.Linear(ctx, s.hidden, s.hidden, true, p + "/attn/c_proj");
    h = g.Op("Add", {h, attn}, p + "/Add");
    const std::string m = g.LayerNorm(h, s.hidden, p + "/ln_2");
    std::string f = g.Linear(m, s.hidden, s.ffn, true, p + "/mlp/c_fc");
    f = g.Gelu(f, p + "/mlp/act");
    f = g.Linear(f, s.ffn, s.hidden, true, p + "/mlp/c_proj");
    h = g.Op("Add", {h, f}, p + "/Add_1");
  }
  h = g.LayerNorm(h, s.hidden, "/transformer/ln_f");
  std::string logits;
  if (options.tied_head) {
    const std::string wt = g.Op("Transpose", {wte}, "/lm_head/Transpose",
                                {IntsAttr("perm", {1, 0})});
    logits = g.Op("MatMul", {h, wt}, "/lm_head/MatMul");
  } else {
    logits = g.Linear(h, s.hidden, s.vocab, options.head_bias, "/lm_head");
  }
  g.Output(logits);
  return g.Serialize();
}

std::string BertGraph(const TransformerShape& s, bool position_tables) {
  GraphBuilder g("bert");
  const std::string ids =
      g.Input("input_ids", {"batch", s.positions}, onnx::TensorProto::INT64);
  const std::string mask_in = g.Input("attention_mask", {"batch", s.positions});
  const std::string words =
      g.Weight("embeddings.word_embeddings.weight", {s.vocab, s.hidden});
  std::string e = g.Op("Gather", {words, ids}, "/embeddings/word/Gather");
  if (position_tables) {
    const std::string pos = g.Weight("embeddings.position_embeddings.weight",
                                     {s.positions, s.hidden});
    const std::string tt =
        g.Weight("embeddings.token_type_embeddings.weight", {2, s.hidden});
    const std::string pe =
        g.Op("Gather", {pos, g.Ints("position_ids", Range(s.positions))},
             "/embeddings/position/Gather");
    const std::string te = g.Op(
        "Gather",
        {tt, g.Ints("token_type_ids",
                    std::vector<int64_t>(static_cast<size_t>(s.positions), 0))},
        "/embeddings/token_type/Gather");
    e = g.Op("Add", {e, te}, "/embeddings/Add");
    e = g.Op("Add", {e, pe}, "/embeddings/Add_1");
  }
  std::string h = g.LayerNorm(e, s.hidden, "/embeddings/LayerNorm");
  // The extended mask: (1 - mask) * -10000 on [batch, 1, 1, seq].
  std::string m = g.Op("Unsqueeze", {mask_in, g.Ints("mask_axes", {1, 2})},
                       "/mask/Unsqueeze");
  m = g.Op("Sub", {g.Scalar("one", 1.0f), m}, "/mask/Sub");
  m = g.Op("Mul", {m, g.Scalar("big_negative", -1e4f)}, "/mask/Mul");
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "/encoder/layer." + std::to_string(l);
    const std::string a =
        g.Attention(h, s.hidden, s.heads, false, m, p + "/attention");
    h = g.LayerNorm(g.Op("Add", {a, h}, p + "/attention/Add"), s.hidden,
                    p + "/attention/LayerNorm");
    const std::string f = g.Mlp(h, s.hidden, s.ffn, p + "/mlp");
    h = g.LayerNorm(g.Op("Add", {f, h}, p + "/output/Add"), s.hidden,
                    p + "/output/LayerNorm");
  }
  const std::string cls = g.Op("Gather", {h, g.Ints("cls_index", {0})},
                               "/pooler/Gather", {IntAttr("axis", 1)});
  const std::string pooled =
      g.Linear(cls, s.hidden, s.hidden, true, "/pooler/dense");
  g.Output(g.Op("Tanh", {pooled}, "/pooler/Tanh"));
  return g.Serialize();
}

std::string VitGraph(const TransformerShape& s, int64_t image, int64_t patch,
                     int64_t classes) {
  GraphBuilder g("vit");
  const std::string pixels =
      g.Input("pixel_values", {"batch", 3, image, image});
  const int64_t grid = image / patch;
  const std::string w = g.Weight("embeddings.patch_embeddings.weight",
                                 {s.hidden, 3, patch, patch});
  const std::string b =
      g.Weight("embeddings.patch_embeddings.bias", {s.hidden});
  std::string x = g.Op("Conv", {pixels, w, b}, "/embeddings/patch/Conv",
                       {IntsAttr("kernel_shape", {patch, patch}),
                        IntsAttr("strides", {patch, patch})});
  x = g.Op("Reshape", {x, g.Ints("flat_shape", {0, s.hidden, grid * grid})},
           "/embeddings/Reshape");
  x = g.Op("Transpose", {x}, "/embeddings/Transpose",
           {IntsAttr("perm", {0, 2, 1})});
  if (classes == 0) {
    // The class token, expanded to the batch: Expand(cls, [N, 1, hidden])
    // with N read from the input's shape.
    const std::string cls = g.Weight("embeddings.cls_token", {1, 1, s.hidden});
    const std::string shape = g.Op("Shape", {pixels}, "/embeddings/Shape");
    const std::string n =
        g.Op("Slice", {shape, g.Ints("zero", {0}), g.Ints("one_i", {1})},
             "/embeddings/Slice");
    const std::string target =
        g.Op("Concat", {n, g.Ints("cls_rest", {1, s.hidden})},
             "/embeddings/Concat_shape", {IntAttr("axis", 0)});
    const std::string cls_b =
        g.Op("Expand", {cls, target}, "/embeddings/Expand");
    x = g.Op("Concat", {cls_b, x}, "/embeddings/Concat", {IntAttr("axis", 1)});
    const std::string pos = g.Weight("embeddings.position_embeddings",
                                     {1, grid * grid + 1, s.hidden});
    x = g.Op("Add", {x, pos}, "/embeddings/Add");
  }
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "/encoder/layer." + std::to_string(l);
    const std::string a = g.LayerNorm(x, s.hidden, p + "/layernorm_before");
    x = g.Op(
        "Add",
        {g.Attention(a, s.hidden, s.heads, false, "", p + "/attention"), x},
        p + "/Add");
    const std::string m = g.LayerNorm(x, s.hidden, p + "/layernorm_after");
    x = g.Op("Add", {g.Mlp(m, s.hidden, s.ffn, p + "/mlp"), x}, p + "/Add_1");
  }
  x = g.LayerNorm(x, s.hidden, "/layernorm");
  if (classes == 0) {
    const std::string cls = g.Op("Gather", {x, g.Ints("cls_index", {0})},
                                 "/pooler/Gather", {IntAttr("axis", 1)});
    const std::string pooled =
        g.Linear(cls, s.hidden, s.hidden, true, "/pooler/dense");
    g.Output(g.Op("Tanh", {pooled}, "/pooler/Tanh"));
  } else {
    const std::string pooled =
        g.Op("ReduceMean", {x}, "/pool/ReduceMean",
             {IntsAttr("axes", {1}), IntAttr("keepdims", 0)});
    g.Output(g.Linear(pooled, s.hidden, classes, true, "/head"));
  }
  return g.Serialize();
}

std::string LlamaGraph(const LlamaShape& s) {
  GraphBuilder g("llama");
  const int64_t hd = s.hidden / s.heads;
  const int64_t n = s.positions;
  const std::string ids =
      g.Input("input_ids", {"batch", n}, onnx::TensorProto::INT64);
  const std::string position_ids =
      g.Input("position_ids", {"batch", n}, onnx::TensorProto::INT64);
  std::string h =
      g.Op("Gather", {g.Weight("embed_tokens", {s.vocab, s.hidden}), ids},
           "/model/embed_tokens/Gather");
  // Rotary tables: freqs = position x inv_freq, emb = [freqs, freqs].
  const std::string inv_freq = g.Weight("rotary.inv_freq", {1, hd / 2, 1});
  std::string pos = g.Op("Cast", {position_ids}, "/rotary/Cast",
                         {IntAttr("to", onnx::TensorProto::FLOAT)});
  pos = g.Op("Unsqueeze", {pos, g.Ints("rotary.axis1", {1})},
             "/rotary/Unsqueeze");  // [b, 1, n]
  std::string freqs =
      g.Op("MatMul", {inv_freq, pos}, "/rotary/MatMul");  // [b, hd/2, n]
  freqs = g.Op("Transpose", {freqs}, "/rotary/Transpose",
               {IntsAttr("perm", {0, 2, 1})});  // [b, n, hd/2]
  const std::string emb =
      g.Op("Concat", {freqs, freqs}, "/rotary/Concat", {IntAttr("axis", -1)});
  const std::string axis1 = g.Ints("heads_axis", {1});
  const std::string cos = g.Op(
      "Unsqueeze", {g.Op("Cos", {emb}, "/rotary/Cos"), axis1}, "/rotary/U_cos");
  const std::string sin = g.Op(
      "Unsqueeze", {g.Op("Sin", {emb}, "/rotary/Sin"), axis1}, "/rotary/U_sin");

  auto rms = [&](const std::string& x, const std::string& name) {
    std::string v =
        g.Op("Pow", {x, g.Scalar(name + ".two", 2.0f)}, name + "/Pow");
    v = g.Op("ReduceMean", {v}, name + "/ReduceMean",
             {IntsAttr("axes", {-1}), IntAttr("keepdims", 1)});
    v = g.Op("Add", {v, g.Scalar(name + ".eps", 1e-6f)}, name + "/Add");
    v = g.Op("Sqrt", {v}, name + "/Sqrt");
    v = g.Op("Reciprocal", {v}, name + "/Reciprocal");
    v = g.Op("Mul", {x, v}, name + "/Mul");
    return g.Op("Mul", {g.Weight(name + ".weight", {s.hidden}), v},
                name + "/Mul_1");
  };
  auto rotate = [&](const std::string& x, const std::string& name) {
    const std::string axis = g.Ints(name + ".axis", {3});
    const std::string x1 = g.Op(
        "Slice",
        {x, g.Ints(name + ".s0", {0}), g.Ints(name + ".e0", {hd / 2}), axis},
        name + "/Slice");
    const std::string x2 = g.Op(
        "Slice",
        {x, g.Ints(name + ".s1", {hd / 2}), g.Ints(name + ".e1", {hd}), axis},
        name + "/Slice_1");
    const std::string rotated =
        g.Op("Concat", {g.Op("Neg", {x2}, name + "/Neg"), x1}, name + "/Concat",
             {IntAttr("axis", -1)});
    return g.Op("Add",
                {g.Op("Mul", {x, cos}, name + "/Mul"),
                 g.Op("Mul", {rotated, sin}, name + "/Mul_1")},
                name + "/Add");
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "/model/layers." + std::to_string(l);
    const std::string a = rms(h, p + "/input_layernorm");
    auto heads = [&](const std::string& t, int64_t count,
                     const std::string& tag) {
      const std::string r =
          g.Op("Reshape", {t, g.Ints(p + ".shape_" + tag, {0, n, count, hd})},
               p + "/self_attn/Reshape_" + tag);
      return g.Op("Transpose", {r}, p + "/self_attn/Transpose_" + tag,
                  {IntsAttr("perm", {0, 2, 1, 3})});
    };
    std::string q = heads(
        g.Linear(a, s.hidden, s.heads * hd, false, p + "/self_attn/q_proj"),
        s.heads, "q");
    std::string k = heads(
        g.Linear(a, s.hidden, s.kv_heads * hd, false, p + "/self_attn/k_proj"),
        s.kv_heads, "k");
    std::string v = heads(
        g.Linear(a, s.hidden, s.kv_heads * hd, false, p + "/self_attn/v_proj"),
        s.kv_heads, "v");
    q = rotate(q, p + "/self_attn/rotary_q");
    k = rotate(k, p + "/self_attn/rotary_k");
    // repeat_kv: [b, kv, n, hd] -> [b, kv, rep, n, hd] -> [b, heads, n, hd].
    const int64_t rep = s.heads / s.kv_heads;
    auto repeat = [&](const std::string& t, const std::string& tag) {
      std::string r =
          g.Op("Unsqueeze", {t, g.Ints(p + ".rep_axis_" + tag, {2})},
               p + "/self_attn/Unsqueeze_" + tag);
      r = g.Op(
          "Expand",
          {r, g.Ints(p + ".rep_shape_" + tag, {1, s.kv_heads, rep, n, hd})},
          p + "/self_attn/Expand_" + tag);
      return g.Op("Reshape",
                  {r, g.Ints(p + ".merged_" + tag, {0, s.heads, n, hd})},
                  p + "/self_attn/Reshape_rep_" + tag);
    };
    k = repeat(k, "k");
    v = repeat(v, "v");
    k = g.Op("Transpose", {k}, p + "/self_attn/Transpose_kt",
             {IntsAttr("perm", {0, 1, 3, 2})});
    std::string scores = g.Op("MatMul", {q, k}, p + "/self_attn/MatMul");
    scores = g.Op("Mul",
                  {scores, g.Scalar(p + ".scale",
                                    1.0f / std::sqrt(static_cast<float>(hd)))},
                  p + "/self_attn/Mul_scale");
    const std::string probs = g.Op(
        "Softmax", {scores}, p + "/self_attn/Softmax", {IntAttr("axis", -1)});
    std::string ctx = g.Op("MatMul", {probs, v}, p + "/self_attn/MatMul_1");
    ctx = g.Op("Transpose", {ctx}, p + "/self_attn/Transpose_ctx",
               {IntsAttr("perm", {0, 2, 1, 3})});
    ctx = g.Op("Reshape", {ctx, g.Ints(p + ".merged", {0, n, s.hidden})},
               p + "/self_attn/Reshape_ctx");
    h = g.Op(
        "Add",
        {h, g.Linear(ctx, s.hidden, s.hidden, false, p + "/self_attn/o_proj")},
        p + "/Add");
    const std::string m = rms(h, p + "/post_attention_layernorm");
    const std::string gate =
        g.Linear(m, s.hidden, s.ffn, false, p + "/mlp/gate_proj");
    const std::string up =
        g.Linear(m, s.hidden, s.ffn, false, p + "/mlp/up_proj");
    const std::string silu =
        g.Op("Mul", {gate, g.Op("Sigmoid", {gate}, p + "/mlp/Sigmoid")},
             p + "/mlp/Mul");
    const std::string prod = g.Op("Mul", {silu, up}, p + "/mlp/Mul_1");
    h = g.Op("Add",
             {h, g.Linear(prod, s.ffn, s.hidden, false, p + "/mlp/down_proj")},
             p + "/Add_1");
  }
  h = rms(h, "/model/norm");
  g.Output(g.Linear(h, s.hidden, s.vocab, false, "/lm_head"));
  return g.Serialize();
}

}  // namespace headroom::testing
