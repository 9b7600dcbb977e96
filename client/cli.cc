#include "client/cli.h"

#include <algorithm>
#include <functional>
#include <iostream>
#include <memory>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/catalog_commands.h"
#include "client/cli_context.h"
#include "client/commands.h"
#include "client/density_commands.h"
#include "client/energy_commands.h"
#include "client/fleet_commands.h"
#include "client/microbatch_commands.h"
#include "client/model_commands.h"
#include "client/rpc.h"
#include "common/build_info.h"
#include "common/client_channel.h"
#include "common/shipped_files.h"

namespace headroom::cli {
namespace {

// Flags may be spelled with dashes (--params-b) as well as underscores.
std::vector<std::string> NormalizeFlagNames(std::vector<std::string> args) {
  for (size_t i = 1; i < args.size(); ++i) {
    std::string& arg = args[i];
    if (arg == "--") break;
    if (arg.rfind("--", 0) != 0) continue;
    const size_t end = std::min(arg.find('='), arg.size());
    for (size_t c = 2; c < end; ++c) {
      if (arg[c] == '-') arg[c] = '_';
    }
  }
  return args;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1,
                         diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The deepest subcommand the arguments selected (the top app when none).
CLI::App* Selected(CLI::App* app) {
  for (;;) {
    std::vector<CLI::App*> chosen = app->get_subcommands();
    if (chosen.empty()) return app;
    app = chosen.front();
  }
}

std::string CommandPath(const CLI::App* app) {
  std::vector<std::string> names;
  for (; app != nullptr; app = app->get_parent()) {
    names.insert(names.begin(), app->get_name());
  }
  return absl::StrJoin(names, " ");
}

std::vector<std::string> SubcommandNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app->get_subcommands({})) {
    names.push_back(sub->get_name());
  }
  return names;
}

std::vector<std::string> FlagNames(const CLI::App* app) {
  std::vector<std::string> names;
  for (; app != nullptr; app = app->get_parent()) {
    for (const CLI::Option* option : app->get_options()) {
      for (const std::string& name : option->get_lnames()) {
        names.push_back("--" + name);
      }
    }
  }
  return names;
}

// "unknown command 'fitt' (closest: fit); see headroom --help".
int FailUnknown(const CLI::App* where, const std::string& word,
                std::ostream& err) {
  const bool flag = word.rfind('-', 0) == 0;
  std::string name = word.substr(0, word.find('='));
  const std::string closest =
      ClosestMatch(name, flag ? FlagNames(where) : SubcommandNames(where));
  std::string message;
  if (flag) {
    message =
        absl::StrCat("unknown flag ", name, " for '", CommandPath(where), "'");
  } else if (!SubcommandNames(where).empty()) {
    message = absl::StrCat("unknown command '", word, "' for '",
                           CommandPath(where), "'");
  } else {
    message = absl::StrCat("unexpected argument '", word, "' for '",
                           CommandPath(where), "'");
  }
  if (flag && closest == name) {
    // A command's flag given before the command.
    absl::StrAppend(&message, "; ", name,
                    " belongs to a command: put it after the command's name");
  } else if (!closest.empty()) {
    absl::StrAppend(&message, "; closest: ", closest);
  }
  absl::StrAppend(&message, " (see ", CommandPath(where), " --help)");
  return Fail(err, message, kExitUsage);
}

// Every unsigned option (CLI11's UINT) of `app` and its subcommands takes
// whole numbers only: CLI11 would wrap "-5" (cli_context.h, InRange).
void GuardUnsigned(CLI::App* app) {
  for (CLI::Option* option : app->get_options()) {
    if (option->get_type_name() == "UINT") InRange(option, 0, kNoUpperBound);
  }
  for (CLI::App* sub : app->get_subcommands({})) GuardUnsigned(sub);
}

// "--batch given 2 times ('8', '16'); give it once", for the first option
// of the selected command (or above it) given more often than it takes,
// else empty. CLI11 says "At Most 1 required but received 2".
std::string GivenTooOften(const CLI::App* where) {
  for (const CLI::App* level = where; level != nullptr;
       level = level->get_parent()) {
    for (const CLI::Option* option : level->get_options()) {
      if (option->get_items_expected_max() > 1 || option->count() < 2) {
        continue;
      }
      std::vector<std::string> values;
      for (const std::string& value : option->results()) {
        values.push_back(absl::StrCat("'", value, "'"));
      }
      return absl::StrCat(option->get_name(), " given ", option->count(),
                          " times (", absl::StrJoin(values, ", "),
                          "); give it once");
    }
  }
  return "";
}

}  // namespace

std::string ClosestMatch(const std::string& word,
                         const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(3, word.size() / 3) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = EditDistance(word, candidate);
    // A prefix ("--batc") is as close as a typo.
    const bool prefix =
        word.size() >= 3 && candidate.rfind(word, 0) == 0 && distance > 0;
    const size_t score = prefix ? 1 : distance;
    if (score < best_distance) {
      best_distance = score;
      best = candidate;
    }
  }
  return best;
}

