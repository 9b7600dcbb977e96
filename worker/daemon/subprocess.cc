#include "worker/daemon/subprocess.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

namespace headroom::worker {
namespace {

constexpr size_t kStderrTail = 4096;
constexpr size_t kMaxLine = 1 << 20;

}  // namespace

ProcessResult RunProcess(const std::vector<std::string>& argv,
                         std::chrono::milliseconds timeout,
                         const std::function<void(const std::string&)>& on_line,
                         const std::function<bool()>& should_stop) {
  ProcessResult result;
  if (argv.empty()) {
    result.error = "no program given";
    return result;
  }
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + strerror(errno);
    return result;
  }
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    result.error = std::string("pipe: ") + strerror(errno);
    close(out_pipe[0]);
    close(out_pipe[1]);
    return result;
  }
  std::vector<char*> args;
  for (const std::string& arg : argv)
    args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // The child: its own process group, so a stop reaches its children too.
    setpgid(0, 0);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvp(args[0], args.data());
    dprintf(STDERR_FILENO, "cannot run %s: %s\n", args[0], strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid < 0) {
    result.error = std::string("fork: ") + strerror(errno);
    close(out_pipe[0]);
    close(err_pipe[0]);
    return result;
  }
  const auto start = std::chrono::steady_clock::now();
  std::string line;
  bool out_open = true;
  bool err_open = true;
  std::chrono::steady_clock::time_point kill_at{};
  bool term_sent = false;
  char buffer[8192];
  while (out_open || err_open) {
    const auto now = std::chrono::steady_clock::now();
    if (!term_sent) {
      if (now - start > timeout) result.timed_out = true;
      if (should_stop && should_stop()) result.stopped = true;
      if (result.timed_out || result.stopped) {
        kill(-pid, SIGTERM);
        term_sent = true;
        kill_at = now + std::chrono::seconds(2);
      }
    } else if (now >= kill_at) {
      kill(-pid, SIGKILL);
      kill_at = now + std::chrono::hours(24);
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, 100) < 0 && errno != EINTR) break;
    if (out_open && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = read(out_pipe[0], buffer, sizeof(buffer));
      if (n <= 0) {
        out_open = false;
      } else {
        for (ssize_t i = 0; i < n; ++i) {
          if (buffer[i] == '\n') {
            if (on_line) on_line(line);
            line.clear();
          } else if (line.size() < kMaxLine) {
            line.push_back(buffer[i]);
          }
        }
      }
    }
    if (err_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      const ssize_t n = read(err_pipe[0], buffer, sizeof(buffer));
      if (n <= 0) {
        err_open = false;
      } else {
        result.stderr_tail.append(buffer, static_cast<size_t>(n));
        if (result.stderr_tail.size() > kStderrTail) {
          result.stderr_tail.erase(0, result.stderr_tail.size() - kStderrTail);
        }
      }
    }
  }
  if (!line.empty() && on_line) on_line(line);
  close(out_pipe[0]);
  close(err_pipe[0]);
  int status = 0;
  // Both pipes are closed: the child has exited or closed them; bound the
  // wait anyway.
  for (int i = 0; i < 300; ++i) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (i == 50) kill(-pid, SIGKILL);
    usleep(10000);
  }
  if (WIFEXITED(status)) {
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.exit_code = 128 + WTERMSIG(status);
  }
  return result;
}

}  // namespace headroom::worker
