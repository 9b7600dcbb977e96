#include "common/logging.h"

#include <grpc/support/log.h>

#include <string>

#include "spdlog/spdlog.h"

namespace headroom {
namespace {

void GrpcLog(gpr_log_func_args* args) {
  const spdlog::level::level_enum level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? spdlog::level::warn
      : args->severity == GPR_LOG_SEVERITY_INFO ? spdlog::level::info
                                                : spdlog::level::debug;
  std::string message = args->message == nullptr ? "" : args->message;
  for (char& c : message) {
    if (c == '"' || c == '\n') c = '\'';
  }
  spdlog::log(level, "event=grpc_log source={}:{} message=\"{}\"",
              args->file == nullptr ? "" : args->file, args->line, message);
}

}  // namespace

void SetUpLogging(const std::string& level) {
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  spdlog::set_level(parsed == spdlog::level::off && level != "off"
                        ? spdlog::level::info
                        : parsed);
  gpr_set_log_function(GrpcLog);
}

}  // namespace headroom
