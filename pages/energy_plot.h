#ifndef HEADROOM_PAGES_ENERGY_PLOT_H_
#define HEADROOM_PAGES_ENERGY_PLOT_H_

// A picture of one architecture's energy curves (issue 6, item 5).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/energy/energy_points.h"
#include "headroom/v1/energy.pb.h"

namespace headroom {

// An SVG document: dE% vs fp16 against N (log axis, billions) for each
// quantization with a curve for `arch` (its own or borrowed, said in the
// title): the curve (solid over [n_min, n_max], dashed where it is an
// extrapolation), the +/- resid_std band, the anchors, and the crossover
// where there is one; over them the measured `points` of `arch` (filled
// markers in their quantization's color, one shape per worker, each titled
// with its model, GPU, worker and date; a legend of workers and dates).
// INVALID_ARGUMENT names the allowed architectures.
absl::StatusOr<std::string> EnergyPlotSvg(
    const v1::EnergyCurveSet& set, const std::string& arch,
    const std::vector<MeasuredEnergyPoint>& points = {});

// How many of `points` EnergyPlotSvg draws for `arch`: those of `arch`
// with a positive N, a finite dE% and a quantization the plot has a curve
// for.
int CountDrawnPoints(const v1::EnergyCurveSet& set, const std::string& arch,
                     const std::vector<MeasuredEnergyPoint>& points);

// What /energy says of `arch` when the set has no curves of its own for it
// (it borrows another architecture's, EnergyCurveSet.borrow): "no Hopper
// measurements yet (H100/H200): its answers use ampere's curves
// (borrowed)", or, once `points` hold some of `arch`, how many wait for a
// refit. "" for an architecture with curves of its own.
std::string BorrowedCurveNotice(const v1::EnergyCurveSet& set,
                                const std::string& arch,
                                const std::vector<MeasuredEnergyPoint>& points);

// `text` with &, <, > and " escaped for HTML and SVG.
std::string EscapeHtml(const std::string& text);

}  // namespace headroom

#endif  // HEADROOM_PAGES_ENERGY_PLOT_H_
