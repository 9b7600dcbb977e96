#ifndef HEADROOM_BENCH_SYNTHETIC_RUNS_H_
#define HEADROOM_BENCH_SYNTHETIC_RUNS_H_

// Synthetic measured runs over many model keys, for the benchmarks of a
// large store (million_runs.cc, core_bench.cc's evidence updates). Not
// measurements: each key's peaks are the component model's line over batch
// (unit factors) with 3 % noise and a per-card offset, and a batch past the
// card is an OOM run.

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/calibration/calibrate.h"
#include "core/catalog/model_catalog.h"
#include "core/evidence/anchor.h"
#include "core/evidence/model_key.h"
#include "core/memory/memory_profile.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom::bench {

// One generated key: a template under a setup, and its line over batch.
struct KeyPlan {
  std::string name;
  v1::TrainingSetup setup;
  ModelShape shape;
};

// `count` distinct keys from the catalog's sequence templates: each
// template's positions from 16 up, under 8 setups (precision x optimizer x
// checkpointing), skipping any that builds no profile or repeats a key.
inline std::vector<KeyPlan> PlanKeys(const ModelCatalog& catalog, int count) {
  std::vector<KeyPlan> plans;
  std::set<std::string> seen;
  ComponentArray ones;
  ones.fill(1.0);
  for (uint64_t positions = 16;
       plans.size() < static_cast<size_t>(count) && positions <= 8192;
       ++positions) {
    for (const char* name : {"gpt2", "bert-base", "t5-small",
                             "transformer-block", "llama3-block"}) {
      absl::StatusOr<const v1::ModelSpec*> spec = catalog.Find(name);
      if (!spec.ok() || (*spec)->positions() < positions) continue;
      for (int variant = 0; variant < 8; ++variant) {
        if (plans.size() == static_cast<size_t>(count)) break;
        v1::TrainingSetup setup = CalibrationSetup();
        setup.set_precision(variant & 1 ? v1::TrainingSetup::BF16_MIXED
                                        : v1::TrainingSetup::FP32);
        setup.set_optimizer(variant & 2 ? v1::TrainingSetup::SGD
                                        : v1::TrainingSetup::ADAMW);
        setup.set_activation_checkpointing((variant & 4) != 0);
        setup.set_positions(positions);
        absl::StatusOr<MemoryProfile> profile = BuildProfile(**spec, setup);
        if (!profile.ok()) continue;
        if (!seen.insert(ModelKeyOf(**spec, setup).canonical).second) continue;
        plans.push_back({name, setup, ShapeOf(*profile, ones)});
      }
    }
  }
  return plans;
}

struct Card {
  const char* name;
  double memory_gb;
  double offset_gb;  // what the synthetic card adds to every peak
};
constexpr Card kCards[] = {{"L4", 24, 0.30},
                           {"A10G", 24, 0.20},
                           {"H100", 80, 0.50},
                           {"A100-80GB", 80, 0.40}};

// Run `i` of key `plan` (runs cycle over cards and batches 1..64).
inline v1::MeasuredRun MakeRun(const KeyPlan& plan, int64_t i,
                               std::mt19937* rng) {
  std::normal_distribution<double> noise(0, 0.03);
  const Card& card = kCards[i % 4];
  const uint64_t batch = uint64_t{1} << ((i / 4) % 7);
  v1::MeasuredRun run;
  run.set_template_(plan.name);
  *run.mutable_setup() = plan.setup;
  run.set_gpu(card.name);
  run.set_batch(batch);
  run.set_measured_by(v1::TORCH_HARNESS);
  run.set_source(absl::StrCat("headroom-million-runs synthetic run ", i));
  const double peak =
      AnchoredPeakGb(plan.shape, Correction{}, batch, card.offset_gb) *
      (1 + noise(*rng));
  if (peak > card.memory_gb) {
    run.set_oom_on_gb(card.memory_gb);
  } else {
    run.set_measured_peak_gb(peak);
  }
  return run;
}

}  // namespace headroom::bench

#endif  // HEADROOM_BENCH_SYNTHETIC_RUNS_H_
