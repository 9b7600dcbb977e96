#ifndef HEADROOM_PAGES_CALIBRATION_PLOT_H_
#define HEADROOM_PAGES_CALIBRATION_PLOT_H_

// The calibration page for people: predicted vs measured peak as an SVG
// (log-log, one colour per family, the y = x line and the +/-25 % band, OOM
// runs marked on their card's line, simulated runs hollow), and the HTML
// page of /calibration around it (docs/calibration-page.md).

#include <string>
#include <vector>

#include "core/calibration/calibration_page.h"
#include "headroom/v1/calibration.pb.h"

namespace headroom {

// An SVG of `predictions` (one per run; nullopt skips the run) against the
// measured peaks of usable runs. `title` heads the plot; the legend counts
// the runs drawn and, by reason, those not drawn.
std::string CalibrationSvg(const std::vector<v1::MeasuredRun>& runs,
                           const Predictions& predictions,
                           const std::string& title);

// A self-contained HTML page: the factor set's version and factors, its
// tables (every column explained), its regimes, and the plot of
// `predictions` (the global factors' prediction of each of `runs`, the
// stored runs) against the measurements. Simulated runs are counted and
// listed apart, and drawn only when `include_simulated`.
std::string CalibrationHtml(const v1::FactorSet& set,
                            const std::vector<v1::MeasuredRun>& runs,
                            const Predictions& predictions,
                            bool include_simulated);

}  // namespace headroom

#endif  // HEADROOM_PAGES_CALIBRATION_PLOT_H_
