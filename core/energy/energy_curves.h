#ifndef HEADROOM_CORE_ENERGY_ENERGY_CURVES_H_
#define HEADROOM_CORE_ENERGY_ENERGY_CURVES_H_

// Energy per 1,000 generated tokens under weight quantization (README.md,
// "Energy, microbatches and density"): the curve set of energy-curves.json and
// the answer to a query.
//
// dE%(N) = A - S * x / (1 + x), x = N / Nstar, N in billions of parameters.
// The quantized figure is fp16 J/1k * (1 + dE% / 100).
//
// fp16 J/1k at N (Fp16JPer1k):
//   * at an fp16 anchor: the anchor, exactly;
//   * between two anchors: the power law through those two (straight line
//     in log N, log J), so the curve passes through every anchor;
//   * beyond the anchors: a power law through the nearer end anchor whose
//     exponent is the least-squares slope of log J on log N over all anchors;
//   * an architecture without fp16 anchors uses those of the architecture it
//     borrows its curves from (`borrow`), unchanged, and says so.
// Uncertainty: inside, the relative RMS residual of that log-log fit,
// exp(rms) - 1 (how far a measured point departs from a smooth law: 1-10 %
// on the shipped anchors); beyond, that figure grows with the distance:
// times (1 + |log10 of the ratio to the nearer end|) per decade outside. A
// borrowed architecture's figure is the source's; the true difference between
// generations is not in the data and can be far larger (at 7B, Blackwell
// and Ampere fp16 differ by 25 %, Turing by a factor of 5).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/value_bounds.h"
#include "headroom/v1/energy.pb.h"

namespace headroom {

// The quantizations a query may name; the curve set keys them "NF4", "INT8".
enum class Quant { kFp16, kNf4, kInt8 };

// Parses "fp16", "nf4", "int8" in any case; INVALID_ARGUMENT naming the
// allowed values otherwise.
absl::StatusOr<Quant> ParseQuant(absl::string_view name);

// "fp16", "nf4", "int8".
std::string QuantName(Quant quant);

// "NF4", "INT8" (the curve set's key); "FP16" for fp16.
std::string QuantKey(Quant quant);

// An answer's points near N count as measured when an anchor of the curve
// that answered lies within this factor of N (EstimateEnergyResponse.
// points_near_n).
inline constexpr double kNearFactor = 2;

// Parses an energy-curves.json text and validates it (ValidateCurveSet).
// `what` names the source in errors. version is "shipped" when the file has
// none.
absl::StatusOr<v1::EnergyCurveSet> ParseCurveSet(absl::string_view json,
                                                 absl::string_view what);

// Checks what the answers rely on: s_cap for NF4 and INT8 in (0, 100]; per
// curve Nstar > 0, S >= 0, S - A <= s_cap, 0 < n_min <= n_max, at least one
// anchor, resid_std >= 0, crossover_b equal (to 3 decimals) to the closed
// form or null where there is none; fp16 anchors with N strictly increasing
// and positive energy for every architecture with curves; borrow targets
// that have curves and fp16 anchors. INVALID_ARGUMENT names the entry.
absl::Status ValidateCurveSet(const v1::EnergyCurveSet& set);

// A - S * x / (1 + x) at N = n_b.
double DePct(const v1::EnergyCurve& curve, double n_b);

// The N where dE% = 0, in closed form: Nstar * A / (S - A). A crossover
// exists only for 0 < A < S (dE% falls from A at N = 0 to A - S as N grows);
// nullopt otherwise.
std::optional<double> CrossoverB(double a, double s, double nstar);
std::optional<double> CrossoverB(const v1::EnergyCurve& curve);

// The curve of `quant` (not fp16) for `arch`, its own or borrowed; sets
// `*borrowed_from` to the source architecture or to "" when it is its own.
// INVALID_ARGUMENT when neither the architecture nor its borrow has one.
absl::StatusOr<const v1::EnergyCurve*> FindCurve(const v1::EnergyCurveSet& set,
                                                 const std::string& arch,
                                                 Quant quant,
                                                 std::string* borrowed_from);

// fp16 J per 1k generated tokens at N and how it was found (see the top of
// this file).
struct Fp16Estimate {
  double j_per_1k = 0;
  std::string basis;  // "anchor", "interpolated", "extrapolated"
  double rel_uncertainty = 0;
  std::string borrowed_from;  // "" when the architecture has its own anchors
};
absl::StatusOr<Fp16Estimate> Fp16JPer1k(const v1::EnergyCurveSet& set,
                                        const std::string& arch, double n_b);

// The answer to a query: N in (0, 10000], a GPU (resolved through the GPU
// catalog) or an architecture of the set, a quantization. INVALID_ARGUMENT
// names the field and the allowed values; NOT_FOUND for a GPU the catalog
// lacks.
absl::StatusOr<v1::EstimateEnergyResponse> EstimateEnergy(
    const v1::EnergyCurveSet& set, const v1::EstimateEnergyRequest& request);

// Architectures a query may name: those with curves, and those borrowing.
std::vector<std::string> KnownArchs(const v1::EnergyCurveSet& set);

}  // namespace headroom

#endif  // HEADROOM_CORE_ENERGY_ENERGY_CURVES_H_
