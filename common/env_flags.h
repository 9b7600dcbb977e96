#ifndef HEADROOM_COMMON_ENV_FLAGS_H_
#define HEADROOM_COMMON_ENV_FLAGS_H_

#include <ostream>
#include <string>

#include "absl/strings/string_view.h"

namespace headroom {

// For every registered flag `name`, applies the environment variable
// <prefix><NAME> (upper case) when set, before the command line is parsed,
// so the command line still wins. Exits with a message on a bad value.
void ApplyEnvironmentToFlags(const std::string& prefix);

// When the command line asks for help (-h, --help, -help, --helpshort,
// before any "--"), writes the usage message (absl::ProgramUsageMessage:
// set it to start with a "Usage: ..." line) and the program's own flags,
// those defined in `flags_file` (pass __FILE__ from the file that defines
// them), each with its help and default, to `out`, and returns true: the
// caller exits 0. --helpfull lists every flag, absl's own (--flagfile,
// --fromenv, ...) too, by the file that defines it. absl's own --help
// shows only the flags of a file named like the program ("No flags
// matched") and exits 1. Call after absl::SetProgramUsageMessage.
bool PrintHelpIfAsked(int argc, char** argv, absl::string_view flags_file,
                      std::ostream& out);

}  // namespace headroom

#endif  // HEADROOM_COMMON_ENV_FLAGS_H_
