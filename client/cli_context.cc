#include "client/cli_context.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/setup_flags.h"

namespace headroom::cli {
namespace {

constexpr char kConnectionFooter[] =
    "Connection flags (--server, --token, --tls_ca, --tls_cert, --tls_key, "
    "--deadline_ms) may come anywhere; see headroom --help.";

}  // namespace

CLI::App* CliContext::Command(CLI::App* parent, const std::string& name,
                              const std::string& about) {
  CLI::App* sub = parent->add_subcommand(name, about);
  sub->footer(absl::StrCat(kConnectionFooter, "\n", kExitCodes));
  return sub;
}

void CliContext::Run(const CLI::App* command, std::function<int()> action) {
  actions_[command] = std::move(action);
}

const std::function<int()>* CliContext::ActionOf(
    const CLI::App* command) const {
  auto it = actions_.find(command);
  return it == actions_.end() ? nullptr : &it->second;
}

void AddModelFlags(CLI::App* app, Options& o, bool compile_flag) {
  app->add_option("--model", o.model,
                  "catalog template, or a spec, config.json or ONNX file");
  app->add_option("--onnx", o.onnx,
                  "an ONNX model file (its weights are not sent)");
  app->add_option("--gpu", o.gpu,
                  "GPU names or sizes in GB, comma-separated (headroom gpus)");
  AddSetupFlags(app, o, compile_flag);
}

void AddJson(CLI::App* app, Options& o) {
  app->add_flag("--json", o.json, "print JSON instead of a table");
}

CLI::Option* InRange(CLI::Option* option, uint64_t lo, uint64_t hi) {
  const std::string allowed =
      hi == kNoUpperBound ? absl::StrCat("a whole number, ", lo, " or more")
                          : absl::StrCat(lo, "..", hi);
  return option->check(CLI::Validator(
      [lo, hi, allowed](std::string& value) -> std::string {
        uint64_t n = 0;
        // SimpleAtoi takes a sign: "+5" is 5, but "-5" must not wrap.
        const bool whole = !value.empty() && absl::ascii_isdigit(value[0]) &&
                           absl::SimpleAtoi(value, &n);
        if (whole && n >= lo && n <= hi) return "";
        return absl::StrCat("'", value, "' is invalid; allowed ", allowed);
      },
      "", "range"));
}

CLI::Option* ShownDefault(CLI::Option* option, const std::string& shown) {
  return option->default_str(shown);
}

}  // namespace headroom::cli
