#ifndef HEADROOM_CLIENT_AUTOTUNE_COMMANDS_H_
#define HEADROOM_CLIENT_AUTOTUNE_COMMANDS_H_

// headroom microbatch plan | cache list|put|drop: the planner's side of
// microbatch autotuning (issue 7).

#include <cstdint>
#include <ostream>
#include <string>

#include "client/commands.h"
#include "client/fleet_commands.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

// An autotune record's *_gb figure (GiB, 2^30 bytes, as the autotuner wrote
// it; microbatch.proto) in GB (10^9 bytes), the unit every answer prints.
inline double RecordGb(double gib) { return gib * 1073741824.0 / 1e9; }

struct MicrobatchPlanOptions {
  uint32_t context = 0;
  uint32_t global_batch = 0;
  std::string candidates;  // comma-separated
  bool compile = false;
  std::string attention_backend;
  double vram_fraction = 0.98;
  double reserve_gb = 0;
  // A JSON file holding an AutotuneCacheKey, or a record whose cache_key is
  // used.
  std::string cache_key;
};

int MicrobatchPlan(const Options& options, const MicrobatchPlanOptions& plan,
                   std::ostream& out, std::ostream& err);
// headroom microbatch autotune: Fleet.SubmitAutotune with the plan flags,
// placed by --gpu (a catalog GPU) or probe.worker. Prints the plan summary
// and either the cached selection or the queued probe; with probe.watch,
// each measured candidate as it arrives and the worker's selection at the
// end. `policy`: max_batch (also when empty) or max_throughput.
int MicrobatchAutotune(const Options& options,
                       const MicrobatchPlanOptions& plan,
                       const ProbeOptions& probe, const std::string& policy,
                       std::ostream& out, std::ostream& err);

int MicrobatchCacheList(const Options& options, std::ostream& out,
                        std::ostream& err);
int MicrobatchCachePut(const Options& options, const std::string& record_path,
                       std::ostream& out, std::ostream& err);
int MicrobatchCacheDrop(const Options& options, const std::string& id,
                        std::ostream& out, std::ostream& err);

// Registers `plan`, `autotune` and `cache list|put|drop` on the
// `headroom microbatch` command.
void RegisterAutotuneCommands(CLI::App& microbatch, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_AUTOTUNE_COMMANDS_H_
