#include "client/cli_context.h"

#include <utility>

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

}  // namespace headroom::cli
