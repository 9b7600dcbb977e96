#ifndef HEADROOM_SERVER_SERVICE_PAGES_ENERGY_PLOT_H_
#define HEADROOM_SERVER_SERVICE_PAGES_ENERGY_PLOT_H_

// A picture of one architecture's energy curves (issue 6, item 5).

#include <string>

#include "absl/status/statusor.h"
#include "headroom/v1/energy.pb.h"

namespace headroom {

// An SVG document: dE% vs fp16 against N (log axis, billions) for each
// quantization with a curve for `arch` (its own or borrowed, said in the
// title): the curve (solid over [n_min, n_max], dashed where it is an
// extrapolation), the +/- resid_std band, the anchors, and the crossover
// where there is one. INVALID_ARGUMENT names the allowed architectures.
absl::StatusOr<std::string> EnergyPlotSvg(const v1::EnergyCurveSet& set,
                                          const std::string& arch);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_PAGES_ENERGY_PLOT_H_
