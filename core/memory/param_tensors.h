#ifndef HEADROOM_CORE_MEMORY_PARAM_TENSORS_H_
#define HEADROOM_CORE_MEMORY_PARAM_TENSORS_H_

// A spec's parameters as the tensors PyTorch holds them in (the shapes the
// torch harness builds), so that per-tensor rules can be applied: which
// linears LoRA adapts and bitsandbytes quantizes, which tensors an 8-bit
// optimizer keeps in 32 bits, Adafactor's factored state, and the largest
// tensor a one-parameter-at-a-time step works on.

#include <array>
#include <cstdint>
#include <functional>

#include "headroom/v1/model.pb.h"

namespace headroom {

// What a tensor is to the setup's per-tensor rules.
enum class TensorRole {
  kOther,   // norms, biases, free parameters, convolutions, recurrent
  kTable,   // an embedding table
  kLinear,  // a linear's weight matrix [out, in]: adaptable, quantizable
  kHead,    // the output head's weight (a logits linear): neither
  kRouter,  // a mixture-of-experts router's weight: neither
};

struct ParamTensor {
  // Dimensions, outermost first; `rank` of them are used.
  std::array<uint64_t, 5> shape{};
  int rank = 0;
  // Identical tensors (layer and block repeats, experts) this stands for.
  uint64_t copies = 1;
  TensorRole role = TensorRole::kOther;
  // For a kLinear: "q", "k", "v", "o" (attention), "gate", "up", "down"
  // (MLP and experts) or "linear" (a standalone linear layer); "lm_head"
  // for a kHead, "embed" for a kTable (the LoRA target names).
  const char* target = "";
  // The spec's top-level layer it belongs to.
  int top_level = 0;
  // Inside a layer the spec marks frozen.
  bool spec_frozen = false;

  uint64_t Elements() const;
  // shape[0] for a linear weight [out, in], shape[1].
  uint64_t OutFeatures() const { return shape[0]; }
  uint64_t InFeatures() const { return rank > 1 ? shape[1] : 0; }
};

// Calls `fn` once per distinct tensor of the spec (valid, ValidateSpec),
// in layer order; a tied head's shared weight is not a tensor of its own.
void ForEachParamTensor(const v1::ModelSpec& spec,
                        const std::function<void(const ParamTensor&)>& fn);

// Calls `fn` once per tied output head (a logits linear sharing its
// table's weight, which ForEachParamTensor leaves out) with the head's
// [out, in] shape, role kHead: LoRA adapts such a head as a Linear.
void ForEachTiedHead(const v1::ModelSpec& spec,
                     const std::function<void(const ParamTensor&)>& fn);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_PARAM_TENSORS_H_
