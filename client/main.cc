// headroom: the command-line client for schedulers (--json) and operators.

#include <iostream>
#include <string>
#include <vector>

#include "client/cli.h"
#include "common/logging.h"

int main(int argc, char** argv) {
  // Answers go out line by line, also into a pipe (probe submit --watch |
  // cat shows the probe id first, then each event as it happens).
  std::cout << std::unitbuf;
  // gRPC's own complaints (a refused handshake) as warnings in the one log
  // format; the CLI says what went wrong itself.
  headroom::SetUpLogging("error");
  return headroom::cli::RunCli(std::vector<std::string>(argv, argv + argc),
                               std::cout, std::cerr);
}
