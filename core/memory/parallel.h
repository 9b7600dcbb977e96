#ifndef HEADROOM_CORE_MEMORY_PARALLEL_H_
#define HEADROOM_CORE_MEMORY_PARALLEL_H_

// The parallel setup (several GPUs) applied to a profile: the per-GPU peak
// of the largest rank, computable from (spec, setup) alone. Model states
// are sharded as each strategy's stage does (ZeRO's accounting), FSDP and
// ZeRO-3 gather wrapped units in compute dtype, gradients travel through
// buckets or reduce-scatter buffers, tensor parallelism splits the
// attention heads' and MLP columns' weights and activations, and offload
// moves states to host memory. The per-GPU optimizer bytes are a + b / S
// in the shard degree S, so the smallest N is solved, not scanned.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/value_bounds.h"
#include "core/memory/training_setup.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

inline constexpr uint32_t kDefaultGpusPerNode = 8;
// DDP's bucket_cap_mb default, and the buckets in flight at once.
inline constexpr double kDdpBucketBytes = 25.0 * 1024 * 1024;
inline constexpr int kDdpBucketsInFlight = 2;

// The GPUs of a parallel setup.
struct ParallelLayout {
  v1::TrainingSetup::Parallel strategy = v1::TrainingSetup::DDP;
  uint32_t gpus = 1;
  uint32_t tensor_parallel = 1;
  uint32_t data_parallel = 1;  // gpus / tensor_parallel
  uint32_t gpus_per_node = kDefaultGpusPerNode;
  uint32_t nodes = 1;
  // The data-parallel ranks one shard set spans (the whole data-parallel
  // group, or one node's under hybrid sharding); 1 when nothing shards.
  uint32_t shard_degree = 1;
  // 0: nothing sharded (DDP), 1: optimizer state, 2: + gradients, 3: +
  // weights.
  int stage = 0;
};

// Whether the setup runs on more than one GPU or names a parallel
// strategy, offload or tensor parallelism.
bool HasParallel(const v1::TrainingSetup& setup);

// INVALID_ARGUMENT naming the field and the allowed values (called by
// ValidateSetup).
absl::Status ValidateParallel(const v1::TrainingSetup& setup);

// The layout of a valid setup.
ParallelLayout LayoutOf(const v1::TrainingSetup& setup);

// The stage a strategy shards to (ZeRO's numbering; FSDP full = 3,
// grad-op = 2, hybrid = 3 within a node).
int StrategyStage(v1::TrainingSetup::Parallel strategy);

// Lowercase CLI names: "ddp", "fsdp-full", ..., "zero3"; and back (false
// for an unknown name).
const char* StrategyName(v1::TrainingSetup::Parallel strategy);
bool ParseStrategy(const std::string& name,
                   v1::TrainingSetup::Parallel* strategy);
// Every strategy, in the order answers list them.
const std::vector<v1::TrainingSetup::Parallel>& AllStrategies();

// Model states on one GPU: `states` sharded by `stage` over `shard`
// ranks (stage 1: the optimizer state and its step's temporaries; 2: also
// the gradients; 3: also the weights and autocast's 16-bit copies, which
// FSDP makes per gathered unit). Exact in ZeRO's accounting: with
// weights 2P, gradients 2P and states 12P (mixed-precision Adam, K = 12)
// the sum is 16P, 4P + 12P/N, 2P + 14P/N, 16P/N for stages 0..3.
ModelStates ShardStates(const ModelStates& states, int stage, double shard);

// A spec's parameters as the parallel setup sees them.
struct ParamSplit {
  // Parameters Megatron-style tensor parallelism splits (attention and MLP
  // projections, experts); the rest (norms, embeddings, the head) are
  // replicated on every tensor-parallel rank.
  uint64_t split = 0;
  uint64_t total = 0;
  // FSDP's wrapped units: one copy of the largest repeated block (each copy
  // is wrapped), and the root unit (every layer outside repeated blocks).
  uint64_t largest_block = 0;
  uint64_t root = 0;
};
ParamSplit SplitParams(const v1::ModelSpec& spec);

