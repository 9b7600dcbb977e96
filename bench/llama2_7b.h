#ifndef HEADROOM_BENCH_LLAMA2_7B_H_
#define HEADROOM_BENCH_LLAMA2_7B_H_

// The inline 7B-class decoder the benchmarks and the load generator send:
// Llama-2-7B built in code rather than read from the catalog, so a CheckFit
// on it pays for validating and profiling a full-size spec per call.

#include <cstdint>

#include "headroom/v1/model.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {
namespace bench {

// Trainable parameters of Llama2SevenBSpec(): embedding, 32 decoder layers,
// final norm and an untied LM head.
inline constexpr uint64_t kLlama2SevenBParams = 6738415616;

// Llama-2-7B: vocab 32000, hidden 4096, 32 heads, a block of 32 layers (RMS
// norm, attention, RMS norm, gated MLP of width 11008), final RMS norm, LM
// head 4096 -> 32000 marked as logits, 4096 positions.
v1::ModelSpec Llama2SevenBSpec();

// CheckFit on the inline spec above, bf16 mixed precision with AdamW, for
// batches {1, 8, 32} on L4, H100 and A100-80GB.
v1::CheckFitRequest Llama2SevenBCheckFitRequest();

}  // namespace bench
}  // namespace headroom

#endif  // HEADROOM_BENCH_LLAMA2_7B_H_
