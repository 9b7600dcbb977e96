#include "core/frontends/onnx_import.h"

#include <random>
#include <string>
#include <vector>

#include "base/json_io.h"
#include "core/frontends/hf_config.h"
#include "core/frontends/onnx_strip.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "gtest/gtest.h"
#include "io/files.h"
#include "tests/core/frontends/onnx_test_graphs.h"

namespace headroom {
namespace {

using ::headroom::testing::GraphBuilder;
using ::headroom::testing::IntAttr;
using ::headroom::testing::IntsAttr;
using ::testing::AllOf;
using ::testing::HasSubstr;

OnnxConversion Convert(const std::string& bytes, uint64_t positions = 0) {
  OnnxOptions options;
  options.positions = positions;
  absl::StatusOr<OnnxConversion> converted = SpecFromOnnx(bytes, options);
  EXPECT_TRUE(converted.ok()) << converted.status();
  if (!converted.ok()) return {};
  return *std::move(converted);
}

absl::Status ErrorOf(const std::string& bytes, uint64_t positions = 0) {
  OnnxOptions options;
  options.positions = positions;
  return SpecFromOnnx(bytes, options).status();
}

// fp32 weights and activations, AdamW: the calibration runs' setup.
MemoryProfile Profile(const v1::ModelSpec& spec) {
  absl::StatusOr<MemoryProfile> profile =
      BuildProfile(spec, v1::TrainingSetup());
  EXPECT_TRUE(profile.ok()) << profile.status();
  return profile.ok() ? *profile : MemoryProfile{};
}

// x [batch, 784] -> Gemm 784x256 -> Relu -> Gemm 256x10 (the logits).
std::string MlpGraph() {
  GraphBuilder g("mnist-mlp");
  const std::string x = g.Input("x", {"batch", 784});
  const std::string w1 = g.Weight("fc1.weight", {256, 784});
  const std::string b1 = g.Weight("fc1.bias", {256});
  const std::string h =
      g.Op("Gemm", {x, w1, b1}, "/fc1/Gemm", {IntAttr("transB", 1)});
  const std::string r = g.Op("Relu", {h}, "/relu/Relu");
  const std::string w2 = g.Weight("fc2.weight", {256, 10});
  const std::string b2 = g.Weight("fc2.bias", {10});
  g.Output(g.Op("Gemm", {r, w2, b2}, "/fc2/Gemm"));
  return g.Serialize();
}

TEST(OnnxImportTest, MlpParametersAndComponents) {
  const OnnxConversion c = Convert(MlpGraph());
  // 784*256 + 256 + 256*10 + 10.
  EXPECT_EQ(CountParams(c.spec), 203530u);
  ASSERT_EQ(c.spec.layers_size(), 3);
  EXPECT_EQ(c.spec.layers(0).linear().in_features(), 784u);
  EXPECT_EQ(c.spec.layers(0).linear().out_features(), 256u);
  EXPECT_TRUE(c.spec.layers(0).linear().bias());
  EXPECT_FALSE(c.spec.layers(0).linear().logits());
  EXPECT_EQ(c.spec.layers(1).elementwise().op(), v1::Elementwise::ACTIVATION);
  EXPECT_TRUE(c.spec.layers(2).linear().logits());
  EXPECT_EQ(c.spec.positions(), 1u);
  EXPECT_EQ(c.batch_axis, "batch axis: symbolic dimension 'batch' (x axis 0)");

  const MemoryProfile p = Profile(c.spec);
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 203530.0 * 16);
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], 203530.0 * 20);
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kOutputs], 256.0 * 4);   // fc1
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kInternal], 256.0 * 4);  // relu
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kTransient], 10.0 * 8);  // logits
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kAttention], 0);
}

