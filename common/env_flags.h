#ifndef HEADROOM_COMMON_ENV_FLAGS_H_
#define HEADROOM_COMMON_ENV_FLAGS_H_

#include <string>

namespace headroom {

// For every registered flag `name`, applies the environment variable
// <prefix><NAME> (upper case) when set, before the command line is parsed,
// so the command line still wins. Exits with a message on a bad value.
void ApplyEnvironmentToFlags(const std::string& prefix);

}  // namespace headroom

#endif  // HEADROOM_COMMON_ENV_FLAGS_H_
