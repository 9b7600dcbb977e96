#ifndef HEADROOM_CORE_MEMORY_TRAINING_SETUP_H_
#define HEADROOM_CORE_MEMORY_TRAINING_SETUP_H_

// The training setup as the memory model reads it: checked field by field,
// and applied to a spec's parameter tensors (which train, in what dtype,
// with what optimizer state), giving the model states' bytes.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

inline constexpr uint32_t kMaxLoraRank = 4096;
inline constexpr uint32_t kMaxGradAccum = 1024;
inline constexpr int kMaxFreezeNames = 256;
// bitsandbytes' 8-bit optimizers keep 32-bit state for smaller tensors
// (min_8bit_size) and one fp32 absmax per block of this many values.
inline constexpr uint64_t kBnbMin8BitSize = 4096;
inline constexpr uint64_t kBnbOptimizerBlock = 256;
// NF4: one absmax per 64 weights; double quantization stores those as
// 8-bit codes with one fp32 scale per 256 of them (QLoRA, section 3).
inline constexpr uint64_t kNf4Block = 64;
inline constexpr uint64_t kNf4ScaleBlock = 256;
// bitsandbytes allocates a paged (CUDA managed) state buffer only for a
// tensor of at least 1e5 elements; smaller ones get ordinary device memory
// (get_state_buffer, bitsandbytes/optim/optimizer.py @ 95f9af3).
inline constexpr uint64_t kBnbMinPagedSize = 100000;
// torchao's low-bit AdamW (torchao/optim/adam.py @ 36027d8): a state tensor
// is quantized only when the parameter has at least 4096 elements and a
// multiple of the block size (_new_buffer); AdamW4bit's block is 128
// values, AdamWFp8's 256, each block with one fp32 scale.
inline constexpr uint64_t kTorchaoMinLowBitSize = 4096;
inline constexpr uint64_t kTorchao4BitBlock = 128;
inline constexpr uint64_t kTorchaoFp8Block = 256;
// torchao's CPUOffloadOptimizer keeps a parameter smaller than this on the
// GPU with an on-device optimizer (minimal_size, torchao/optim/
// cpu_offload.py @ 36027d8).
inline constexpr uint64_t kTorchaoOffloadMinSize = 4096;
// CHUNKED_CE's pieces when loss_chunks is 0: torchtune's
// CEWithChunkedOutputLoss(num_output_chunks=8)
// (torchtune/modules/loss/ce_chunked_output_loss.py @ bd2a0fc).
inline constexpr uint32_t kDefaultLossChunks = 8;
inline constexpr uint32_t kMaxLossChunks = 65536;

// The LoRA target names validation accepts: q, k, v, o, gate, up, down,
// all-linear, lm_head, embed.
std::vector<std::string> LoraTargetWords();

// INVALID_ARGUMENT naming the field and the allowed values for anything the
// memory model cannot read.
absl::Status ValidateSetup(const v1::TrainingSetup& setup);

// Whether the setup keeps weights, gradients and state in 16 bits, and the
// bytes of one activation element (2 under any 16-bit precision).
bool TrueHalfPrecision(const v1::TrainingSetup& setup);
bool MixedPrecision(const v1::TrainingSetup& setup);
double ActivationBytes(const v1::TrainingSetup& setup);

// The activation checkpointing the setup asks for: `checkpointing` when
// set, else activation_checkpointing (true = FULL, false =
// NO_CHECKPOINTING).
v1::TrainingSetup::Checkpointing CheckpointingOf(
    const v1::TrainingSetup& setup);

// The pieces CHUNKED_CE computes the loss in (loss_chunks, 0 = 8); 0 when
// the loss is not chunked.
uint32_t LossChunks(const v1::TrainingSetup& setup);

// The share of the sequence's logits one chunk holds when `positions` are
// split into `chunks` pieces as torch.tensor_split does (the first pieces
// get ceil(positions / chunks)): ceil(positions / chunks) / positions, at
// most 1; 1 for 0 chunks or positions. A profile that chunks by a token
// count (litgpt's lm_head_chunk_size=128) passes ceil(positions / 128).
double ChunkedLogitsFraction(uint64_t positions, uint32_t chunks);

