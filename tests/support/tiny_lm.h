#ifndef HEADROOM_TESTS_SUPPORT_TINY_LM_H_
#define HEADROOM_TESTS_SUPPORT_TINY_LM_H_

// A small language model nobody has measured (4 blocks of width 512, vocab
// 8000, 256 positions): its answers rest on the prior. The learning tests,
// in-process and with the real fleet, ask about it.

#include "headroom/v1/model.pb.h"

namespace headroom::testing {

inline v1::ModelSpec TinyLm() {
  v1::ModelSpec spec;
  spec.set_name("tiny-lm");
  spec.set_family("transformer");
  spec.set_positions(256);
  v1::Layer* embedding = spec.add_layers();
  embedding->mutable_embedding()->set_num_embeddings(8000);
  embedding->mutable_embedding()->set_dim(512);
  v1::Layer* blocks = spec.add_layers();
  blocks->set_repeat(4);
  auto* block = blocks->mutable_block();
  block->add_layers()->mutable_norm()->set_kind(v1::Norm::LAYER);
  block->mutable_layers(0)->mutable_norm()->set_dim(512);
  auto* attention = block->add_layers()->mutable_attention();
  attention->set_hidden(512);
  attention->set_heads(8);
  block->add_layers()->mutable_norm()->set_kind(v1::Norm::LAYER);
  block->mutable_layers(2)->mutable_norm()->set_dim(512);
  auto* mlp = block->add_layers()->mutable_mlp();
  mlp->set_hidden(512);
  mlp->set_ffn(2048);
  auto* head = spec.add_layers()->mutable_linear();
  head->set_in_features(512);
  head->set_out_features(8000);
  head->set_logits(true);
  return spec;
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_TINY_LM_H_
