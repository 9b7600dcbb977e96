#ifndef HEADROOM_CLIENT_MICROBATCH_COMMANDS_H_
#define HEADROOM_CLIENT_MICROBATCH_COMMANDS_H_

// `headroom microbatch ...`: microbatch autotuning (README.md, "Energy,
// microbatches and density") computed offline from an autotune record.

#include <ostream>
#include <string>

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

// headroom microbatch select --record FILE [--policy max_batch|max_throughput]
// [--json]: recomputes `selected` and `failures` of a record in
// microbatch-autotune.json's format from its measurements and budget, and
// prints them in the record's own field names (with `json` a
// MicrobatchSelection object; otherwise a short table). An empty `policy`
// takes the record's selection_policy. Returns the exit code: 0 also when no
// candidate fits (said on `err`), 2 for a bad or missing file or policy.
int MicrobatchSelect(const std::string& record_path, const std::string& policy,
                     bool json, std::ostream& out, std::ostream& err);

// Registers `headroom microbatch` on `app`: select here, then plan,
// autotune and cache (RegisterAutotuneCommands).
void RegisterMicrobatchCommands(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_MICROBATCH_COMMANDS_H_
