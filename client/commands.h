#ifndef HEADROOM_CLIENT_COMMANDS_H_
#define HEADROOM_CLIENT_COMMANDS_H_

// The CLI's subcommands. Each returns the process exit code and writes its
// answer to `out` and problems to `err`.

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace headroom::cli {

struct Options {
  std::string server = "127.0.0.1:50051";
  int deadline_ms = 5000;
  bool json = false;
  std::string models_dir = "models";
  std::string model;
  std::string batch;
  std::string gpu;
  std::string precision = "fp32";
  std::string optimizer = "adamw";
  bool checkpointing = false;
  bool fused_attention = false;
  uint64_t positions = 0;
  std::string runs;
  double coverage = 0;
  std::string version;
};

// headroom fit --model TEMPLATE|FILE --batch N[,N...] --gpu NAME|GB[,...]
int Fit(const Options& options, std::ostream& out, std::ostream& err);

// headroom calib page --runs FILE [--json]: the calibration page offline.
int CalibPage(const Options& options, std::ostream& out, std::ostream& err);

// headroom calib rows --runs FILE: every usable run with its in-sample and
// held-out prediction and the component sizes in GB before factors.
int CalibRows(const Options& options, std::ostream& out, std::ostream& err);

// headroom calib show [--version fs-N]: the server's factor set and page.
int CalibShow(const Options& options, std::ostream& out, std::ostream& err);

// headroom health: the server's gRPC health status; exit 0 when serving.
int Health(const Options& options, std::ostream& out, std::ostream& err);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_COMMANDS_H_
