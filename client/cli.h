#ifndef HEADROOM_CLIENT_CLI_H_
#define HEADROOM_CLIENT_CLI_H_

// The headroom command line: its subcommands, their flags and --help, and
// the exit codes every command returns (commands.h, kExit*).

#include <ostream>
#include <string>
#include <vector>

namespace headroom::cli {

// Parses `args` (args[0] is the program name), runs the command they name
// and returns the process exit code. --help and -h print that command's
// flags to `out` (exit 0); an unknown command or flag is named with the
// closest match on `err` (exit 2).
int RunCli(const std::vector<std::string>& args, std::ostream& out,
           std::ostream& err);

// The closest of `candidates` to `word` by edit distance, or empty when
// none is close enough to suggest.
std::string ClosestMatch(const std::string& word,
                         const std::vector<std::string>& candidates);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_CLI_H_
