#ifndef HEADROOM_CLIENT_FIT_OUTPUT_H_
#define HEADROOM_CLIENT_FIT_OUTPUT_H_

// `headroom fit`'s answer as text: the estimates, per card the verdicts with
// the three memory figures (allocated, reserved, device) and the phase that
// decides each, the setup's bound, and with --gpus auto the smallest counts.
// Takes the response only, so a hand-built one renders as a planner's does.

#include <ostream>
#include <string>

#include "headroom/v1/planner.pb.h"

namespace headroom::cli {

// A signed figure in GB to two places: "+0.02", "-0.31", and "0.00" for
// one that rounds to zero (never "-0.00").
std::string SignedGb(double gb);

// Writes the answer. `explain` (fit --explain) adds, per card, its device
// costs (reserved ratio, CUDA context, NCCL, with where each came from) and
// every phase's three figures and upper bounds per batch. Fields a planner
// left empty (one without the device figures) print nothing.
void PrintFit(const v1::CheckFitResponse& response, bool explain,
              std::ostream& out);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_FIT_OUTPUT_H_