// x [batch, 3, 32, 32] -> Conv 3x3 (16) -> BatchNorm -> Relu -> MaxPool 2
// -> Flatten -> Gemm 4096x10.
std::string ConvGraph() {
  GraphBuilder g("small-cnn");
  const std::string x = g.Input("x", {"N", 3, 32, 32});
  const std::string w = g.Weight("conv.weight", {16, 3, 3, 3});
  const std::string b = g.Weight("conv.bias", {16});
  std::string h =
      g.Op("Conv", {x, w, b}, "/conv/Conv",
           {IntsAttr("kernel_shape", {3, 3}), IntsAttr("pads", {1, 1, 1, 1})});
  h = g.Op(
      "BatchNormalization",
      {h, g.Weight("bn.weight", {16}), g.Weight("bn.bias", {16}),
       g.Weight("bn.running_mean", {16}), g.Weight("bn.running_var", {16})},
      "/bn/BatchNormalization");
  h = g.Op("Relu", {h}, "/relu/Relu");
  h = g.Op("MaxPool", {h}, "/pool/MaxPool",
           {IntsAttr("kernel_shape", {2, 2}), IntsAttr("strides", {2, 2})});
  h = g.Op("Flatten", {h}, "/flatten/Flatten", {IntAttr("axis", 1)});
  g.Output(g.Op(
      "Gemm", {h, g.Weight("fc.weight", {10, 4096}), g.Weight("fc.bias", {10})},
      "/fc/Gemm", {IntAttr("transB", 1)}));
  return g.Serialize();
}

TEST(OnnxImportTest, ConvNetParametersAndComponents) {
  const OnnxConversion c = Convert(ConvGraph());
  // conv 16*3*9 + 16, BN scale and shift 2*16 (running stats are buffers),
  // fc 4096*10 + 10.
  EXPECT_EQ(CountParams(c.spec), 448u + 32u + 40970u);
  EXPECT_EQ(c.spec.family(), "conv");
  EXPECT_EQ(c.spec.positions(), 1024u);  // 32x32, the conv's output grid
  ASSERT_EQ(c.spec.layers_size(), 5);
  const v1::Conv& conv = c.spec.layers(0).conv();
  EXPECT_EQ(conv.in_channels(), 3u);
  EXPECT_EQ(conv.out_channels(), 16u);
  EXPECT_THAT(conv.kernel(), ::testing::ElementsAre(3u, 3u));
  EXPECT_EQ(c.spec.layers(1).norm().kind(), v1::Norm::BATCH);
  EXPECT_EQ(c.spec.layers(3).elementwise().op(), v1::Elementwise::POOL);
  EXPECT_EQ(c.spec.layers(3).positions(), 256u);
  EXPECT_TRUE(c.spec.layers(4).linear().logits());

  const MemoryProfile p = Profile(c.spec);
  const double map = 16 * 1024 * 4.0;  // one 16x32x32 fp32 feature map
  // Conv output, BN output, pooled map (16x16x16).
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kOutputs], map + map + map / 4);
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kInternal], map);  // relu
  // The conv's backward holds input and output gradients: 16x32x32 + 3x32x32.
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kTransient], (16 + 3) * 1024 * 4.0);
  EXPECT_DOUBLE_EQ(p.fixed_bytes[kOptimizer], 41450.0 * 16);
  EXPECT_DOUBLE_EQ(p.update_bytes[kOptimizer], 41450.0 * 20);
}

// x [batch, seq, 64] -> LayerNorm -> 4-head self-attention (separate Q, K,
// V with biases) -> residual add. seq is symbolic and bound by positions.
std::string AttentionGraph() {
  GraphBuilder g("attention-block");
  const std::string x = g.Input("x", {"batch", "seq", 64});
  const std::string a = g.LayerNorm(x, 64, "/ln");
  const std::string y = g.Attention(a, 64, 4, false, "", "/attn");
  g.Output(g.Op("Add", {x, y}, "/residual/Add"));
  return g.Serialize();
}

