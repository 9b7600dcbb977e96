#ifndef HEADROOM_CORE_ENERGY_ENERGY_POINTS_H_
#define HEADROOM_CORE_ENERGY_ENERGY_POINTS_H_

// Measured points for the energy picture (issue 21, item 6): dE% vs fp16 at
// N, by worker and date, drawn over the curves. Plain C++: whoever holds the
// measurements (a runs file, the store's energy runs, refitted curve sets)
// turns them into points here.

#include <cstdint>
#include <string>
#include <vector>

#include "headroom/v1/energy.pb.h"

namespace headroom {

struct MeasuredEnergyPoint {
  std::string arch;   // lowercase architecture (catalog)
  std::string quant;  // "NF4" or "INT8", as the curve set keys them
  std::string model;
  std::string gpu;
  double params_b = 0;
  double de_pct = 0;
  // Who measured it and when; empty / 0 where the record does not say.
  std::string worker;
  int64_t date_unix = 0;
  bool simulated = false;
};

// One measured generation window with what the store knows of it.
struct EnergyRunRecord {
  v1::EnergyRun run;
  std::string worker;
  int64_t date_unix = 0;
  bool simulated = false;
};

// A dE% point for every quantized run with an fp16 run of the same model,
// GPU and worker: 100 x (J/1k quantized / J/1k fp16 - 1), J/1k =
// energy_j / tokens_generated x 1000 (idle subtracted when
// `subtract_idle`). Runs of GPUs the catalog does not know, or with no
// tokens, are skipped. The fp16 figure is the mean of that group's fp16 runs.
std::vector<MeasuredEnergyPoint> PointsFromEnergyRuns(
    const std::vector<EnergyRunRecord>& runs, bool subtract_idle);

// The anchors refits added: each anchor of `sets` (stored curve sets) that
// `baseline` (the first stored, i.e. shipped, set) does not hold, dated by
// the set that first held it, worker named "refit <version>".
std::vector<MeasuredEnergyPoint> PointsFromCurveSets(
    const std::vector<v1::EnergyCurveSet>& sets,
    const v1::EnergyCurveSet& baseline);

}  // namespace headroom

#endif  // HEADROOM_CORE_ENERGY_ENERGY_POINTS_H_
