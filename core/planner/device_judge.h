#ifndef HEADROOM_CORE_PLANNER_DEVICE_JUDGE_H_
#define HEADROOM_CORE_PLANNER_DEVICE_JUDGE_H_

// One target's answer on what the device holds (issue 30): at each batch
// every phase's allocator peak (phases.h), turned into reserved and device
// figures by the card's device costs (device_memory.h), each with its upper
// bound under the kind of setup's k (kind_bounds.h); the verdict compares
// the largest phase's device figure with the card.

#include <cstdint>
#include <functional>
#include <optional>

#include "core/memory/device_memory.h"
#include "core/memory/fit_verdict.h"
#include "core/memory/memory_profile.h"
#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

struct DeviceJudge {
  // The profile the step's peak comes from (anchored, the card's constant
  // in) and its factors; the built profile the other phases are counted
  // from, with the spec and setup.
  const MemoryProfile* step_profile = nullptr;
  ComponentArray factors{};
  const MemoryProfile* profile = nullptr;
  const v1::ModelSpec* spec = nullptr;
  const v1::TrainingSetup* setup = nullptr;
  double card_gb = 0;
  double headroom = 1.15;
  // k of the allocator figure at a batch (the prior's, or the anchored
  // bucket's).
  std::function<double(uint64_t)> k_at;
  DeviceCosts costs;
  // The setup kind's bound for a prior answer (an anchored one stands on
  // its own runs' k); its k per metric is never below k_at's.
  std::optional<v1::SetupKindBound> kind;
  // Nothing of this kind was measured: never FITS.
  bool untested = false;
};

struct BatchJudgement {
  v1::TargetBatch batch;
  FitVerdict verdict = FitVerdict::kDoesNotFit;
};

// Every phase's three figures at `batch`, the deciding phase (largest device
// upper bound) and the verdict: FITS when its device upper bound x headroom
// is within the card (never for an untested kind), DOES_NOT_FIT when a
// phase's device figure exceeds it, else BORDERLINE.
BatchJudgement JudgeBatch(const DeviceJudge& judge, uint64_t batch);

// The largest batch in 0..`step_bound` whose verdict is FITS (`fits_only`)
// or not DOES_NOT_FIT, given `step_bound`, the step phase's own answer on
// the allocator figure alone (no larger batch can pass): verified, else
// bisected (the verdict is monotone in the batch).
uint64_t DeviceMaxBatch(const DeviceJudge& judge, uint64_t step_bound,
                        bool fits_only);

// The step's largest batch on the device figure under a prior's single k:
// the closed form of MaxBatch on the card less the costs (an upper bound
// of DeviceMaxBatch's answer).
uint64_t StepMaxBatchOnDevice(const DeviceJudge& judge, bool fits_only);

}  // namespace headroom

#endif  // HEADROOM_CORE_PLANNER_DEVICE_JUDGE_H_
