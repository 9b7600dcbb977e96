#ifndef HEADROOM_BASE_VALUE_BOUNDS_H_
#define HEADROOM_BASE_VALUE_BOUNDS_H_

// The one table of what a measured or requested value may be, whichever
// way it arrives: a worker's result, a probe request, a Refit or energy
// import, a fit question. Each bound says why it is where it is; the checks
// of a whole run (evidence/run_checks.h) and of a request read them from
// here, so a value one path refuses every path refuses.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace headroom {

// --- Counts ---------------------------------------------------------------

// Parameters of one model, spec or run: 10^14, 100 times the largest model
// trained to date. Every spec's count is computed with overflow checks and
// held to this (ValidateSpec).
inline constexpr uint64_t kMaxParams = 100'000'000'000'000;
// Largest N (billions of parameters) an energy curve is asked about or fed
// with: 10^13 parameters, past every published energy measurement.
inline constexpr double kMaxParamsB = 10000;
// Largest batch the planner reasons about (and accepts in requests).
inline constexpr uint64_t kMaxBatch = uint64_t{1} << 20;
// GPUs of one setup (setup.gpus, nodes, gpus_per_node, tensor_parallel).
inline constexpr uint32_t kMaxGpus = 512;
// Training steps one run's energy covers (timed_steps): a probe runs at most
// 1,000; an imported run may cover a longer measurement.
inline constexpr uint32_t kMaxTimedSteps = 1'000'000;
// Tokens one energy window may generate.
inline constexpr uint64_t kMaxRunTokens = 10'000'000'000;

// --- Memory ---------------------------------------------------------------

// Largest bare card size accepted anywhere a card is given in GB.
inline constexpr double kMaxCardGb = 100000;
// A measured peak (allocator, device, one rank's) may exceed the catalog's
// size of the card it ran on by this factor: NVIDIA sells cards in GiB
// labelled GB (an "80 GB" H100 holds 85.9 * 10^9 bytes), and a peak is
// reported in 10^9 bytes. 1024^3 / 1000^3 = 1.0737.
inline constexpr double kCardPeakSlack = 1.0737;

// --- Time, energy, power --------------------------------------------------

// One training step takes at most a day.
inline constexpr double kMaxStepSeconds = 86400;
// No card draws more than 2 kW (a B200 is rated 1 kW).
inline constexpr double kMaxCardWatts = 2000;
// A training run's measured energy: a 2 kW card for a year.
inline constexpr double kMaxMeasuredRunEnergyJ = kMaxCardWatts * 365 * 86400;
// An energy window is one card for at most a day, at most kMaxCardWatts.
inline constexpr double kMaxWindowSeconds = 86400;
inline constexpr double kMaxRunEnergyJ = kMaxCardWatts * kMaxWindowSeconds;
// A token costs at most 1 kJ, about 50 times the dearest the shipped curves
// hold (21.7 J, turing fp16 at 7B).
inline constexpr double kMaxJPer1kTokens = 1e6;
// A generation runs at most 10^9 tokens a second on one card.
inline constexpr double kMaxTokensPerS = 1e9;
// An energy counter may read this much over kMaxCardWatts x the time it
// covers (counter and clock granularity) before the power is taken as wrong.
inline constexpr double kPowerSlack = 1.05;

// One entry of the table for a real-valued field: finite and within
// [min, max], or (min, max] when min_open; `unit` follows the range in an
// error ("s", "J", "GB", "W"; empty for a count).
struct ValueBound {
  double min = 0;
  double max = 0;
  bool min_open = false;
  absl::string_view unit;
};

inline constexpr ValueBound kStepSecondsBound{0, kMaxStepSeconds, true, "s"};
inline constexpr ValueBound kMeasuredRunEnergyBound{0, kMaxMeasuredRunEnergyJ,
                                                    false, "J"};
inline constexpr ValueBound kWindowEnergyBound{0, kMaxRunEnergyJ, true, "J"};
inline constexpr ValueBound kWindowSecondsBound{0, kMaxWindowSeconds, false,
                                                "s"};
inline constexpr ValueBound kIdleWattsBound{0, kMaxCardWatts, false, "W"};
inline constexpr ValueBound kJPer1kTokensBound{0, kMaxJPer1kTokens, true,
                                               "J per 1,000 tokens"};
inline constexpr ValueBound kTokensPerSBound{0, kMaxTokensPerS, false,
                                             "tokens/s"};
// A prediction of another planner: it may exceed the card, but no card.
inline constexpr ValueBound kPredictedGbBound{0, kMaxCardGb, false, "GB"};

// The bound of a peak measured on a card the catalog lists at `card_gb`:
// [0, card_gb x kCardPeakSlack] GB.
ValueBound CardPeakBound(double card_gb);

// OK when `value` is finite and within `bound`; otherwise INVALID_ARGUMENT
// "<field> = <value> is out of range; allowed (0, 86400] s".
absl::Status CheckBound(double value, absl::string_view field,
                        const ValueBound& bound);

// OK when the count `value` is in min..max; otherwise INVALID_ARGUMENT
// "<field> = <value> is out of range; allowed <min>..<max>".
absl::Status CheckCountRange(uint64_t value, absl::string_view field,
                             uint64_t min, uint64_t max);

// OK when `energy_j` over `steps` steps of `step_seconds` each on `gpus`
// GPUs is a mean draw of at most kMaxCardWatts x kPowerSlack per GPU;
// otherwise INVALID_ARGUMENT naming `field`, the figures and the mean power.
// `steps` 0 (not recorded) or a step of 0 s checks nothing.
absl::Status CheckMeanPower(double energy_j, uint64_t steps,
                            double step_seconds, uint32_t gpus,
                            absl::string_view field);

}  // namespace headroom

#endif  // HEADROOM_BASE_VALUE_BOUNDS_H_
