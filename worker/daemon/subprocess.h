#ifndef HEADROOM_WORKER_DAEMON_SUBPROCESS_H_
#define HEADROOM_WORKER_DAEMON_SUBPROCESS_H_

// Runs a probe program as a child process: its stdout is read line by line
// as it comes, the tail of its stderr is kept for the error message, and it
// is stopped (SIGTERM to its process group, SIGKILL 2 s later) when it runs
// past its time or the caller asks it to stop. A crash is a result, never a
// crash of the worker.

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace headroom::worker {

struct ProcessResult {
  // Exit status, or 128 + signal when a signal ended it; -1 when it could
  // not be started (then `error` says why).
  int exit_code = -1;
  bool timed_out = false;
  bool stopped = false;
  std::string stderr_tail;  // the last 4 KiB
  std::string error;
};

ProcessResult RunProcess(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout,
                         const std::function<void(const std::string&)>& on_line,
                         const std::function<bool()>& should_stop);

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_SUBPROCESS_H_
