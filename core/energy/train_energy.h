#ifndef HEADROOM_CORE_ENERGY_TRAIN_ENERGY_H_
#define HEADROOM_CORE_ENERGY_TRAIN_ENERGY_H_

// Training energy (issue 21, item 3): joules per training step and per
// 1,000 training tokens (tokens = batch x positions) of a model, setup,
// batch and GPU. Measured where stored runs of the same model key on the
// same GPU hold energy, else from a compute model: the spec's FLOPs per step
// times the card's joules per 10^12 FLOPs. Plain C++: the service gathers
// the runs and probes, this answers.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/catalog/gpu_catalog.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

// The FLOPs of one training step.
struct StepFlops {
  uint64_t positions = 0;        // per sample
  uint64_t tokens_per_step = 0;  // batch x positions
  double forward_flops = 0;
  double step_flops = 0;
};

// Forward FLOPs of one sample through `spec` under `setup` (positions as
// the memory model takes them: a layer's own, else setup.positions, else
// the spec's): 2 x in x out per position for every matrix product (linear
// layers, attention's projections, MLPs, a MoE's router and the top_k +
// shared experts each token runs, convolutions as in/groups x out x kernel
// per output position, recurrent gates), plus attention's two score
// products, 2 x heads x head_dim x query positions x keys (keys = the
// window where one is set) each. Embedding lookups, norms, elementwise ops
// and opaque `parameters` layers do no matrix products and count 0. A step
// is the forward, a backward of twice the forward (gradients of inputs and
// of weights), and under activation checkpointing one more forward. The
// spec must be valid (ValidateSpec).
StepFlops FlopsPerStep(const v1::ModelSpec& spec,
                       const v1::TrainingSetup& setup, uint32_t batch);

// Joules per 10^12 FLOPs of a card, and where the figure comes from.
struct JoulesPerTflop {
  double value = 0;
  std::string source;
};

// TDP / dense fp16 tensor TFLOP/s: the card's joules per TFLOP at datasheet
// peak, a lower bound (a training step runs below peak). FAILED_PRECONDITION
// names the GPU when the catalog has no TDP for it.
absl::StatusOr<JoulesPerTflop> DatasheetJoulesPerTflop(const GpuInfo& gpu);

// One stored cuda probe's GEMM energy on a card (its report's
// gemm.j_per_tflop).
struct CudaProbeEnergy {
  std::string probe_id;
  std::string worker;
  double j_per_tflop = 0;
};

// The median of the probes' figures, named; nullopt without any.
std::optional<JoulesPerTflop> MeasuredJoulesPerTflop(
    const std::vector<CudaProbeEnergy>& probes, const std::string& gpu);

// gemm.j_per_tflop of a cuda probe's JSON report; nullopt when the report
// has none (no energy counter) or is not one (bounded: at most 1 MiB).
std::optional<double> GemmJoulesPerTflopOf(const std::string& details_json);

// One measured training run with energy: J over its timed steps / steps.
struct TrainEnergyRun {
  uint32_t batch = 0;
  double joules_per_step = 0;
  std::string worker;
  bool simulated = false;
};

// What an answer is made of.
struct TrainEnergyQuestion {
  std::string model_key;  // the key's id (mk-...)
  std::string gpu;        // catalog name
  uint32_t batch = 0;
  StepFlops flops;
  JoulesPerTflop j_per_tflop;
  // Runs of the same key on this GPU with energy (may be empty).
  std::vector<TrainEnergyRun> runs;
  std::string steps_source;
};

// The answer: the compute model always (its basis says "unavailable" and
// why when j_per_tflop.value is 0; the caller answers that case only with
// runs); measured (and the headline) where
// `runs` has any: the mean at the asked batch when measured there, else a
// least-squares line J/step = a + b x batch through two or more measured
// batches, else J/step proportional to tokens from the one measured batch.
v1::TrainEnergyResponse AnswerTrainEnergy(const TrainEnergyQuestion& question);

}  // namespace headroom

#endif  // HEADROOM_CORE_ENERGY_TRAIN_ENERGY_H_
