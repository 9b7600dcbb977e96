#ifndef HEADROOM_TESTS_SUPPORT_EXTENDER_BODIES_H_
#define HEADROOM_TESTS_SUPPORT_EXTENDER_BODIES_H_

// The scheduler extender's request bodies under tests/data/extender/.

#include <fstream>
#include <sstream>
#include <string>

namespace headroom::testing {

// The file's text ("" when it cannot be read).
inline std::string ExtenderBody(const std::string& name) {
  std::ifstream file(std::string(HEADROOM_SOURCE_DIR) +
                     "/tests/data/extender/" + name);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_EXTENDER_BODIES_H_
