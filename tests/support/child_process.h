#ifndef HEADROOM_TESTS_SUPPORT_CHILD_PROCESS_H_
#define HEADROOM_TESTS_SUPPORT_CHILD_PROCESS_H_

// A child process for tests that run the real binaries (planner, worker):
// started with execv, SIGKILLed when the test forgets it, every wait
// bounded.

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace headroom::testing {

class Child {
 public:
  explicit Child(std::vector<std::string> argv) {
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> args;
      for (std::string& arg : argv) args.push_back(arg.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Child() { Kill(SIGKILL); }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  // Sends `signal` and reaps the child (bounded: SIGKILL after 10 s).
  void Kill(int signal) {
    if (pid_ <= 0) return;
    kill(pid_, signal);
    int status = 0;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid_, SIGKILL);
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  // Waits up to `limit` for the child to exit on its own; its exit code,
  // or -1 when it is still running (then it is left running) or was
  // killed by a signal.
  int WaitExit(std::chrono::milliseconds limit) {
    if (pid_ <= 0) return -1;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    int status = 0;
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_CHILD_PROCESS_H_
