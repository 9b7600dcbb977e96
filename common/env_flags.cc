#include "common/env_flags.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

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

namespace {

// One flag as absl's usage prints it, "--name (help); default: value;",
// wrapped at 80 columns with continuation lines indented by 6.
void PrintFlag(const absl::CommandLineFlag& flag, std::ostream& out) {
  std::string value = flag.DefaultValue();
  if (flag.IsOfType<std::string>()) value = absl::StrCat("\"", value, "\"");
  const std::string text = absl::StrCat("--", flag.Name(), " (", flag.Help(),
                                        "); default: ", value, ";");
  constexpr size_t kWidth = 80;
  std::string line = "   ";
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() + 1 + word.size() > kWidth && line.size() > 6) {
      out << line << "\n";
      line = "     ";
    }
    absl::StrAppend(&line, " ", word);
  }
  out << line << "\n";
}

}  // namespace

bool PrintHelpIfAsked(int argc, char** argv, absl::string_view flags_file,
                      std::ostream& out) {
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
    if (arg == "--helpfull") {
      absl::flags_internal::FlagsHelp(
          out, "", absl::flags_internal::HelpFormat::kHumanReadable,
          absl::ProgramUsageMessage());
      return true;
    }
    if (arg == "-h" || arg == "--help" || arg == "-help" ||
        arg == "--helpshort") {
      // absl keeps a flag's file as its usage config normalizes it (a
      // leading "/" or "./" stripped): a suffix of __FILE__.
      std::vector<const absl::CommandLineFlag*> own;
      for (const auto& [name, flag] : absl::GetAllFlags()) {
        const std::string file = flag->Filename();
        if (!file.empty() && absl::EndsWith(flags_file, file)) {
          own.push_back(flag);
        }
      }
      std::sort(own.begin(), own.end(), [](const auto* a, const auto* b) {
        return a->Name() < b->Name();
      });
      out << absl::ProgramUsageMessage() << "\n\nFlags:\n";
      for (const absl::CommandLineFlag* flag : own) PrintFlag(*flag, out);
      out << "\n--helpfull also lists the flags the flags library adds "
             "(reading flags from a file or the environment).\n";
      return true;
    }
  }
  return false;
}

}  // namespace headroom
