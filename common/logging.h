#ifndef HEADROOM_COMMON_LOGGING_H_
#define HEADROOM_COMMON_LOGGING_H_

// One log format for the planner, the worker and the CLI: spdlog lines
// "2026-12-01T10:15:06.123 info event=... key=value", gRPC's own log lines
// included (they arrive as event=grpc_log).

#include <string>

namespace headroom {

// Sets the format and `level` (trace, debug, info, warn, error; anything
// else is info) and routes gRPC's logging through spdlog. Call once, first.
void SetUpLogging(const std::string& level);

}  // namespace headroom

#endif  // HEADROOM_COMMON_LOGGING_H_
