#ifndef HEADROOM_COMMON_ENV_FLAGS_H_
#define HEADROOM_COMMON_ENV_FLAGS_H_

#include <ostream>
#include <string>

namespace headroom {

// For every registered flag `name`, applies the environment variable
// <prefix><NAME> (upper case) when set, before the command line is parsed,
// so the command line still wins. Exits with a message on a bad value.
void ApplyEnvironmentToFlags(const std::string& prefix);

// When the command line asks for help (-h, --help, -help, --helpfull,
// --helpshort, before any "--"), writes the usage message and every flag
// with its default to `out` and returns true: the caller exits 0. absl's
// own --help shows only the flags of a file named like the program ("No
// flags matched") and exits 1. Call after absl::SetProgramUsageMessage.
bool PrintHelpIfAsked(int argc, char** argv, std::ostream& out);

}  // namespace headroom

#endif  // HEADROOM_COMMON_ENV_FLAGS_H_
