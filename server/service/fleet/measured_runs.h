#ifndef HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_
#define HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_

// A probe's batch result as a measured run: what the calibration and the
// answers' evidence read. No gRPC, no store.

#include <cstdint>
#include <optional>
#include <string>

#include "headroom/v1/calibration.pb.h"
#include "headroom/v1/energy.pb.h"
#include "headroom/v1/fleet.pb.h"

namespace headroom {

// The measured run of one batch result of `probe`, run by `worker`: its
// model key, source, how it was measured, and the spec and setup when the
// model is not a catalog template. nullopt for a compiled-mode batch (the
// memory model predicts eager execution) or a card the catalog does not
// know.
std::optional<v1::MeasuredRun> MeasuredRunFor(const v1::Probe& probe,
                                              const v1::ProbeResult& result,
                                              const std::string& worker);

// The energy run of one window of an energy probe: the catalog GPU and its
// architecture, N from the model as the planner counts it, the
// quantization, the window's figures, the framework versions, simulated or
// not, the worker and `now_unix`. nullopt for a training probe, a result
// without a window (a failure record) or a card the catalog does not know.
std::optional<v1::EnergyRun> EnergyRunFor(const v1::Probe& probe,
                                          const v1::ProbeResult& result,
                                          const std::string& worker,
                                          int64_t now_unix);

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_FLEET_MEASURED_RUNS_H_
