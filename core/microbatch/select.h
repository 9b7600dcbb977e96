#ifndef HEADROOM_CORE_MICROBATCH_SELECT_H_
#define HEADROOM_CORE_MICROBATCH_SELECT_H_

// Microbatch selection from measured candidates (README.md, "Energy,
// microbatches and density"): which microbatch and mode a training run uses,
// recomputed from an autotune record's measurements and budget. Plain C++, no
// I/O.

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "headroom/v1/microbatch.pb.h"

namespace headroom {

// Policies, as the record's selection_policy spells them.
inline constexpr absl::string_view kMaxBatchPolicy = "max_batch";
inline constexpr absl::string_view kMaxThroughputPolicy = "max_throughput";

// The record's "*_gb" fields are GiB (microbatch.proto); the planner's and
// the fleet's are GB (10^9 bytes). GiB = GB * kRecordGibPerGb.
inline constexpr double kRecordGibPerGb = 1e9 / 1073741824.0;

// Modes, as the record spells them.
inline constexpr absl::string_view kEagerMode = "eager";
inline constexpr absl::string_view kCompiledMode = "compiled";

// Seconds of forward and backward per optimizer update:
// global_batch / microbatch * microbatch_seconds, the partial last microbatch
// counted pro rata (equivalently global_batch * context divided by the
// measured input tokens per second). This is the definition the reference
// record's estimated_update_seconds follows to within 1.6 % on all 14
// measurements; ceil(global_batch / microbatch) whole microbatches is 5-89 %
// off. Both arguments must be positive.
double EstimatedUpdateSeconds(uint32_t global_batch, uint32_t microbatch,
                              double microbatch_seconds);

// Recomputes the selection of `record` under `policy` ("" takes the record's
// selection_policy):
//  - a measured candidate fits when its peak_gb <= budget_gb, else it fails
//    with reason "over_budget";
//  - a candidate of cache_key.settings.microbatch_candidates with no
//    measurement in a mode (eager always, compiled when compile_model) fails
//    with the reason the record's failures give it, else "oom": a probe that
//    runs out of memory leaves no measurement;
//  - max_batch picks the largest microbatch that fits, compiled before eager
//    on ties; max_throughput the highest input tokens per second, then the
//    larger microbatch, then compiled.
// The selected entry carries fits_budget, estimated_update_seconds
// (EstimatedUpdateSeconds) and input_tokens_per_second recomputed; failures
// are listed eager first, then compiled, microbatch ascending. No candidate
// fitting is not an error: `selected` is then unset. INVALID_ARGUMENT names
// the field for an unknown policy or mode, a non-positive budget, context,
// global batch or seconds, or a measurement outside the candidates.
absl::StatusOr<v1::MicrobatchSelection> SelectMicrobatch(
    const v1::AutotuneRecord& record, absl::string_view policy);

// A record as stored in the autotune cache, at most this size.
inline constexpr size_t kMaxStoredRecordBytes = 64 << 10;

// OK when `record` may be stored in the autotune cache as given by a
// client: at most kMaxStoredRecordBytes with its strings within
// input_limits.h; cache_key.gpu.total_memory in (0, kMaxCardGb GB];
// budget_gb in (0, card], reserve_gb in [0, card] and every measured peak
// in [0, card] (GiB, the card being total_memory); and its selected
// microbatch and mode what SelectMicrobatch recomputes from its
// measurements and budget under its own policy. INVALID_ARGUMENT names
// the field and the allowed range.
absl::Status CheckCacheableRecord(const v1::AutotuneRecord& record);

}  // namespace headroom

#endif  // HEADROOM_CORE_MICROBATCH_SELECT_H_
