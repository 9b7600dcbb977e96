#ifndef HEADROOM_CORE_DENSITY_DENSITY_RANK_H_
#define HEADROOM_CORE_DENSITY_DENSITY_RANK_H_

// Density ranking (README.md, "Energy, microbatches and density"): which
// configuration trains and serves at once in the smallest box. Runs are
// compared against the peaks of the set they are ranked in, and against the
// memory of the accuracy champion.

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "headroom/v1/density.pb.h"

namespace headroom {

// A run learns when avg_accuracy / peak_acc reaches this; only learners set
// peak_thru and peak_avail, earn an lpd, and enter top_speed, top_avail and
// top_mix.
inline constexpr double kLearnerRelAcc = 0.7;
// A pillar (rel_acc, rel_thru, rel_avail) stands at this; so does the band.
inline constexpr double kPillarRel = 0.8;
// Gold runs use at most this fraction of the accuracy champion's memory.
inline constexpr double kGoldRamFrac = 0.2;

// The values every derived field is taken against.
struct DensityPeaks {
  double peak_score = 0;
  double peak_soft = 0;
  double peak_acc = 0;
  // Over learners only.
  double peak_thru = 0;
  double peak_avail = 0;
  // Over all runs.
  double fast_thru = 0;
  double best_avail = 0;
  // acc_champ's ram_kib: what shrink and ram_frac are measured against.
  double champ_ram_kib = 0;
};

// Lengths of top, top_speed, top_avail and top_mix.
struct DensityListLengths {
  int top = 40;
  int top_speed = 12;
  int top_avail = 12;
  int top_mix = 12;
};

// Most runs one SubmitDensityRuns may store.
inline constexpr int kMaxDensityRunsPerRequest = 10000;

// OK when every run has an id, mode, dtype and arch (each, and format, at
// most kMaxNameChars), every numeric field set, finite and non-negative,
// the percentages (availability, avg_accuracy, soft_acc) at most 100,
// ram_kib positive, and no id repeats; otherwise INVALID_ARGUMENT naming
// the run (index and id) and the field.
absl::Status ValidateDensityRuns(const std::vector<v1::DensityRawRun>& runs);

// The peaks `board` was ranked against, as it publishes them (champ_ram_kib
// from its acc_champ).
DensityPeaks PeaksOf(const v1::DensityLeaderboard& board);

// The raw fields of a ranked run.
v1::DensityRawRun RawOf(const v1::DensityRun& run);

// `run` with every derived field against `peaks`. A ratio against a peak of
// 0 is 0 rather than a division by zero; peaks.champ_ram_kib must be
// positive.
v1::DensityRun DeriveDensityRun(const v1::DensityRawRun& run,
                                const DensityPeaks& peaks);

// Derives every run against `peaks` and fills n, peak_dens_*, the four lists,
// gold_std and gold_modes; champions, peaks and formula are left unset.
// `runs` must be valid (ValidateDensityRuns) and peaks.peak_acc positive.
// Ties in a list go to the smaller ram_kib, then the higher throughput, then
// the smaller id.
v1::DensityLeaderboard RankAgainstPeaks(
    const std::vector<v1::DensityRawRun>& runs, const DensityPeaks& peaks,
    const DensityListLengths& lengths);

// The whole leaderboard of the request's runs (after the arch/dtype/mode
// filters): peaks and champions taken over those runs, then
// RankAgainstPeaks. INVALID_ARGUMENT on a bad run or a negative list length.
// No run to rank, or every avg_accuracy 0, gives empty lists and
// empty_reason saying why.
absl::StatusOr<v1::RankDensityResponse> RankDensity(
    const v1::RankDensityRequest& request);

}  // namespace headroom

#endif  // HEADROOM_CORE_DENSITY_DENSITY_RANK_H_
