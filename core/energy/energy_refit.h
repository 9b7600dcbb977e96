#ifndef HEADROOM_CORE_ENERGY_ENERGY_REFIT_H_
#define HEADROOM_CORE_ENERGY_ENERGY_REFIT_H_

// Refitting energy curves from measured runs (README.md, "Energy, microbatches
// and density").
//
// For a fixed Nstar, dE%(N) = A - S g(N), g = (N/Nstar) / (1 + N/Nstar), is
// linear in A and S, so the fit scans Nstar and solves A, S exactly:
//   * Nstar runs over [n_min / 10, 10 n_max] of the points being fitted (a
//     decade either side of the measured sizes: a knee further out leaves
//     g nearly constant or nearly linear over the data and cannot be placed
//     by it), on a log grid of 400 points per decade refined by golden
//     section around the best grid point;
//   * for each Nstar, A and S minimize the squared residuals subject to
//     S >= 0 (quantizing never gets relatively worse as N grows) and
//     S - A <= s_cap (the saving -dE% tends to S - A as N grows, and never
//     exceeds s_cap: 75 % for NF4, 50 % for INT8 — the file's S values of
//     90.55 (ada NF4) and 127.94 (ampere INT8) show s_cap does not bound S
//     itself). The constrained problem is a 2-variable convex QP, solved by
//     comparing the unconstrained solution with the optimum on each edge.
//   * ties (S = 0 makes the fit independent of Nstar) keep the top of the
//     range, as the shipped file reports Nstar = 200 for its S = 0 curve.
// The result is deterministic. resid_std = sqrt(SSR / n), the file's
// definition (it reproduces the shipped values to within the rounding of the
// anchors to 0.01). Leave-one-out MAE refits without each point in turn
// (same rules, the range taken from the remaining points); it needs n - 1 >=
// 3 points and is null otherwise, as in the file.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/value_bounds.h"
#include "headroom/v1/energy.pb.h"

namespace headroom {

// One point of a curve: dE% vs fp16 at N billion parameters.
struct EnergyPoint {
  double n_b = 0;
  double de_pct = 0;
  std::string model;
  std::string gpu;
};

// What one measured energy run may claim is in the value table
// (base/value_bounds.h: window, energy, power, tokens, J per 1k tokens).
// A quantized run uses at most 11 times the energy of its fp16 partner
// (dE <= 1000 %; the shipped curves reach 130.83 %).
inline constexpr double kMaxDePct = 1000;

// Points needed to fit A, S and Nstar.
inline constexpr int kMinCurvePoints = 3;

struct CurveFit {
  double a = 0;
  double s = 0;
  double nstar = 0;
  double resid_std = 0;  // sqrt(SSR / n)
  double nstar_lo = 0;   // the scanned range
  double nstar_hi = 0;
  bool nstar_at_edge = false;
  bool s_at_zero = false;
  bool saving_at_cap = false;
};

// Fits one curve as described at the top of this file. INVALID_ARGUMENT
// when there are fewer than kMinCurvePoints points or fewer than two
// distinct N, or s_cap is not in (0, 100]; `what` names the curve.
absl::StatusOr<CurveFit> FitCurve(const std::vector<EnergyPoint>& points,
                                  double s_cap, absl::string_view what);

// Leave-one-out MAE in percentage points; nullopt with fewer than
// kMinCurvePoints + 1 points.
std::optional<double> LeaveOneOutMae(const std::vector<EnergyPoint>& points,
                                     double s_cap);

// A fitted curve with the file's fields: anchors, range, crossover_b and
// loo_mae filled in.
absl::StatusOr<v1::EnergyCurve> FitEnergyCurve(
    const std::vector<EnergyPoint>& points, double s_cap,
    absl::string_view what);

// Refits every curve of `base` from its own anchors (the check that the
// fitter reproduces the shipped curves). The set's version is left empty.
absl::StatusOr<v1::RefitEnergyResponse> RefitFromAnchors(
    const v1::EnergyCurveSet& base);

// Measured runs -> new curves. Runs are grouped by architecture (through
// the GPU catalog), and each quantized run is compared with the fp16 runs of
// the same model on the same GPU: dE% = 100 (q / fp16 - 1) of the mean J per
// 1k generated tokens, raw or idle-subtracted (request.subtract_idle).
// fp16 runs also replace (or, merging, join) the architecture's fp16
// anchors. Curves without new points are carried over unchanged. The set's
// version is left empty for the caller (the store) to assign; trained_on
// is set from `trained_on`. Each refitted curve's summary carries its
// held-out error on the new points (each predicted by the refit without
// it, merged anchors included) and the error of `base`'s curve there (its
// own or borrowed): an architecture that borrowed gets a curve of its own
// for each quantization it now has points for (FindCurve prefers it).
// Every run must be finite and within the
// limits above (params_b within kMaxParamsB, strings within input_limits.h);
// INVALID_ARGUMENT names the run, the field and the allowed range, or the
// curve at fault; NOT_FOUND for a GPU the catalog lacks.
absl::StatusOr<v1::RefitEnergyResponse> RefitEnergy(
    const v1::EnergyCurveSet& base, const v1::RefitEnergyRequest& request,
    const std::string& trained_on);

// The promotion rule of RefitEnergyRequest.force (energy.proto): promote
// when forced, or when every refitted curve has a held-out error no worse
// than the current set's on the same points (a curve the current set lacks
// counts as no worse; one too small to hold a point out does not). A refit
// of fp16 anchors only is kept unless forced. `reason` says which curve
// decided.
struct EnergyPromotion {
  bool promote = false;
  std::string reason;
};
EnergyPromotion DecideEnergyPromotion(const v1::RefitEnergyResponse& refit,
                                      bool force);

// Parses a JSON-lines file of EnergyRun; blank lines are skipped and an
// error names the line.
absl::StatusOr<std::vector<v1::EnergyRun>> ParseEnergyRunsJsonl(
    absl::string_view text);

}  // namespace headroom

#endif  // HEADROOM_CORE_ENERGY_ENERGY_REFIT_H_