// What the parallel setup adds to or takes from one GPU, in bytes.
struct ParallelBreakdown {
  bool active = false;
  ParallelLayout layout;
  // Model states on this GPU at backward start and at the update.
  double states_backward = 0;
  double states_update = 0;
  // Stage 3: the root unit and two block units (the one computing and the
  // prefetched next) gathered in compute dtype.
  double gathered_units = 0;
  // Stage >= 2: one unit's gradients in compute dtype (reduce-scatter).
  double reduce_scatter = 0;
  // DDP and stage 1: the gradient buckets in flight.
  double buckets = 0;
  // The activation scale tensor parallelism applies to the split
  // components (attention, internal): 1 / T.
  double split_activation_scale = 1.0;
  // Offloaded to host memory, per GPU and per node.
  double host_bytes_per_gpu = 0;
  double host_bytes_per_node = 0;
  // The per-GPU collective constant (NCCL buffers, bucket overheads) in
  // GB: fitted per strategy from multi-GPU runs, 0 while unfitted.
  double collective_gb = 0;
  bool collective_fitted = false;
  // DeepSpeed's mixed precision (KeepsDeepSpeedMixedPrecision).
  bool deepspeed_mixed = false;
  // OPTIMIZER_GRADIENTS: torchao's CPUOffloadOptimizer with
  // offload_gradients (weights on the GPU, gradients and state on host).
  bool offload_gradients = false;
};

// Whether the setup runs DeepSpeed's own mixed precision (a ZeRO strategy
// under bf16 or fp16 mixed): 16-bit weights and gradients with an fp32
// master copy in the optimizer state, instead of autocast's fp32 weights
// and cached 16-bit copies (what DDP and FSDP keep).
bool KeepsDeepSpeedMixedPrecision(const v1::TrainingSetup& setup);

// Applies the parallel setup to a profile built for one GPU: the
// optimizer component's fixed and update bytes become the per-GPU model
// states plus the gathered units and buffers (factor-scaled like every
// model state), the split activations are divided by T. A no-op (inactive
// breakdown) for a one-GPU setup.
struct MemoryProfile;
struct Plan;
void ApplyParallel(const v1::ModelSpec& spec, const Plan& plan,
                   MemoryProfile* profile);

// Remarks an answer under a parallel setup carries.
std::vector<std::string> ParallelAssumptions(const ParallelBreakdown& p);

// The smallest GPU count in [min_n, kMaxGpus], a multiple of `step`, for
// which `ok(n)` holds, given that the peak behind `ok` is a + b / n in n
// (per strategy, with fixed T): solved from the peak at two counts
// (`peak_gb`), then verified at n and at n - step (and moved by `step`
// while verification disagrees, as a guard against rounding, at most a
// few steps). 0 when none in range. `threshold_gb` is the peak `ok`
// accepts up to; `ok` is the verdict itself and decides.
uint32_t SolveMinGpus(const std::function<double(uint32_t)>& peak_gb,
                      const std::function<bool(uint32_t)>& ok,
                      double threshold_gb, uint32_t min_n, uint32_t step);

// A collective constant fitted from multi-GPU runs of one strategy: the
// measured (largest rank's) peak minus the prediction without the
// constant, pooled as the median over runs. `runs` 0: unfitted.
struct CollectiveFit {
  double constant_gb = 0;
  int runs = 0;
};
CollectiveFit FitCollectiveConstant(const std::vector<double>& measured_gb,
                                    const std::vector<double>& predicted_gb);

// FitCollectiveConstant's constant with each run left out in turn: entry i
// is the constant the other runs give (0 when there are none), in
// O(n log n) from one sort of the residuals.
std::vector<double> LeaveOneOutCollectiveConstants(
    const std::vector<double>& measured_gb,
    const std::vector<double>& predicted_gb);

// The constant a factor set fitted for the setup's strategy
// (FactorSet.collectives): runs 0 and 0 GB for a setup without a parallel
// strategy or a strategy no multi-GPU run measured.
CollectiveFit CollectiveOf(
    const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>& fitted,
    const v1::TrainingSetup& setup);

// Records the constant in the profile's breakdown (what answers say); the
// planner adds its GB to the peak with the prior's constant.
void SetCollective(const CollectiveFit& fit, MemoryProfile* profile);

}  // namespace headroom

#endif  // HEADROOM_CORE_MEMORY_PARALLEL_H_
