#ifndef HEADROOM_CLIENT_FLEET_COMMANDS_H_
#define HEADROOM_CLIENT_FLEET_COMMANDS_H_

// headroom workers | probe submit|watch|cancel|list: the operator's side of
// the fleet (README.md, "Workers and probes").

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/commands.h"
#include "headroom/v1/fleet.pb.h"
#include "headroom/v1/planner.pb.h"
#include "nlohmann/json.hpp"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

struct ProbeOptions {
  // Where: --gpu KIND (in Options) or --worker ID.
  std::string worker;
  uint32_t repetitions = 0;
  std::string executor;
  uint32_t steps = 0;
  uint32_t warmup = 0;
  bool watch = false;
  // Longest a watch waits for the probe to end.
  int watch_timeout_s = 3600;
  // probe submit: seconds after submission when a probe still queued fails
  // (SubmitProbeRequest.expires_s; 0: never).
  uint32_t expires_s = 0;
  // probe list: only this state (queued, running, succeeded, failed,
  // cancelled; empty = all).
  std::string state;
};

// Where a probe runs, from --worker or the one --gpu KIND of `fit`:
// exactly one of the two is set; an error says which flags to give.
struct ProbePlacement {
  std::string worker;
  std::string gpu;
};
absl::StatusOr<ProbePlacement> PlacementOf(const ProbeOptions& probe,
                                           const v1::CheckFitRequest& fit);

// What every probe submission prints: the planner's warning, the probe as
// JSON (--json without --watch) or `submitted` (the line after
// "submitted "), then the watch when asked.
int AfterSubmit(const Options& options, const ProbeOptions& probe,
                const v1::SubmitProbeResponse& response,
                const std::string& submitted, std::ostream& out,
                std::ostream& err);

// headroom workers [--json]: the JSON is the ListWorkersResponse with the
// memory in GB beside the bytes (WorkersJson).
int Workers(const Options& options, std::ostream& out, std::ostream& err);
// The listing as JSON: CliJson's, plus hello.hostMemoryGb and each
// hello.gpus[i].memoryGb (10^9 bytes, two places), the unit the table and
// the README use.
nlohmann::json WorkersJson(const v1::ListWorkersResponse& response);
int ProbeSubmit(const Options& options, const ProbeOptions& probe,
                std::ostream& out, std::ostream& err);
int ProbeWatch(const Options& options, const ProbeOptions& probe,
               const std::string& id, std::ostream& out, std::ostream& err);
// Cancels a queued or running probe (exit 0, the probe printed). A probe
// already finished (succeeded, failed, cancelled) is not cancelled: exit 1
// saying which state it had.
int ProbeCancel(const Options& options, const std::string& id,
                std::ostream& out, std::ostream& err);
int ProbeList(const Options& options, const ProbeOptions& probe,
              std::ostream& out, std::ostream& err);

// The flags of a probe's run (--worker, --executor, --steps, --warmup,
// --watch, --watch_timeout_s): probe submit and microbatch autotune.
void AddProbeRunFlags(CLI::App* app, ProbeOptions& probe);

// Registers `headroom workers` and `headroom probe ...` on `app`.
void RegisterFleetCommands(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_FLEET_COMMANDS_H_