// Whether an attention layer runs a fused kernel (no score matrix) under
// the setup: its `fused` flag unless the setup names a kernel.
bool FusedAttention(const v1::Attention& attention,
                    const v1::TrainingSetup& setup);

// What LoRA adapts: the linears "q", "k", "v", "o", "gate", "up", "down",
// "linear" (standalone layers), and "lm_head" (the output head) and "embed"
// (embedding tables), which PEFT's all-linear leaves out; empty when the
// setup has no adapters.
std::set<std::string> LoraTargets(const v1::TrainingSetup& setup);

// The spec with setup.freeze applied: the layers before the trained suffix
// marked frozen (no gradient reaches them), a repeated block split at the
// suffix; `weights_frozen[i]` says top-level layer i of the returned spec
// trains no parameter (LoRA freezes every base weight). NOT_FOUND-free:
// an unknown layer name is INVALID_ARGUMENT listing the names.
struct FrozenSpec {
  v1::ModelSpec spec;
  std::vector<bool> weights_frozen;
};
absl::StatusOr<FrozenSpec> ApplyFreeze(const v1::ModelSpec& spec,
                                       const v1::TrainingSetup& setup);

// The model states of a (frozen) spec under a setup, in bytes and counts.
struct ModelStates {
  uint64_t params = 0;          // the base model's parameters
  uint64_t trainable = 0;       // trained base parameters plus adapters
  uint64_t adapter_params = 0;  // LoRA's A and B
  uint64_t quantized_params = 0;
  double weights = 0;      // every weight as stored (quantized where so)
  double gradients = 0;    // one gradient per trained parameter
  double states = 0;       // the optimizer's state
  double half_copies = 0;  // autocast's cached 16-bit trained weights
  // The optimizer step's temporaries, at the update moment.
  double update_temporaries = 0;
  // Under optimizer_in_backward: the one gradient and step temporaries
  // alive at a time (the largest tensor's) instead of all gradients.
  double in_backward_buffers = 0;
  // The largest quantized weight dequantized for compute (a transient).
  double dequantized = 0;
  // Paged optimizer state (included in `states`; the peak leaves it out:
  // managed memory the driver pages to the host under pressure).
  double paged_states = 0;
  // The largest trained tensor's gradient: what a per-parameter gradient
  // offload (OPTIMIZER_GRADIENTS) keeps on the GPU at a time.
  double largest_gradient = 0;
  // The gradients and state of trained tensors under
  // kTorchaoOffloadMinSize elements, which CPUOffloadOptimizer leaves on
  // the GPU (included in `gradients` and `states`).
  double small_gradients = 0;
  double small_states = 0;
  // Bytes per LoRA adapter parameter: 4 (fp32, PEFT's autocast) or the
  // trained weights' dtype, as the framework profile keeps them (plan.h).
  double adapter_bytes = 4;
};
ModelStates ComputeModelStates(const FrozenSpec& frozen,
                               const v1::TrainingSetup& setup,
                               double adapter_bytes = 4.0);

// What an answer under `setup` (the resolved setup: the framework profile's
// decisions filled in) assumed that the request (`asked`) left unset, each
// once: the attention kernel, the positions, the precision (with QLoRA,
// what the base is dequantized to), the LoRA targets, the optimizer, a
// framework's grad_accum; and what paged and low-bit optimizers, the loss,
// selective checkpointing and activation offloading are modelled as. A
// value the request set is not repeated as an assumption. The 3-argument
// form takes `setup` as what was asked.
std::vector<std::string> SetupAssumptions(const v1::ModelSpec& spec,
                                          const v1::TrainingSetup& asked,
                                          const v1::TrainingSetup& setup,
                                          const ModelStates& states);
std::vector<std::string> SetupAssumptions(const v1::ModelSpec& spec,
                                          const v1::TrainingSetup& setup,
                                          const ModelStates& states);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_TRAINING_SETUP_H_
