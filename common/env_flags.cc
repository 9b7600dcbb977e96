#include "common/env_flags.h"

#include <cctype>
#include <cstdlib>
#include <iostream>

#include "absl/flags/reflection.h"

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

}  // namespace headroom
