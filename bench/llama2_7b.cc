#include "bench/llama2_7b.h"

namespace headroom {
namespace bench {
namespace {

constexpr uint64_t kVocab = 32000;
constexpr uint64_t kHidden = 4096;
constexpr uint64_t kHeads = 32;
constexpr uint64_t kLayers = 32;
constexpr uint64_t kFfn = 11008;
constexpr uint64_t kPositions = 4096;

void AddRmsNorm(const char* name, v1::Block* block) {
  v1::Layer* layer = block->add_layers();
  layer->set_name(name);
  layer->mutable_norm()->set_kind(v1::Norm::RMS);
  layer->mutable_norm()->set_dim(kHidden);
}

}  // namespace

v1::ModelSpec Llama2SevenBSpec() {
  v1::ModelSpec spec;
  spec.set_name("llama2-7b-inline");
  spec.set_family("transformer");
  spec.set_source("Llama 2 7B (Touvron et al. 2023; HF config)");
  spec.set_input_source("4096-token context");
  spec.set_positions(kPositions);

  v1::Layer* embed = spec.add_layers();
  embed->set_name("embed_tokens");
  embed->mutable_embedding()->set_num_embeddings(kVocab);
  embed->mutable_embedding()->set_dim(kHidden);

  v1::Layer* decoder = spec.add_layers();
  decoder->set_name("layers");
  decoder->set_repeat(kLayers);
  v1::Block* block = decoder->mutable_block();
  AddRmsNorm("input_norm", block);
  v1::Layer* attn = block->add_layers();
  attn->set_name("attn");
  attn->mutable_attention()->set_hidden(kHidden);
  attn->mutable_attention()->set_heads(kHeads);
  AddRmsNorm("post_attn_norm", block);
  v1::Layer* mlp = block->add_layers();
  mlp->set_name("mlp");
  mlp->mutable_mlp()->set_hidden(kHidden);
  mlp->mutable_mlp()->set_ffn(kFfn);
  mlp->mutable_mlp()->set_gated(true);

  v1::Layer* norm = spec.add_layers();
  norm->set_name("norm");
  norm->mutable_norm()->set_kind(v1::Norm::RMS);
  norm->mutable_norm()->set_dim(kHidden);

  v1::Layer* head = spec.add_layers();
  head->set_name("lm_head");
  head->mutable_linear()->set_in_features(kHidden);
  head->mutable_linear()->set_out_features(kVocab);
  head->mutable_linear()->set_logits(true);
  return spec;
}

v1::CheckFitRequest Llama2SevenBCheckFitRequest() {
  v1::CheckFitRequest request;
  *request.mutable_model()->mutable_spec() = Llama2SevenBSpec();
  request.mutable_setup()->set_precision(v1::TrainingSetup::BF16_MIXED);
  request.mutable_setup()->set_optimizer(v1::TrainingSetup::ADAMW);
  for (uint64_t batch : {1, 8, 32}) request.add_batches(batch);
  for (const char* gpu : {"L4", "H100", "A100-80GB"}) {
    request.add_targets()->set_gpu(gpu);
  }
  return request;
}

}  // namespace bench
}  // namespace headroom
