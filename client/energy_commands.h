#ifndef HEADROOM_CLIENT_ENERGY_COMMANDS_H_
#define HEADROOM_CLIENT_ENERGY_COMMANDS_H_

// `headroom energy ...`: energy per 1,000 generated tokens under weight
// quantization (README.md, "Energy, microbatches and density") and training
// energy per step. The planner answers (EstimateEnergy, RefitEnergy,
// PlotEnergy, TrainEnergy over gRPC with the usual --server/--tls_*/--token
// flags); with --offline the estimate, refit and plot are computed here from a
// curves file. Each command returns the process exit code: 0 on success, 2 for
// bad input (flags, files, values), 1 when the planner refused or an output
// file cannot be written, 3 when the planner cannot be reached.

#include <cstdint>
#include <ostream>
#include <string>

#include "client/commands.h"
#include "client/fleet_commands.h"
#include "headroom/v1/energy.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

struct EnergyOptions {
  // Compute here from `curves` instead of asking the planner.
  bool offline = false;
  // The curve set with --offline: energy-curves.json (the shipped file,
  // found from any directory, when empty) or a refit of it.
  std::string curves;
  // estimate: N in billions, a GPU (catalog name) or an architecture, and
  // fp16, nf4 or int8.
  double params_b = 0;
  std::string gpu;
  std::string arch;
  std::string quant;
  bool json = false;
  // refit: JSON lines of EnergyRun; or, with from_anchors, the curve set's
  // own anchors.
  std::string runs;
  bool from_anchors = false;
  bool subtract_idle = false;
  bool merge_anchors = false;
  // refit: where to write the new curve set (JSON); not written when empty.
  std::string out;
  // plot: the SVG file to write; the SVG goes to `out` when empty.
  std::string svg;
  // refit --stored: ask the planner to refit from the energy runs it stored
  // (simulated ones with include_simulated), with the promotion rule
  // (force overrides). plot: simulated measured points too (from the
  // planner); offline, the points come from `runs` (energy runs, JSON
  // lines) when given.
  bool stored = false;
  bool include_simulated = false;
  bool force = false;
};

// headroom energy probe: what SubmitEnergyProbe is asked.
struct EnergyProbeOptions {
  // fp16,nf4,int8 (comma-separated; empty = all three).
  std::string quant;
  uint32_t prompt_tokens = 0;
  uint32_t new_tokens = 0;
  double batch_timeout_s = 0;
};

// headroom energy --params-b N --gpu NAME|--arch ARCH --quant fp16|nf4|int8
// [--json] [--offline [--curves FILE]]: the answer (with the curve set's
// version) as text, or as JSON with the field names (crossover_b
// and borrowed_from null when absent). `planner` is used without
// --offline.
int EnergyEstimate(const Options& planner, const EnergyOptions& options,
                   std::ostream& out, std::ostream& err);

// headroom energy refit --runs FILE [--subtract-idle] [--merge-anchors]
// [--out FILE] [--json]: the planner refits (RefitEnergy) and stores the new
// set; with --offline [--curves FILE] the refit is computed here, and
// --from-anchors (offline only) refits the curves from their own anchors.
// Prints, per curve, its residual and leave-one-out MAE beside the
// previous ones.
int EnergyRefit(const Options& planner, const EnergyOptions& options,
                std::ostream& out, std::ostream& err);

// headroom energy plot --arch ARCH [--svg FILE] [--include_simulated]: dE%
// vs N per quantization from the planner's current curves with its measured
// points (PlotEnergy); with --offline [--curves FILE] [--runs FILE] drawn
// here, the points from the energy runs file.
int EnergyPlot(const Options& planner, const EnergyOptions& options,
               std::ostream& out, std::ostream& err);

// headroom energy train --model M --batch B --gpu KIND [setup flags as fit
// takes them] [--include_simulated] [--json]: joules per training step and
// per 1,000 training tokens (TrainEnergy), measured or from the compute
// model, with the basis named and the compute model's figure beside it.
int EnergyTrain(const Options& planner, std::ostream& out, std::ostream& err);

// headroom energy curves [--json]: the server's stored energy curve sets,
// every page of ListEnergyCurveSets, the current one starred.
int EnergyCurvesList(const Options& options, std::ostream& out,
                     std::ostream& err);

// headroom energy rollback, or energy promote --version ec-N: makes the
// curve set current before the present one (or the named one) current on
// the server.
int EnergyCurvesPromote(const Options& options, bool rollback,
                        std::ostream& out, std::ostream& err);

// headroom energy probe --model M [--quant fp16,nf4,int8] --gpu KIND|--worker
// ID [--prompt_tokens P] [--new_tokens N] [--repetitions R] [--executor
// torch|sim] [--watch]: queues an energy probe (Fleet.SubmitEnergyProbe) and
// prints its id, or follows it, one line per quantization's window.
int EnergyProbeSubmit(const Options& options, const ProbeOptions& probe,
                      const EnergyProbeOptions& energy, std::ostream& out,
                      std::ostream& err);

// headroom energy refit --stored [--include_simulated] [--force] [--json]:
// the planner refits from its stored energy runs, stores the set as ec-N
// and says whether the promotion rule made it current.
int EnergyRefitStored(const Options& options, const EnergyOptions& energy,
                      std::ostream& out, std::ostream& err);

// The answer as the CLI prints it, for the RPC path to reuse: JSON (pretty,
// explicit nulls) or text.
std::string EnergyAnswerJson(const v1::EstimateEnergyResponse& answer);
void PrintEnergyAnswer(const v1::EstimateEnergyResponse& answer,
                       std::ostream& out);

// A refit as the CLI prints it: one line per curve.
void PrintRefit(const v1::RefitEnergyResponse& refit, std::ostream& out);

// A training-energy answer as the CLI prints it.
void PrintTrainEnergy(const v1::TrainEnergyResponse& answer, std::ostream& out);

// Registers `headroom energy` and its subcommands on `app`.
void RegisterEnergyCommands(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_ENERGY_COMMANDS_H_
