#ifndef HEADROOM_CLIENT_CLI_CONTEXT_H_
#define HEADROOM_CLIENT_CLI_CONTEXT_H_

// What a command family's registration (Register*Commands in each
// *_commands.h) is given: the Options the flags fill, the streams a command
// writes to, and the way a command is added and told what to run.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "client/commands.h"

namespace headroom::cli {

// The exit codes, the footer of `headroom --help` and of every command's.
inline constexpr char kExitCodes[] =
    "Exit codes: 0 an answer (whatever the verdict); 1 the planner refused "
    "the request, or a watched probe failed or was cancelled; 2 bad usage (an "
    "unknown command or flag, a bad value, a template, GPU or file that does "
    "not exist); 3 the planner could not be reached.";

class CliContext {
 public:
  CliContext(std::ostream& out, std::ostream& err) : out(out), err(err) {}
  CliContext(const CliContext&) = delete;
  CliContext& operator=(const CliContext&) = delete;

  // The flags every command shares (and the global ones: --server, ...).
  Options options;
  std::ostream& out;
  std::ostream& err;

  // Adds the subcommand `name` to `parent`, with the connection flags' and
  // the exit codes' footer.
  CLI::App* Command(CLI::App* parent, const std::string& name,
                    const std::string& about);
  // What `command` runs once its flags are parsed; returns the exit code.
  void Run(const CLI::App* command, std::function<int()> action);
  // The action of `command`, or null when it has none (a group such as
  // `headroom calib`).
  const std::function<int()>* ActionOf(const CLI::App* command) const;
  // A value (a family's flag struct) that lives as long as the context, so
  // flags and actions may refer to it.
  template <typename T>
  T& Keep() {
    auto kept = std::make_shared<T>();
    T& value = *kept;
    kept_.push_back(std::move(kept));
    return value;
  }

 private:
  std::map<const CLI::App*, std::function<int()>> actions_;
  std::vector<std::shared_ptr<void>> kept_;
};

// --model, --onnx, --gpu and the training setup (fit, probe submit,
// microbatch plan and autotune, energy train).
void AddModelFlags(CLI::App* app, Options& o, bool compile_flag = true);
// --json.
void AddJson(CLI::App* app, Options& o);

// The largest value InRange's `hi` may be: no upper bound but the type's.
inline constexpr uint64_t kNoUpperBound = ~uint64_t{0};

// An unsigned option's value must be a whole number in lo..hi, checked
// before CLI11 converts it (it wraps "-5" to 18446744073709551611): else
// the parse fails with "--context '-5' is invalid; allowed 1..1048576" (or
// "allowed a whole number, lo or more" when hi is kNoUpperBound). cli.cc
// puts InRange(0, kNoUpperBound) on every unsigned option; a command adds
// its own range where it knows one.
CLI::Option* InRange(CLI::Option* option, uint64_t lo, uint64_t hi);

// The default `--help` shows for `option`: the value a 0 stands for ("3"
// for --steps, which the worker reads as 3), or "" for none where another
// program decides it (the planner's coverage), never a bare "=0".
CLI::Option* ShownDefault(CLI::Option* option, const std::string& shown);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_CLI_CONTEXT_H_
