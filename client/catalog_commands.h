#ifndef HEADROOM_CLIENT_CATALOG_COMMANDS_H_
#define HEADROOM_CLIENT_CATALOG_COMMANDS_H_

// headroom models | gpus: the catalogs a --model or --gpu is looked up in.

#include <ostream>
#include <string>

#include "client/commands.h"
#include "headroom/v1/model.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

// headroom models [--json]: every template in --models_dir with its
// parameters, standard positions and, for a cut-down template, what was cut.
int ListModels(const Options& options, std::ostream& out, std::ostream& err);

// headroom gpus [--json]: every catalog GPU with its memory in GB.
int ListGpus(const Options& options, std::ostream& out, std::ostream& err);

// "RTX 4090 (24 GB)": the card a --gpu value was understood as, or the
// bare size ("48 GB") when it names none.
std::string CardUnderstood(const std::string& gpu_flag_value);

// Registers `headroom models` and `headroom gpus` on `app`.
void RegisterCatalogCommands(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_CATALOG_COMMANDS_H_