TEST(OnnxImportTest, AttentionBlockParametersAndComponents) {
  const OnnxConversion c = Convert(AttentionGraph(), /*positions=*/128);
  // LayerNorm 2*64; Q, K, V, O 4*(64*64 + 64).
  EXPECT_EQ(CountParams(c.spec), 128u + 16640u);
  EXPECT_EQ(c.spec.family(), "transformer");
  EXPECT_EQ(c.spec.positions(), 128u);
  ASSERT_EQ(c.spec.layers_size(), 2);
  const v1::Attention& attn = c.spec.layers(1).attention();
  EXPECT_EQ(c.spec.layers(1).name(), "/attn.query+output");
  EXPECT_EQ(attn.hidden(), 64u);
  EXPECT_EQ(attn.heads(), 4u);
  EXPECT_EQ(attn.kv_heads(), 0u);
  EXPECT_TRUE(attn.qkv_bias());
  EXPECT_TRUE(attn.out_bias());
  EXPECT_FALSE(attn.fused());
  EXPECT_THAT(c.notes, ::testing::Contains(
                           "symbolic dimension 'seq' bound to 128 positions"));

  const MemoryProfile p = Profile(c.spec);
  const double p_tokens = 128;
  // Norm output; Q, K, V, context, output (5 x 128 x 64).
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kOutputs],
                   p_tokens * 64 * 4 + 5 * p_tokens * 64 * 4);
  // Softmax probabilities: 4 heads x 128 x 128; their backward holds the
  // gradients of probabilities and scores.
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kAttention], 4 * p_tokens * p_tokens * 4);
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kTransient],
                   4 * p_tokens * p_tokens * 2 * 4);
  // Mean and rstd per row; the residual add saves nothing.
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kInternal], p_tokens * 8);
}

TEST(OnnxImportTest, AttentionNeedsPositionsForASymbolicLength) {
  const absl::Status status = ErrorOf(AttentionGraph());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("graph input 'x' axis 1 is symbolic ('seq')"),
                    HasSubstr("setup.positions")));
}

// x [50, batch, 32] (time-major, as ONNX's LSTM takes it) -> LSTM 64 ->
// last hidden state -> Gemm 64x5.
std::string LstmGraph() {
  GraphBuilder g("lstm-classifier");
  const std::string x = g.Input("x", {50, "batch", 32});
  const std::vector<std::string> lstm =
      g.Node("LSTM",
             {x, g.Weight("lstm.W", {1, 256, 32}),
              g.Weight("lstm.R", {1, 256, 64}), g.Weight("lstm.B", {1, 512})},
             "/lstm/LSTM", {IntAttr("hidden_size", 64)}, 3);
  const std::string last =
      g.Op("Squeeze", {lstm[1], g.Ints("axes", {0})}, "/lstm/Squeeze");
  g.Output(g.Op(
      "Gemm", {last, g.Weight("fc.weight", {64, 5}), g.Weight("fc.bias", {5})},
      "/fc/Gemm"));
  return g.Serialize();
}

TEST(OnnxImportTest, LstmParametersAndComponents) {
  const OnnxConversion c = Convert(LstmGraph());
  // 4 gates x 64 x (32 + 64) + two bias vectors 2 x 4 x 64; fc 64*5 + 5.
  EXPECT_EQ(CountParams(c.spec), 25088u + 325u);
  EXPECT_EQ(c.spec.family(), "recurrent");
  EXPECT_EQ(c.batch_axis, "batch axis: symbolic dimension 'batch' (x axis 1)");
  ASSERT_EQ(c.spec.layers_size(), 2);
  const v1::Recurrent& r = c.spec.layers(0).recurrent();
  EXPECT_EQ(r.cell(), v1::Recurrent::LSTM);
  EXPECT_EQ(r.input_size(), 32u);
  EXPECT_EQ(r.hidden(), 64u);
  EXPECT_FALSE(r.bidirectional());
  EXPECT_FALSE(r.no_bias());

  const MemoryProfile p = Profile(c.spec);
  // 50 steps x (4 gates + cell + hidden) x 64.
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kRecurrent], 50 * 6 * 64 * 4.0);
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kOutputs], 50 * 64 * 4.0);
  EXPECT_DOUBLE_EQ(p.per_sample_bytes[kTransient], 5 * 8.0);
}

