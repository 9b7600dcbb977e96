#ifndef HEADROOM_CORE_CALIBRATION_FIT_INPUTS_H_
#define HEADROOM_CORE_CALIBRATION_FIT_INPUTS_H_

// What a factor set was fitted on, as one digest: a refit whose runs give
// the digest of the current set has nothing new to fit.

#include <string>
#include <vector>

#include "headroom/v1/calibration.pb.h"

namespace headroom {

// SHA-256 (hex) of the distinct runs, whatever their order or repeats: the
// deterministic bytes of each distinct run, sorted, each with its length.
std::string FitInputsSha256(const std::vector<v1::MeasuredRun>& runs);

}  // namespace headroom

#endif  // HEADROOM_CORE_CALIBRATION_FIT_INPUTS_H_
