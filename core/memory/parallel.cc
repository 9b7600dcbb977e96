#include "core/memory/parallel.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/units.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/memory/param_tensors.h"
#include "core/memory/plan.h"

namespace headroom {
namespace {

using v1::TrainingSetup;

absl::Status Invalid(const std::string& field, const std::string& value,
                     const std::string& allowed) {
  return absl::InvalidArgumentError(
      absl::StrCat("setup.", field, " = ", value, " is invalid; ", allowed));
}

// torchao's CPUOffloadOptimizer is "for single-GPU training" and its
// offload_gradients is "not compatible with gradient accumulation"
// (torchao/optim/cpu_offload.py @ 36027d8); the gradients leave in a
// post-accumulate-grad hook, so no step may run in backward besides.
absl::Status ValidateGradientOffload(const TrainingSetup& setup) {
  const char* value = "OPTIMIZER_GRADIENTS";
  const bool one_gpu =
      setup.gpus() <= 1 && setup.nodes() <= 1 && setup.tensor_parallel() <= 1;
  if (!one_gpu) {
    return Invalid("offload", value,
                   "torchao's CPUOffloadOptimizer runs on one GPU: allowed "
                   "with gpus 0 or 1 (and no nodes or tensor_parallel); "
                   "for several GPUs use OPTIMIZER with a sharded strategy");
  }
  if (setup.parallel() != TrainingSetup::PARALLEL_UNSPECIFIED &&
      setup.parallel() != TrainingSetup::DDP) {
    return Invalid("offload", value,
                   "a one-GPU offload takes no sharded strategy: allowed "
                   "with parallel unset or DDP");
  }
  if (setup.grad_accum() > 1) {
    return Invalid("offload", value,
                   "offload_gradients frees each gradient once it is on the "
                   "host, so it allows grad_accum 0 or 1 only");
  }
  if (setup.optimizer_in_backward()) {
    return Invalid("offload", value,
                   "the optimizer steps on the host after backward: not "
                   "allowed with optimizer_in_backward");
  }
  return absl::OkStatus();
}

}  // namespace

bool HasParallel(const TrainingSetup& setup) {
  return setup.gpus() > 1 ||
         setup.parallel() != TrainingSetup::PARALLEL_UNSPECIFIED ||
         setup.offload() != TrainingSetup::OFFLOAD_UNSPECIFIED ||
         setup.tensor_parallel() > 1 || setup.nodes() > 1;
}

int StrategyStage(TrainingSetup::Parallel strategy) {
  switch (strategy) {
    case TrainingSetup::ZERO1:
      return 1;
    case TrainingSetup::ZERO2:
    case TrainingSetup::FSDP_GRAD_OP:
      return 2;
    case TrainingSetup::ZERO3:
    case TrainingSetup::FSDP_FULL:
    case TrainingSetup::FSDP_HYBRID:
      return 3;
    default:
      return 0;
  }
}

const char* StrategyName(TrainingSetup::Parallel strategy) {
  switch (strategy) {
    case TrainingSetup::FSDP_FULL:
      return "fsdp-full";
    case TrainingSetup::FSDP_GRAD_OP:
      return "fsdp-grad-op";
    case TrainingSetup::FSDP_HYBRID:
      return "fsdp-hybrid";
    case TrainingSetup::ZERO1:
      return "zero1";
    case TrainingSetup::ZERO2:
      return "zero2";
    case TrainingSetup::ZERO3:
      return "zero3";
    default:
      return "ddp";
  }
}

const std::vector<TrainingSetup::Parallel>& AllStrategies() {
  static const std::vector<TrainingSetup::Parallel> all = {
      TrainingSetup::DDP,        TrainingSetup::ZERO1,
      TrainingSetup::ZERO2,      TrainingSetup::FSDP_GRAD_OP,
      TrainingSetup::ZERO3,      TrainingSetup::FSDP_FULL,
      TrainingSetup::FSDP_HYBRID};
  return all;
}

bool ParseStrategy(const std::string& name, TrainingSetup::Parallel* out) {
  for (TrainingSetup::Parallel s : AllStrategies()) {
    if (name == StrategyName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

absl::Status ValidateParallel(const TrainingSetup& setup) {
  if (setup.gpus() > kMaxGpus) {
    return Invalid("gpus", absl::StrCat(setup.gpus()),
                   absl::StrCat("allowed 0 or 1 (one GPU) .. ", kMaxGpus));
  }
  if (!TrainingSetup::Parallel_IsValid(setup.parallel())) {
    return Invalid("parallel", absl::StrCat(setup.parallel()),
                   "allowed DDP, FSDP_FULL, FSDP_GRAD_OP, FSDP_HYBRID, ZERO1, "
                   "ZERO2, ZERO3");
  }
  if (!TrainingSetup::Offload_IsValid(setup.offload())) {
    return Invalid("offload", absl::StrCat(setup.offload()),
                   "allowed OPTIMIZER, PARAMS, BOTH, OPTIMIZER_GRADIENTS");
  }
  if (setup.nodes() > kMaxGpus || setup.gpus_per_node() > kMaxGpus) {
    return Invalid(setup.nodes() > kMaxGpus ? "nodes" : "gpus_per_node",
                   absl::StrCat(std::max(setup.nodes(), setup.gpus_per_node())),
                   absl::StrCat("allowed 0 (default) .. ", kMaxGpus));
  }
  const uint32_t gpus = std::max<uint32_t>(1, setup.gpus());
  if (setup.nodes() > 1 && setup.gpus() > 1) {
    const uint32_t per_node = setup.gpus_per_node() != 0
                                  ? setup.gpus_per_node()
                                  : setup.gpus() / setup.nodes();
    if (per_node == 0 || per_node * setup.nodes() != setup.gpus()) {
      return Invalid("nodes", absl::StrCat(setup.nodes()),
                     absl::StrCat("gpus (", setup.gpus(),
                                  ") must be nodes x gpus_per_node"));
    }
  }
  if (setup.nodes() > 1 && setup.gpus() == 0 &&
      uint64_t{setup.nodes()} * (setup.gpus_per_node() != 0
                                     ? setup.gpus_per_node()
                                     : kDefaultGpusPerNode) >
          kMaxGpus) {
    return Invalid("nodes", absl::StrCat(setup.nodes()),
                   absl::StrCat("nodes x gpus_per_node allowed up to ",
                                kMaxGpus, " GPUs"));
  }
  const uint32_t tp = std::max<uint32_t>(1, setup.tensor_parallel());
  if (setup.tensor_parallel() > kMaxGpus ||
      (setup.gpus() > 1 && gpus % tp != 0) ||
      (setup.gpus() <= 1 && tp > 1 && setup.nodes() <= 1)) {
    return Invalid("tensor_parallel", absl::StrCat(setup.tensor_parallel()),
                   absl::StrCat("allowed 0 or 1 (none) or a divisor of gpus (",
                                setup.gpus(), ")"));
  }
  const int stage = StrategyStage(setup.parallel());
  if (setup.offload() == TrainingSetup::OPTIMIZER_GRADIENTS) {
    return ValidateGradientOffload(setup);
  }
  if (setup.offload() != TrainingSetup::OFFLOAD_UNSPECIFIED && stage == 0) {
    return Invalid("offload", TrainingSetup::Offload_Name(setup.offload()),
                   "offload needs a sharded strategy: parallel ZERO1, ZERO2, "
                   "ZERO3, FSDP_GRAD_OP, FSDP_FULL or FSDP_HYBRID");
  }
  if ((setup.offload() == TrainingSetup::PARAMS ||
       setup.offload() == TrainingSetup::BOTH) &&
      stage != 3) {
    return Invalid("offload", TrainingSetup::Offload_Name(setup.offload()),
                   "offloading the weights needs sharded weights: parallel "
                   "ZERO3, FSDP_FULL or FSDP_HYBRID");
  }
  if (HasParallel(setup) && setup.optimizer_in_backward() && stage >= 2) {
    return Invalid("optimizer_in_backward", "true",
                   "a step per parameter in backward needs unsharded "
                   "gradients: parallel DDP or ZERO1");
  }
  return absl::OkStatus();
}

ParallelLayout LayoutOf(const TrainingSetup& setup) {
  ParallelLayout l;
  l.strategy = setup.parallel() == TrainingSetup::PARALLEL_UNSPECIFIED
                   ? TrainingSetup::DDP
                   : setup.parallel();
  l.gpus_per_node =
      setup.gpus_per_node() != 0 ? setup.gpus_per_node() : kDefaultGpusPerNode;
  if (setup.gpus() == 0 && setup.nodes() > 1) {
    l.gpus = setup.nodes() * l.gpus_per_node;
  } else {
    l.gpus = std::max<uint32_t>(1, setup.gpus());
    if (setup.nodes() > 1 && setup.gpus_per_node() == 0) {
      l.gpus_per_node = std::max<uint32_t>(1, l.gpus / setup.nodes());
    }
  }
  l.tensor_parallel = std::max<uint32_t>(1, setup.tensor_parallel());
  l.data_parallel = std::max<uint32_t>(1, l.gpus / l.tensor_parallel);
  l.nodes = setup.nodes() != 0
                ? setup.nodes()
                : (l.gpus + l.gpus_per_node - 1) / l.gpus_per_node;
  l.stage = StrategyStage(l.strategy);
  if (l.stage == 0) {
    l.shard_degree = 1;
  } else if (l.strategy == TrainingSetup::FSDP_HYBRID) {
    l.shard_degree = std::max<uint32_t>(
        1, std::min(l.gpus_per_node, l.gpus) / l.tensor_parallel);
  } else {
    l.shard_degree = l.data_parallel;
  }
  return l;
}

ModelStates ShardStates(const ModelStates& states, int stage, double shard) {
  ModelStates s = states;
  if (shard <= 1) return s;
  if (stage >= 1) {
    s.states /= shard;
    s.paged_states /= shard;
    s.update_temporaries /= shard;
  }
  if (stage >= 2) s.gradients /= shard;
  if (stage >= 3) {
    s.weights /= shard;
    s.half_copies /= shard;
  }
  return s;
}

ParamSplit SplitParams(const v1::ModelSpec& spec) {
  ParamSplit out;
  ForEachParamTensor(spec, [&](const ParamTensor& t) {
    const uint64_t n = t.Elements() * t.copies;
    out.total += n;
    if (t.role == TensorRole::kLinear) out.split += n;
  });
  for (const v1::Layer& layer : spec.layers()) {
    const uint64_t repeat = layer.repeat() == 0 ? 1 : layer.repeat();
    const uint64_t params = CountLayerParams(layer);
    if (repeat > 1) {
      out.largest_block = std::max(out.largest_block, params / repeat);
    } else {
      out.root += params;
    }
  }
  return out;
}

bool KeepsDeepSpeedMixedPrecision(const TrainingSetup& setup) {
  const TrainingSetup::Parallel strategy = LayoutOf(setup).strategy;
  const bool deepspeed = strategy == TrainingSetup::ZERO1 ||
                         strategy == TrainingSetup::ZERO2 ||
                         strategy == TrainingSetup::ZERO3;
  return deepspeed && (setup.precision() == TrainingSetup::BF16_MIXED ||
                       setup.precision() == TrainingSetup::FP16_MIXED);
}

// One rank's model states before sharding: DeepSpeed's mixed precision
// (recorded in `p`), then each parameter-proportional byte scaled by the
// share of a tensor-parallel rank.
ModelStates RankStates(const ModelStates& states, const TrainingSetup& setup,
                       double tp_scale, ParallelBreakdown* p) {
  ModelStates st = states;
  if (KeepsDeepSpeedMixedPrecision(setup) && st.quantized_params == 0) {
    p->deepspeed_mixed = true;
    // DeepSpeed's bf16 / fp16 mode: the module is held in 16 bits (no
    // fp32 weights, no autocast copies), gradients are 16-bit, and the
    // optimizer keeps an fp32 master copy of each trained weight beside
    // its moments (ZeRO's 2P + 2P + KP, K = 12 for Adam). At the step each
    // partition's gradients are upcast to fp32; DeepSpeed's fused Adam
    // needs no other temporaries.
    const double all = static_cast<double>(st.params + st.adapter_params);
    const double trained = static_cast<double>(st.trainable);
    st.weights = 2.0 * all;
    st.gradients = 2.0 * trained;
    st.states += 4.0 * trained;
    st.half_copies = 0;
    st.update_temporaries = 4.0 * trained;
  }
  for (double* v :
       {&st.weights, &st.gradients, &st.states, &st.half_copies,
        &st.update_temporaries, &st.in_backward_buffers, &st.paged_states}) {
    *v *= tp_scale;
  }
  return st;
}

// Moves what the setup offloads from the sharded states `sh` to the host
// (per GPU and per node, in `p`).
// torchao's CPUOffloadOptimizer(offload_gradients=True) on one GPU
// (torchao/optim/cpu_offload.py @ 36027d8): every trained parameter of
// >= minimal_size (4096) elements gets a pinned host copy and a host
// gradient of its own dtype (empty_like), and its optimizer (fused CPU
// AdamW by default) steps there; a post-accumulate-grad hook copies each
// gradient to the host and frees the device one, so one gradient is on
// the GPU at a time. Smaller parameters keep gradient, state and step on
// the GPU (d_opt).
void OffloadOptimizerAndGradients(ModelStates* sh, ParallelBreakdown* p) {
  const double big_gradients = sh->gradients - sh->small_gradients;
  const double big_states = sh->states - sh->small_states;
  p->host_bytes_per_gpu += 2 * big_gradients + big_states;
  p->offload_gradients = true;
  sh->gradients =
      sh->small_gradients + std::min(sh->largest_gradient, big_gradients);
  sh->states = sh->small_states;
  sh->paged_states = 0;
  sh->update_temporaries = 0;
}

void OffloadToHost(const TrainingSetup& setup, const ParallelLayout& l,
                   ModelStates* sh, ParallelBreakdown* p) {
  if (setup.offload() == TrainingSetup::OPTIMIZER_GRADIENTS) {
    OffloadOptimizerAndGradients(sh, p);
    p->host_bytes_per_node = p->host_bytes_per_gpu;
    return;
  }
  const bool offload_optimizer = setup.offload() == TrainingSetup::OPTIMIZER ||
                                 setup.offload() == TrainingSetup::BOTH;
  const bool offload_params = setup.offload() == TrainingSetup::PARAMS ||
                              setup.offload() == TrainingSetup::BOTH;
  const bool fsdp = l.strategy == TrainingSetup::FSDP_FULL ||
                    l.strategy == TrainingSetup::FSDP_GRAD_OP ||
                    l.strategy == TrainingSetup::FSDP_HYBRID;
  if (fsdp && offload_params) {
    // FSDP's CPU offload moves the weight shards and, with them, the
    // gradient shards (CPUOffload(offload_params=True) "implicitly enables
    // gradient offloading to CPU", PyTorch's FSDP docs), so the optimizer
    // state and step live in host memory too; the GPU keeps the gathered
    // units and the reduce-scatter buffer.
    p->host_bytes_per_gpu += sh->weights + sh->gradients + sh->states +
                             sh->update_temporaries + sh->half_copies;
    sh->weights = sh->gradients = sh->states = sh->update_temporaries = 0;
    sh->paged_states = 0;
    sh->half_copies = 0;
  } else {
    if (offload_optimizer) {
      // ZeRO-Offload: the fp32 state and the step on the CPU; from stage 2
      // the gradient partitions go there too.
      p->host_bytes_per_gpu += sh->states + sh->update_temporaries;
      sh->states = 0;
      sh->paged_states = 0;
      sh->update_temporaries = 0;
      if (l.stage >= 2) {
        p->host_bytes_per_gpu += sh->gradients;
        sh->gradients = 0;
      }
    }
    if (offload_params) {
      p->host_bytes_per_gpu += sh->weights;
      sh->weights = 0;
    }
  }
  p->host_bytes_per_node =
      p->host_bytes_per_gpu * std::min(l.gpus, l.gpus_per_node);
}

// The buffers communication adds per GPU: the gathered units of stage 3,
// the reduce-scatter buffer of stage 2 and up, DDP's buckets below.
// `states` are the whole model's, `st` one rank's before sharding.
void SetCommunicationBuffers(const TrainingSetup& setup,
                             const ParamSplit& split, const ModelStates& states,
                             const ModelStates& st, double tp_scale,
                             ParallelBreakdown* p) {
  const ParallelLayout& l = p->layout;
  const double compute = ActivationBytes(setup);
  const double params = static_cast<double>(std::max<uint64_t>(1, st.params));
  // A quantized base is gathered as stored.
  const double gather_bytes =
      st.quantized_params != 0 ? states.weights / params : compute;
  const double block = static_cast<double>(split.largest_block);
  const double root = static_cast<double>(split.root);
  if (l.stage == 3) {
    p->gathered_units = (root + 2.0 * block) * gather_bytes * tp_scale;
  }
  if (l.stage >= 2 && l.shard_degree > 1) {
    const double trained =
        static_cast<double>(st.trainable) / params;  // share that trains
    p->reduce_scatter = (block > 0 ? block : root) * std::min(1.0, trained) *
                        compute * tp_scale;
  }
  if (l.stage <= 1 && l.data_parallel > 1) {
    p->buckets = kDdpBucketBytes * kDdpBucketsInFlight;
  }
}

void ApplyParallel(const v1::ModelSpec& spec, const Plan& plan,
                   MemoryProfile* profile) {
  const TrainingSetup& setup = plan.setup;
  ParallelBreakdown& p = profile->parallel;
  p = ParallelBreakdown();
  if (!plan.parallel) return;
  p.active = true;
  p.layout = plan.layout;
  const ParallelLayout& l = p.layout;
  const ParamSplit split = SplitParams(spec);
  const double t = static_cast<double>(l.tensor_parallel);
  const double split_fraction =
      split.total == 0
          ? 0.0
          : static_cast<double>(split.split) / static_cast<double>(split.total);
  // The share of every parameter-proportional byte one tensor-parallel
  // rank holds.
  const double tp_scale = (1.0 - split_fraction) + split_fraction / t;
  const ModelStates st = RankStates(profile->states, setup, tp_scale, &p);
  ModelStates sh = ShardStates(st, l.stage, l.shard_degree);
  OffloadToHost(setup, l, &sh, &p);
  SetCommunicationBuffers(setup, split, profile->states, st, tp_scale, &p);
  // Paged optimizer state is CUDA managed memory, out of the peak as on
  // one GPU (BuildProfile).
  const double device_states = sh.states - sh.paged_states;
  p.states_backward =
      sh.weights + device_states + sh.half_copies +
      (setup.optimizer_in_backward() ? sh.in_backward_buffers : sh.gradients);
  p.states_update =
      sh.weights + device_states +
      (setup.optimizer_in_backward() ? sh.in_backward_buffers
                                     : sh.gradients + sh.update_temporaries);
  profile->fixed_bytes[kOptimizer] =
      p.states_backward + p.gathered_units + p.reduce_scatter + p.buckets;
  profile->update_bytes[kOptimizer] = p.states_update + p.buckets;
  p.split_activation_scale = 1.0 / t;
  profile->per_sample_bytes[kAttention] /= t;
  profile->per_sample_bytes[kInternal] /= t;
}

std::vector<std::string> ParallelAssumptions(const ParallelBreakdown& p) {
  std::vector<std::string> out;
  if (!p.active) return out;
  const ParallelLayout& l = p.layout;
  out.push_back(absl::StrCat(
      "parallel ", StrategyName(l.strategy), " on ", l.gpus, " GPU(s) (",
      l.nodes, " node(s) of up to ", l.gpus_per_node, ")",
      l.tensor_parallel > 1
          ? absl::StrCat(", tensor parallel ", l.tensor_parallel,
                         " (attention and MLP projections and their "
                         "activations split; norms, embeddings, head and "
                         "residual stream whole)")
          : "",
      ": figures are per GPU (the largest rank); model states ",
      l.stage == 0 ? "replicated"
                   : absl::StrCat("sharded to stage ", l.stage, " over ",
                                  l.shard_degree, " ranks"),
      ", ", FormatBytesAsGb(p.states_backward, 2), " at backward start"));
  if (p.deepspeed_mixed) {
    out.push_back(
        "DeepSpeed mixed precision: 16-bit weights and gradients, an fp32 "
        "master copy of each trained weight in the optimizer state (ZeRO's "
        "2 + 2 + 12 bytes per parameter for Adam), fp32 gradient partitions "
        "at the step");
  }
  if (p.gathered_units > 0) {
    out.push_back(absl::StrCat(
        "gathered units: the root unit and two wrapped blocks (computing and "
        "prefetched) in compute dtype, ",
        FormatBytesAsGb(p.gathered_units, 2)));
  }
  if (p.reduce_scatter > 0) {
    out.push_back(absl::StrCat(
        "reduce-scatter buffer: one unit's gradients in compute dtype, ",
        FormatBytesAsGb(p.reduce_scatter, 2)));
  }
  if (p.buckets > 0) {
    out.push_back(absl::StrCat(
        "gradient buckets: ", kDdpBucketsInFlight,
        " of 25 MB in flight (gradient_as_bucket_view; without it DDP keeps "
        "a flat copy of every gradient)"));
  }
  if (p.offload_gradients) {
    out.push_back(
        "offload optimizer,gradients (torchao's CPUOffloadOptimizer, "
        "offload_gradients=True): each trained tensor of >= 4,096 elements "
        "steps on the host from a pinned copy of its weight and gradient; "
        "one gradient is on the GPU at a time, smaller tensors stay");
  }
  if (p.host_bytes_per_gpu > 0) {
    out.push_back(absl::StrCat(
        "offloaded to host memory: ", FormatBytesAsGb(p.host_bytes_per_gpu, 2),
        " per GPU, ", FormatBytesAsGb(p.host_bytes_per_node, 2), " per node"));
  }
  out.push_back(
      p.collective_fitted
          ? absl::StrCat("collective buffers (NCCL, bucket overheads): ",
                         FormatBytesAsGb(p.collective_gb * 1e9, 2),
                         " per GPU, fitted from measured ",
                         StrategyName(l.strategy), " runs")
          : absl::StrCat("collective buffers (NCCL, bucket overheads): "
                         "unfitted (no multi-GPU run of ",
                         StrategyName(l.strategy), " measured), counted as 0"));
  return out;
}

uint32_t SolveMinGpus(const std::function<double(uint32_t)>& peak_gb,
                      const std::function<bool(uint32_t)>& ok,
                      double threshold_gb, uint32_t min_n, uint32_t step) {
  step = std::max<uint32_t>(1, step);
  min_n = std::max(min_n, step);
  min_n = (min_n + step - 1) / step * step;
  const uint32_t max_n = kMaxGpus / step * step;
  if (min_n > max_n) return 0;
  if (ok(min_n)) return min_n;
  if (!ok(max_n)) return 0;
  // peak = a + b / n from two counts.
  const double n1 = min_n;
  const double n2 = std::min<double>(max_n, 2.0 * min_n);
  uint32_t n = max_n;
  if (n2 > n1) {
    const double p1 = peak_gb(min_n);
    const double p2 = peak_gb(static_cast<uint32_t>(n2));
    const double b = (p1 - p2) / (1.0 / n1 - 1.0 / n2);
    const double a = p1 - b / n1;
    if (b > 0 && threshold_gb > a) {
      const double solved = std::ceil(b / (threshold_gb - a) - 1e-9);
      const double rounded = std::ceil(solved / step) * step;
      n = static_cast<uint32_t>(std::clamp<double>(rounded, min_n, max_n));
    }
  }
  // Verify at n and n - step; where the closed form is off (a piecewise
  // term such as hybrid sharding's node limit), bisect on the monotone
  // verdict between the bounds verified so far.
  if (ok(n) && (n == min_n || !ok(n - step))) return n;
  uint32_t lo = min_n;  // !ok
  uint32_t hi = max_n;  // ok
  if (ok(n)) {
    hi = n;
  } else {
    lo = n;
  }
  while (hi - lo > step) {
    const uint32_t mid = lo + (hi - lo) / step / 2 * step;
    if (mid == lo) break;
    (ok(mid) ? hi : lo) = mid;
  }
  return hi;
}

CollectiveFit FitCollectiveConstant(const std::vector<double>& measured_gb,
                                    const std::vector<double>& predicted_gb) {
  CollectiveFit fit;
  const size_t n = std::min(measured_gb.size(), predicted_gb.size());
  if (n == 0) return fit;
  std::vector<double> residuals;
  residuals.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    residuals.push_back(measured_gb[i] - predicted_gb[i]);
  }
  std::sort(residuals.begin(), residuals.end());
  fit.constant_gb = n % 2 == 1
                        ? residuals[n / 2]
                        : 0.5 * (residuals[n / 2 - 1] + residuals[n / 2]);
  fit.constant_gb = std::max(0.0, fit.constant_gb);
  fit.runs = static_cast<int>(n);
  return fit;
}

std::vector<double> LeaveOneOutCollectiveConstants(
    const std::vector<double>& measured_gb,
    const std::vector<double>& predicted_gb) {
  const size_t n = std::min(measured_gb.size(), predicted_gb.size());
  std::vector<double> out(n, 0.0);
  if (n < 2) return out;
  // Residuals in order, and each run's place among them.
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const auto residual = [&](size_t i) {
    return measured_gb[i] - predicted_gb[i];
  };
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return residual(a) < residual(b); });
  std::vector<double> sorted(n);
  for (size_t k = 0; k < n; ++k) sorted[k] = residual(order[k]);
  // The j-th smallest of the others, when the left-out run is k-th.
  const auto others = [&](size_t k, size_t j) {
    return j < k ? sorted[j] : sorted[j + 1];
  };
  const size_t m = n - 1;  // runs left
  for (size_t k = 0; k < n; ++k) {
    const double median = m % 2 == 1
                              ? others(k, m / 2)
                              : 0.5 * (others(k, m / 2 - 1) + others(k, m / 2));
    out[order[k]] = std::max(0.0, median);
  }
  return out;
}

CollectiveFit CollectiveOf(
    const google::protobuf::RepeatedPtrField<v1::CollectiveConstant>& fitted,
    const TrainingSetup& setup) {
  CollectiveFit out;
  if (!HasParallel(setup)) return out;
  const std::string name = StrategyName(LayoutOf(setup).strategy);
  for (const v1::CollectiveConstant& c : fitted) {
    if (c.strategy() != name || c.runs() <= 0) continue;
    out.constant_gb = c.constant_gb();
    out.runs = c.runs();
  }
  return out;
}

void SetCollective(const CollectiveFit& fit, MemoryProfile* profile) {
  if (!profile->parallel.active) return;
  profile->parallel.collective_gb = fit.constant_gb;
  profile->parallel.collective_fitted = fit.runs > 0;
}

}  // namespace headroom