// A two-layer Llama as exports write it (RMSNorm as Pow/ReduceMean/Sqrt/
// Reciprocal/Mul, rotary embeddings, K/V heads repeated by Expand, SiLU as
// x * sigmoid(x)) against the same dimensions as a Hugging Face config.
TEST(OnnxImportTest, LlamaExportMatchesItsHfConfig) {
  const OnnxConversion c = Convert(testing::LlamaGraph({}));
  HfOptions hf_options;
  hf_options.seq_len = 128;
  absl::StatusOr<HfConversion> hf = SpecFromHfConfig(
      R"({"model_type": "llama", "hidden_size": 256,
          "intermediate_size": 688, "num_attention_heads": 8,
          "num_key_value_heads": 2, "num_hidden_layers": 2,
          "vocab_size": 1000, "max_position_embeddings": 128,
          "tie_word_embeddings": false})",
      hf_options);
  ASSERT_TRUE(hf.ok()) << hf.status();
  // The export holds rotary's inv_freq buffer (head_dim / 2 = 16 floats)
  // as an initializer, which the front-end cannot tell from a parameter.
  EXPECT_EQ(CountParams(c.spec), CountParams(hf->spec) + 16);
  EXPECT_EQ(c.batch_axis,
            "batch axis: symbolic dimension 'batch' (input_ids axis 0, "
            "position_ids axis 0)");
  // embed, inv_freq, two blocks, final norm, lm_head; rotary's cos and sin
  // are element-wise layers.
  const v1::Layer* block = nullptr;
  int norms = 0;
  for (const v1::Layer& layer : c.spec.layers()) {
    if (layer.has_block()) block = &layer;
    if (layer.has_norm()) ++norms;
  }
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->repeat(), 2u);
  ASSERT_EQ(block->block().layers_size(), 4);
  EXPECT_EQ(block->block().layers(0).norm().kind(), v1::Norm::RMS);
  const v1::Attention& attn = block->block().layers(1).attention();
  EXPECT_EQ(attn.heads(), 8u);
  EXPECT_EQ(attn.kv_heads(), 2u);
  EXPECT_FALSE(attn.qkv_bias());
  EXPECT_TRUE(block->block().layers(3).mlp().gated());
  EXPECT_EQ(block->block().layers(3).mlp().ffn(), 688u);
  EXPECT_EQ(norms, 1);  // the final norm
  EXPECT_TRUE(c.spec.layers(c.spec.layers_size() - 1).linear().logits());

  v1::TrainingSetup fused;
  fused.set_fused_attention(true);
  absl::StatusOr<MemoryProfile> a = BuildProfile(c.spec, fused);
  absl::StatusOr<MemoryProfile> b = BuildProfile(hf->spec, fused);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int k : {kOutputs, kInternal, kTransient}) {
    // Rotary's cos and sin tables are the whole difference (2 x 128 x 32
    // floats per sample).
    EXPECT_NEAR(a->per_sample_bytes[k], b->per_sample_bytes[k],
                k == kInternal ? 2 * 128 * 32 * 4.0 : 0)
        << ComponentNames()[k];
  }
}

