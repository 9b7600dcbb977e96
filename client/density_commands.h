#ifndef HEADROOM_CLIENT_DENSITY_COMMANDS_H_
#define HEADROOM_CLIENT_DENSITY_COMMANDS_H_

// `headroom density ...`: the density leaderboard (README.md, "Energy,
// microbatches and density") computed offline from a file of runs.

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/density.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

// The runs of `path`, which is either a leaderboard in
// density-leaderboard.json's format (its champions, lists and gold_std, each
// run once; extra derived fields are ignored) or JSON lines, one run per
// line with at least the raw fields. Errors name the file and, for JSON
// lines, the line.
absl::StatusOr<std::vector<v1::DensityRawRun>> LoadDensityRuns(
    const std::string& path);

// headroom density rank --runs FILE [--json]: ranks the runs of FILE with
// the default list lengths and prints a table, or with `json` the
// leaderboard in density-leaderboard.json's field names. Returns the exit
// code: 0 also for an empty ranking (its reason goes to `err`), 2 for a bad
// or missing file.
int DensityRank(const std::string& runs_path, bool json, std::ostream& out,
                std::ostream& err);

// Registers `headroom density rank` on `app`.
void RegisterDensityCommands(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_DENSITY_COMMANDS_H_
