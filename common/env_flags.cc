#include "common/env_flags.h"

#include <cctype>
#include <cstdlib>
#include <iostream>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"

namespace headroom {

void ApplyEnvironmentToFlags(const std::string& prefix) {
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    std::string variable = prefix;
    for (char c : name) {
      variable.push_back(
          static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
    }
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr) continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      std::cerr << variable << "=" << value << ": " << error << "\n";
      std::exit(2);
    }
  }
}

bool PrintHelpIfAsked(int argc, char** argv, std::ostream& out) {
  absl::FlagsUsageConfig usage_config;
  usage_config.contains_help_flags = [](absl::string_view) { return true; };
  usage_config.contains_helpshort_flags = [](absl::string_view) {
    return true;
  };
  absl::SetFlagsUsageConfig(usage_config);
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "-h" || arg == "--help" || arg == "-help" ||
        arg == "--helpfull" || arg == "--helpshort") {
      absl::flags_internal::FlagsHelp(
          out, "", absl::flags_internal::HelpFormat::kHumanReadable,
          absl::ProgramUsageMessage());
      return true;
    }
  }
  return false;
}

}  // namespace headroom