// Graphs written by PyTorch 1.13's own exporter (tests/data/onnx, made by
// export_torch.py, weights stripped): dynamic axes compute every head shape
// with Shape/Gather/Div/Concat, opset 14 writes LayerNorm out, the exporter
// reaches equal-valued parameters through Identity nodes, MultiheadAttention
// transposes back before its residual add. Each gives torch's parameter
// count and the layers of its architecture.
TEST(OnnxImportTest, TorchExportsGiveTorchsParametersAndLayers) {
  auto load = [](const std::string& name) {
    absl::StatusOr<std::string> bytes =
        ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/onnx/" + name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    return bytes.ok() ? *bytes : std::string();
  };
  auto kinds = [](const google::protobuf::RepeatedPtrField<v1::Layer>& l) {
    std::string out;
    for (const v1::Layer& layer : l) {
      out += absl::StrCat(
          out.empty() ? "" : " ",
          layer.GetDescriptor()->FindFieldByNumber(layer.kind_case())->name());
    }
    return out;
  };

  const OnnxConversion gpt = Convert(load("gpt-mini.onnx"), 128);
  EXPECT_EQ(CountParams(gpt.spec), 1868800u);
  EXPECT_EQ(kinds(gpt.spec.layers()), "embedding parameters block norm linear");
  const v1::Layer& blocks = gpt.spec.layers(2);
  EXPECT_EQ(blocks.repeat(), 2u);
  EXPECT_EQ(kinds(blocks.block().layers()), "norm attention norm mlp");
  EXPECT_EQ(blocks.block().layers(1).attention().heads(), 4u);
  EXPECT_TRUE(gpt.spec.layers(4).linear().tied());
  EXPECT_TRUE(gpt.spec.layers(4).linear().logits());

  const OnnxConversion encoder = Convert(load("encoder-layer.onnx"));
  EXPECT_EQ(CountParams(encoder.spec), 789760u);
  EXPECT_EQ(kinds(encoder.spec.layers()), "attention norm mlp norm");
  EXPECT_EQ(encoder.spec.layers(0).attention().heads(), 8u);
  EXPECT_EQ(encoder.spec.positions(), 64u);

  const OnnxConversion lstm = Convert(load("lstm-classifier.onnx"));
  EXPECT_EQ(CountParams(lstm.spec), 58693u);
  EXPECT_EQ(kinds(lstm.spec.layers()), "recurrent recurrent linear");

  const OnnxConversion cnn = Convert(load("cnn-train.onnx"));
  EXPECT_EQ(CountParams(cnn.spec), 1290u);
  EXPECT_EQ(kinds(cnn.spec.layers()),
            "conv norm elementwise elementwise linear");
  EXPECT_EQ(cnn.spec.layers(1).norm().kind(), v1::Norm::BATCH);

  for (const OnnxConversion* c : {&gpt, &encoder, &lstm, &cnn}) {
    EXPECT_THAT(c->notes, ::testing::Not(::testing::Contains(
                              HasSubstr("not fed by a recognizable"))));
    EXPECT_THAT(
        c->notes,
        ::testing::Not(::testing::Contains(HasSubstr("no inferred shape"))));
  }
}

TEST(OnnxImportTest, FixedLeadingDimensionIsTheBatch) {
  GraphBuilder g("fixed");
  const std::string x = g.Input("x", {8, 16});
  g.Output(g.Linear(x, 16, 4, true, "/fc"));
  const OnnxConversion c = Convert(g.Serialize());
  EXPECT_THAT(c.batch_axis, HasSubstr("exported at batch 8"));
  EXPECT_EQ(c.spec.positions(), 1u);  // 8 x 4 outputs are 4 per sample
  EXPECT_DOUBLE_EQ(Profile(c.spec).per_sample_bytes[kTransient], 4 * 8.0);
}

TEST(OnnxImportTest, GraphWithoutBatchAxisIsRefused) {
  // The shapes of the excluded graph-sage-rec runs: node features and an
  // edge list, nothing per sample.
  GraphBuilder g("graph-sage");
  const std::string x = g.Input("x", {4, 128});
  g.Input("edge_index", {2, 4}, onnx::TensorProto::INT64);
  g.Output(g.Linear(x, 128, 8, true, "/fc"));
  const absl::Status status = ErrorOf(g.Serialize());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr("graph inputs have no batch axis"),
                    HasSubstr("x [4, 128], edge_index [2, 4]"),
                    HasSubstr("dynamic batch axis")));
}

