#include "core/memory/phases.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/memory/parallel.h"
#include "core/memory/training_setup.h"

namespace headroom {
namespace {

constexpr uint32_t kDefaultGenerateTokens = 128;

// The states a phase keeps, per GPU: what the step's optimizer component
// counts, split by kind and by what the parallel layout shards.
struct StatesOnGpu {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double half_copies = 0;
  // Sharded weights: the units gathered for compute (stage 3).
  double gathered = 0;
  bool weights_sharded = false;
};

StatesOnGpu StatesOf(const MemoryProfile& profile,
                     const v1::TrainingSetup& setup) {
  const ModelStates& s = profile.states;
  StatesOnGpu out;
  out.weights = s.weights;
  out.gradients = s.gradients;
  out.optimizer = s.states - s.paged_states;
  out.half_copies = s.half_copies;
  if (!profile.parallel.active) return out;
  const ParallelLayout& layout = profile.parallel.layout;
  const double shards = std::max<uint32_t>(1, layout.shard_degree);
  const double tp = std::max<uint32_t>(1, layout.tensor_parallel);
  const bool offload_params = setup.offload() == v1::TrainingSetup::PARAMS ||
                              setup.offload() == v1::TrainingSetup::BOTH;
  const bool offload_optimizer =
      setup.offload() == v1::TrainingSetup::OPTIMIZER ||
      setup.offload() == v1::TrainingSetup::BOTH;
  out.weights_sharded = layout.stage >= 3;
  out.weights = offload_params
                    ? 0
                    : out.weights / tp / (out.weights_sharded ? shards : 1.0);
  out.gradients /= tp * (layout.stage >= 2 ? shards : 1.0);
  out.optimizer = offload_optimizer
                      ? 0
                      : out.optimizer / tp / (layout.stage >= 1 ? shards : 1.0);
  out.half_copies /= tp * (out.weights_sharded ? shards : 1.0);
  out.gathered = out.weights_sharded ? profile.parallel.gathered_units : 0;
  return out;
}

uint64_t PositionsOf(const v1::ModelSpec& spec,
                     const v1::TrainingSetup& setup) {
  return setup.positions() > 0 ? setup.positions() : spec.positions();
}

double KvBytes(const google::protobuf::RepeatedPtrField<v1::Layer>& layers,
               double dtype_bytes) {
  double total = 0;
  for (const v1::Layer& layer : layers) {
    const double repeat = std::max<uint32_t>(1, layer.repeat());
    if (layer.has_block()) {
      total += repeat * KvBytes(layer.block().layers(), dtype_bytes);
    } else if (layer.has_attention()) {
      const v1::Attention& a = layer.attention();
      const double heads = a.heads() > 0 ? a.heads() : 1;
      const double kv_heads = a.kv_heads() > 0 ? a.kv_heads() : heads;
      const double head_dim =
          a.head_dim() > 0 ? a.head_dim() : a.hidden() / heads;
      total += repeat * 2 * kv_heads * head_dim * dtype_bytes;
    }
  }
  return total;
}

}  // namespace

std::vector<v1::JobPhase> PhasesOf(const v1::TrainingSetup& setup) {
  std::vector<v1::JobPhase> phases;
  if (setup.phases().empty()) {
    phases = {v1::LOAD, v1::STEP};
  } else {
    for (int phase : setup.phases()) {
      if (phase != v1::JOB_PHASE_UNSPECIFIED) {
        phases.push_back(static_cast<v1::JobPhase>(phase));
      }
    }
    phases.push_back(v1::STEP);
  }
  std::sort(phases.begin(), phases.end());
  phases.erase(std::unique(phases.begin(), phases.end()), phases.end());
  return phases;
}

const char* PhaseName(v1::JobPhase phase) {
  switch (phase) {
    case v1::LOAD:
      return "load";
    case v1::FIRST_STEP:
      return "first-step";
    case v1::EVAL:
      return "eval";
    case v1::GENERATE:
      return "generate";
    case v1::SAVE:
      return "save";
    default:
      return "step";
  }
}

double KvCacheBytesPerPosition(const v1::ModelSpec& spec,
                               const v1::TrainingSetup& setup) {
  return KvBytes(spec.layers(), ActivationBytes(setup));
}

std::vector<PhaseBytes> PhasePeaks(const MemoryProfile& profile,
                                   const v1::ModelSpec& spec,
                                   const v1::TrainingSetup& setup,
                                   const ComponentArray& factors,
                                   uint64_t batch, double step_gb,
                                   bool describe) {
  const StatesOnGpu s = StatesOf(profile, setup);
  const double f_states = factors[kOptimizer];
  const double f_buffers = factors[kTransient];
  const double eval_batch = setup.eval_batch() > 0 ? setup.eval_batch() : batch;
  const double kept =
      f_states * (s.weights + s.optimizer + s.half_copies + s.gathered) / 1e9;
  const double forward =
      f_buffers * eval_batch * profile.per_sample_bytes[kTransient] / 1e9;
  std::vector<PhaseBytes> out;
  for (v1::JobPhase phase : PhasesOf(setup)) {
    PhaseBytes p;
    p.phase = phase;
    switch (phase) {
      case v1::LOAD:
        p.allocated_gb = f_states *
                         (s.weights + s.gathered + profile.states.dequantized) /
                         1e9;
        if (describe)
          p.holds = s.weights_sharded
                        ? "this GPU's weight shard and one gathered unit"
                        : "the weights as stored in training";
        if (profile.states.dequantized > 0) {
          if (describe)
            absl::StrAppend(
                &p.holds, ", one weight dequantised while quantising on load");
        }
        break;
      case v1::FIRST_STEP:
        p.allocated_gb = step_gb;
        if (describe)
          p.holds =
              "the step's bytes: the optimizer's state is created in the first "
              "update, which the step's update moment counts";
        break;
      case v1::EVAL:
        p.allocated_gb = kept + forward;
        if (describe)
          p.holds = absl::StrCat(
              "weights and optimizer state kept, gradients freed; forward "
              "buffers at eval batch ",
              eval_batch);
        break;
      case v1::GENERATE: {
        const uint32_t tokens = setup.generate_tokens() > 0
                                    ? setup.generate_tokens()
                                    : kDefaultGenerateTokens;
        const double tp =
            profile.parallel.active
                ? std::max<uint32_t>(1, profile.parallel.layout.tensor_parallel)
                : 1;
        const double kv = KvCacheBytesPerPosition(spec, setup) *
                          (PositionsOf(spec, setup) + tokens) * eval_batch /
                          tp / 1e9;
        p.allocated_gb = kept + forward + f_buffers * kv;
        if (describe)
          p.holds = absl::StrCat("eval plus the KV cache over ",
                                 PositionsOf(spec, setup), " + ", tokens,
                                 " positions at batch ", eval_batch);
        break;
      }
      case v1::SAVE: {
        // FULL_STATE_DICT unshards each unit and clones every parameter
        // before resharding, on the GPU unless offload_to_cpu
        // (pytorch/pytorch torch/distributed/fsdp/_state_dict_utils.py at
        // 00c0db4e2b4a2c63eef4a9ce4ea34c86661d2c39: _full_pre_state_dict_hook,
        // param_hook's state_dict[fqn].clone().detach()).
        double gathered = 0;
        if (s.weights_sharded) {
          gathered = static_cast<double>(profile.states.params) *
                     ActivationBytes(setup);
        }
        p.allocated_gb = kept + f_states * gathered / 1e9;
        if (describe)
          p.holds = s.weights_sharded
                        ? "a full state dict: the whole model gathered in the "
                          "compute dtype beside the shards (rank 0)"
                        : "a state dict: views of the weights and state kept";
        break;
      }
      default:
        p.allocated_gb = step_gb;
        if (describe)
          p.holds = "a steady training step (the memory model's peak)";
        break;
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace headroom