int RunCli(const std::vector<std::string>& raw_args, std::ostream& out,
           std::ostream& err) {
  CliContext ctx(out, err);
  Options& o = ctx.options;
  std::string tls_ca, tls_cert, tls_key, token;
  CLI::App app{
      "headroom: will this training job fit on this GPU? The planner's "
      "command-line client for schedulers (--json) and operators.",
      "headroom"};
  app.option_defaults()->always_capture_default();
  app.allow_extras();
  app.fallthrough();
  app.footer(kExitCodes);
  app.set_help_flag("-h,--help", "print this command's flags and exit");
  app.set_version_flag("--version", VersionLine("headroom"),
                       "print the build (version, commit) and exit");
  app.add_option("--server", o.server, "planner address");
  app.add_option("--token", token,
                 "bearer token for a planner with --tokens_file (or "
                 "HEADROOM_TOKEN)");
  app.add_option("--tls_ca", tls_ca,
                 "TLS: CA certificate (PEM) of the planner's (or "
                 "HEADROOM_TLS_CA)");
  app.add_option("--tls_cert", tls_cert,
                 "mTLS: client certificate (PEM) (or HEADROOM_TLS_CERT)");
  app.add_option("--tls_key", tls_key,
                 "mTLS: client private key (PEM) (or HEADROOM_TLS_KEY)");
  // An int: a negative deadline would pass CLI11 and expire every call.
  InRange(app.add_option("--deadline_ms", o.deadline_ms,
                         "deadline of each call in milliseconds"),
          1, 86400000);
  app.add_option("--models_dir", o.models_dir,
                 "model catalog (offline commands)");

  // Each family registers its commands, in the order --help lists them.
  RegisterFitCommands(app, ctx);
  RegisterCatalogCommands(app, ctx);
  RegisterCalibrationCommands(app, ctx);
  RegisterModelCommands(app, ctx);
  RegisterMicrobatchCommands(app, ctx);
  RegisterDensityCommands(app, ctx);
  RegisterEnergyCommands(app, ctx);
  RegisterFleetCommands(app, ctx);
  RegisterHealthCommand(app, ctx);
  GuardUnsigned(&app);

  const std::vector<std::string> args = NormalizeFlagNames(raw_args);
  std::vector<std::string> reversed(args.rbegin(), args.rend() - 1);
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    CLI::App* where = Selected(&app);
    out << (where->get_parent() == nullptr
                ? where->help()
                : where->help(CommandPath(where->get_parent())));
    return kExitAnswer;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitAnswer;
  } catch (const CLI::CallForVersion& version) {
    out << version.what() << "\n";
    return kExitAnswer;
  } catch (const CLI::ParseError& e) {
    CLI::App* where = Selected(&app);
    std::string message = e.what();
    if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
      const std::string twice = GivenTooOften(where);
      if (!twice.empty()) message = twice;
    } else if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) {
      // "--context: '-5' is invalid; ..." -> "--context '-5' is invalid".
      const size_t colon = message.find(": '");
      if (colon != std::string::npos && message.rfind("--", 0) == 0) {
        message.erase(colon, 1);
      }
    }
    return Fail(err,
                absl::StrCat(message, " (see ", CommandPath(where), " --help)"),
                kExitUsage);
  }
  CLI::App* where = Selected(&app);
  // An unknown word or flag, named in the command it was given to.
  for (CLI::App* level = where; level != nullptr; level = level->get_parent()) {
    const std::vector<std::string> extras = level->remaining();
    if (!extras.empty()) return FailUnknown(where, extras.front(), err);
  }
  const std::function<int()>* action = ctx.ActionOf(where);
  if (action == nullptr) {
    if (where == &app) {
      err << app.help();
      return Fail(err, "give a command", kExitUsage);
    }
    return Fail(err,
                absl::StrCat("'", CommandPath(where), "' needs a command: ",
                             absl::StrJoin(SubcommandNames(where), ", "),
                             " (see ", CommandPath(where), " --help)"),
                kExitUsage);
  }

  o.security.token = token;
  o.security.tls_ca = tls_ca;
  o.security.tls_cert = tls_cert;
  o.security.tls_key = tls_key;
  SecurityFromEnvironment(&o.security);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      OpenChannel(o.server, o.security, ChannelArgs());
  if (!channel.ok()) {
    return Fail(err, std::string(channel.status().message()), kExitUsage);
  }
  o.channel = *std::move(channel);
  // The shipped catalogs, found from any working directory; a missing one is
  // reported by the command that needs it.
  o.models_dir = FindShipped(o.models_dir, "models_dir").value_or(o.models_dir);
  return (*action)();
}

}  // namespace headroom::cli