TEST(OnnxImportTest, BadBytesAreRefusedByName) {
  EXPECT_THAT(ErrorOf("").message(), HasSubstr("ONNX model is empty"));
  for (const std::string& bytes :
       {std::string("hello, world"), std::string("{\"model_type\": \"gpt2\"}"),
        std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16)}) {
    const absl::Status status = ErrorOf(bytes);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bytes;
    EXPECT_THAT(status.message(), HasSubstr("not an ONNX model")) << bytes;
  }
  const std::string big(kMaxOnnxBytes + 1, '\0');
  EXPECT_THAT(ErrorOf(big).message(),
              HasSubstr(absl::StrCat("ONNX model is ", kMaxOnnxBytes + 1,
                                     " bytes; allowed up to ", kMaxOnnxBytes)));
}

TEST(OnnxImportTest, TruncatedBytesNeverCrash) {
  const std::string whole = ConvGraph();
  for (size_t cut : {size_t{1}, size_t{7}, whole.size() / 3, whole.size() / 2,
                     whole.size() - 9, whole.size() - 1}) {
    const absl::Status status = ErrorOf(whole.substr(0, cut));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << "cut at " << cut << ": " << status;
    EXPECT_FALSE(status.message().empty());
  }
}

TEST(OnnxImportTest, AbsurdSizesAreRefusedByName) {
  {
    GraphBuilder g("dim-zero");
    g.Output(g.Op("Relu", {g.Input("x", {"batch", int64_t{0}})}, "/relu"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("graph input 'x' dims[1] = 0 is out of range; "
                          "allowed 1..4294967296"));
  }
  {
    GraphBuilder g("dim-huge");
    g.Output(g.Op("Relu", {g.Input("x", {"batch", int64_t{1} << 40})}, "/r"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("graph input 'x' dims[1] = 1099511627776 is out of "
                          "range"));
  }
  {
    GraphBuilder g("weight-huge");
    const std::string x = g.Input("x", {"batch", 16});
    g.Output(g.Op("MatMul", {x, g.Weight("w", {16, int64_t{1} << 33})}, "/fc"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("initializer 'w' dims[1] = 8589934592 is out of "
                          "range"));
  }
  {
    GraphBuilder g("too-many-params");
    const std::string x = g.Input("x", {"batch", 16});
    std::string h = x;
    for (int i = 0; i < 30; ++i) {
      const std::string w = g.Weight("w" + std::to_string(i),
                                     {int64_t{1} << 32, int64_t{1} << 10});
      h = g.Op("Add", {h, g.Op("ReduceSum", {w}, "/sum" + std::to_string(i))},
               "/add" + std::to_string(i));
    }
    g.Output(h);
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("parameters; allowed up to 1e+14"));
  }
  {
    // One layer too many: kMaxOnnxNodes + 1 nodes.
    GraphBuilder g("deep");
    std::string h = g.Input("x", {"batch", 4});
    onnx::GraphProto* graph = g.model().mutable_graph();
    for (int i = 0; i <= kMaxOnnxNodes; ++i) {
      onnx::NodeProto* n = graph->add_node();
      n->set_op_type("Relu");
      n->add_input(h);
      h = "t" + std::to_string(i);
      n->add_output(h);
    }
    g.Output(h);
    EXPECT_THAT(
        ErrorOf(g.Serialize()).message(),
        HasSubstr(absl::StrCat("ONNX graph has ", kMaxOnnxNodes + 1,
                               " nodes; allowed up to ", kMaxOnnxNodes)));
  }
}

// Graphs that ONNX 1.12's own shape inference would crash on (found by
// mutating the graphs above): each is refused by name before it runs.
TEST(OnnxImportTest, GraphsThatCrashShapeInferenceAreRefused) {
  {
    // A node reading a value nothing defines.
    GraphBuilder g("undefined-input");
    g.Input("x", {"batch", 16});
    g.Output(g.Op("Relu", {"y"}, "/relu"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("node '/relu' (Relu) reads 'y', which no graph "
                          "input, initializer or earlier node provides"));
  }
  {
    // Stride 0: inference divides by it.
    GraphBuilder g("stride-zero");
    const std::string x = g.Input("x", {"batch", 3, 32, 32});
    g.Output(
        g.Op("Conv", {x, g.Weight("w", {8, 3, 3, 3})}, "/conv",
             {IntsAttr("kernel_shape", {3, 3}), IntsAttr("strides", {0, 0})}));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("node '/conv' (Conv) attribute strides = 0 is out "
                          "of range; allowed 1.."));
  }
  {
    // A transposed convolution whose weight has fewer axes than its input.
    GraphBuilder g("weight-rank");
    const std::string x = g.Input("x", {"batch", 3, 32, 32});
    g.Output(g.Op("ConvTranspose", {x, g.Weight("w", {3, 8})}, "/deconv"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("node '/deconv' (ConvTranspose): the weight has "
                          "rank 2; the input has rank 4"));
  }
  {
    // A shape constant holding fewer values than its dims say: inference
    // would copy past them; the Reshape's output stays unknown instead.
    GraphBuilder g("short-data");
    const std::string x = g.Input("x", {"batch", 16});
    onnx::TensorProto* shape = g.model().mutable_graph()->add_initializer();
    shape->set_name("shape");
    shape->set_data_type(onnx::TensorProto::INT64);
    shape->add_dims(3);
    shape->set_raw_data(std::string(5, '\0'));
    const std::string r = g.Op("Reshape", {x, "shape"}, "/reshape");
    g.Output(g.Linear(r, 16, 4, false, "/fc"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("is unknown after shape inference"));
  }
  {
    // A node without its required inputs.
    GraphBuilder g("arity");
    g.Input("x", {"batch", 16});
    g.Output(g.Op("MatMul", {"x"}, "/fc"));
    EXPECT_THAT(ErrorOf(g.Serialize()).message(),
                HasSubstr("node '/fc' (MatMul) does not fit its operator"));
  }
}

// Mutations of valid graphs (op types, inputs, attributes, dims, shape
// constants): each converts or gets INVALID_ARGUMENT, none crashes.
TEST(OnnxImportTest, MutatedGraphsNeverCrash) {
  std::vector<std::string> seeds = {
      ConvGraph(), AttentionGraph(), LstmGraph(),
      testing::LlamaGraph({1, 64, 4, 2, 96, 100, 16})};
  for (const char* name : {"gpt-mini.onnx", "encoder-layer.onnx"}) {
    absl::StatusOr<std::string> bytes =
        ReadFile(std::string(HEADROOM_SOURCE_DIR) + "/tests/data/onnx/" + name);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    seeds.push_back(*bytes);
  }
  const char* ops[] = {"MatMul",    "Conv",    "ConvTranspose",
                       "LSTM",      "Softmax", "Reshape",
                       "Transpose", "Gather",  "Split",
                       "Concat",    "Expand",  "ReduceMean",
                       "Gemm",      "MaxPool", "Slice",
                       "Squeeze",   "Flatten", "LayerNormalization",
                       "GRU",       "Tile"};
  std::mt19937 rng(20240601);
  int converted = 0;
  for (int it = 0; it < 600; ++it) {
    onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(seeds[it % seeds.size()]));
    onnx::GraphProto* g = m.mutable_graph();
    onnx::NodeProto* n = g->mutable_node(rng() % g->node_size());
    switch (rng() % 6) {
      case 0:
        n->set_op_type(ops[rng() % (sizeof(ops) / sizeof(ops[0]))]);
        break;
      case 1:
        if (n->input_size() > 1) n->mutable_input()->SwapElements(0, 1);
        break;
      case 2:
        if (n->attribute_size() > 0) {
          onnx::AttributeProto* a =
              n->mutable_attribute(rng() % n->attribute_size());
          a->set_i(static_cast<int64_t>(rng() % 9) - 4);
          for (int k = 0; k < a->ints_size(); ++k) {
            a->set_ints(k, static_cast<int64_t>(rng() % 9) - 4);
          }
        }
        break;
      case 3: {
        onnx::TensorProto* t =
            g->mutable_initializer(rng() % g->initializer_size());
        if (t->dims_size() > 0) {
          t->set_dims(rng() % t->dims_size(),
                      static_cast<int64_t>(rng() % 5) - 1);
        }
        for (int k = 0; k < t->int64_data_size(); ++k) {
          t->set_int64_data(k, static_cast<int64_t>(rng() % 11) - 5);
        }
        break;
      }
      case 4:
        if (n->input_size() > 0) {
          n->set_input(rng() % n->input_size(),
                       g->node(rng() % g->node_size()).output(0));
        }
        break;
      case 5:
        n->add_attribute()->CopyFrom(IntAttr("axis", rng() % 9 - 4));
        break;
    }
    OnnxOptions options;
    options.positions = 16;
    absl::StatusOr<OnnxConversion> c =
        SpecFromOnnx(m.SerializeAsString(), options);
    if (c.ok()) {
      ++converted;
    } else {
      EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument)
          << c.status();
    }
  }
  EXPECT_GT(converted, 0);
}

TEST(OnnxImportTest, StrippedWeightsGiveTheSameSpec) {
  GraphBuilder g("with-weights");
  std::string h = g.Input("x", {"batch", "seq", 256});
  h = g.Linear(h, 256, 1024, true, "/up", /*with_data=*/true);
  h = g.Gelu(h, "/act");
  h = g.Linear(h, 1024, 256, true, "/down", /*with_data=*/true);
  h = g.Op("Reshape", {h, g.Ints("shape", {0, -1})}, "/flat");
  g.Output(h);
  const std::string whole = g.Serialize();
  ASSERT_GT(whole.size(), 2'000'000u);  // two 256x1024 fp32 matrices

  google::protobuf::io::ArrayInputStream input(whole.data(),
                                               static_cast<int>(whole.size()));
  absl::StatusOr<std::string> stripped = StripOnnxWeights(&input, 1 << 20);
  ASSERT_TRUE(stripped.ok()) << stripped.status();
  // The matrices lose their data; the biases (1 KiB, 4 KiB) and the
  // Reshape's shape keep theirs.
  EXPECT_LT(stripped->size(), 12'000u);
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(*stripped));
  EXPECT_EQ(model.graph().initializer(0).dims(1), 1024);
  EXPECT_TRUE(model.graph().initializer(0).raw_data().empty());

  const OnnxConversion a = Convert(whole, 64);
  const OnnxConversion b = Convert(*stripped, 64);
  EXPECT_EQ(CountParams(a.spec), 2u * 256 * 1024 + 1024 + 256);
  EXPECT_EQ(ToJson(a.spec, false), ToJson(b.spec, false));
  ASSERT_EQ(b.spec.layers_size(), 1);
  EXPECT_EQ(b.spec.layers(0).mlp().ffn(), 1024u);
}

TEST(OnnxImportTest, StripRefusesBadBytes) {
  const std::string whole = ConvGraph();
  const std::string cut = whole.substr(0, whole.size() - 3);
  google::protobuf::io::ArrayInputStream input(cut.data(),
                                               static_cast<int>(cut.size()));
  const absl::Status status = StripOnnxWeights(&input, 1 << 20).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not an ONNX model"));

  google::protobuf::io::ArrayInputStream small(whole.data(),
                                               static_cast<int>(whole.size()));
  EXPECT_THAT(StripOnnxWeights(&small, 100).status().message(),
              HasSubstr("larger than 100 bytes even without its weights"));
}

TEST(OnnxImportTest, SpecRoundTripsThroughJson) {
  const OnnxConversion c = Convert(AttentionGraph(), 128);
  absl::StatusOr<v1::ModelSpec> again =
      ParseSpecJson(ToJson(c.spec, true), "converted");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(CountParams(*again), CountParams(c.spec));
}

}  // namespace
}  // namespace headroom
