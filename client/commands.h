#ifndef HEADROOM_CLIENT_COMMANDS_H_
#define HEADROOM_CLIENT_COMMANDS_H_

// The CLI's subcommands. Each returns the process exit code and writes its
// answer to `out` and problems to `err`.

#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/client_channel.h"
#include "grpcpp/channel.h"
#include "headroom/v1/calibration.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

// The exit codes of every command, documented in `headroom --help` and the
// README: an answer; the planner refused the request (or a probe failed or
// was cancelled); bad usage (an unknown command or flag, a bad value, a
// name or file that does not exist); the planner could not be reached.
inline constexpr int kExitAnswer = 0;
inline constexpr int kExitRefused = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitUnreachable = 3;

// Writes "headroom: <message>" to `err` and returns `code` (2: bad usage or
// input), the exit code every command fails with.
int Fail(std::ostream& err, const std::string& message, int code = 2);
// The same with a status's message alone: every error reads "headroom:
// <message>", never "NOT_FOUND: <message>" (the exit code says the kind).
int Fail(std::ostream& err, const absl::Status& status, int code = 2);

struct Options {
  std::string server = "127.0.0.1:50051";
  // TLS and the bearer token (--tls_ca, --tls_cert, --tls_key, --token or
  // HEADROOM_*); `channel` is opened from them once, before any command.
  ChannelSecurity security;
  std::shared_ptr<grpc::Channel> channel;
  int deadline_ms = 5000;
  bool json = false;
  std::string models_dir = "models";
  std::string model;
  // fit: an ONNX model file (sent without its weights).
  std::string onnx;
  std::string batch;
  // fit --job and its files (job_flags.h); the setup flags given beside
  // --job, as TrainingSetup field paths.
  std::string job;
  std::string deepspeed;
  std::string accelerate_config;
  std::string job_kind;
  std::vector<std::string> job_overrides;
  std::string gpu;
  // The training setup: the setup vocabulary's flags given, by key name
  // (core/setup/setup_words.h), as typed; setup_flags.h turns them into a
  // TrainingSetup.
  std::map<std::string, std::string> setup;
  // Deprecated: --attention sdpa.
  bool fused_attention = false;
  // fit: queue a probe to learn a prior-only model (CheckFitRequest.learn),
  // and let simulated runs anchor the answer.
  bool learn = false;
  bool include_simulated = false;
  // fit: every phase's three figures and each card's device costs.
  bool explain = false;
  // model convert --positions: the ONNX graph's sequence length.
  uint64_t positions = 0;
  std::string runs;
  double coverage = 0;
  std::string version;
  std::string train;
  std::string test;
  bool force = false;
  bool dry_run = false;
  // calib page: also write the predicted-vs-measured plot here.
  std::string svg;
};

// headroom fit --model TEMPLATE|FILE | --onnx FILE --batch N[,N...]
// --gpu NAME|GB[,...] [--explain]: the answer as fit_output.h prints it, or
// with --json the CheckFitResponse, every field.
int Fit(const Options& options, std::ostream& out, std::ostream& err);

// headroom calib page --runs FILE [--json] [--svg FILE]: the calibration
// page offline, and its plot.
int CalibPage(const Options& options, std::ostream& out, std::ostream& err);

// headroom calib rows --runs FILE: every usable run with its in-sample and
// held-out prediction and the component sizes in GB before factors.
int CalibRows(const Options& options, std::ostream& out, std::ostream& err);

// headroom calib show [--version fs-N] [--json]: the server's calibration
// page of a factor set (created as ISO-8601 UTC), as calib page prints one;
// --json: the page's JSON.
int CalibShow(const Options& options, std::ostream& out, std::ostream& err);

// headroom factors show [--version fs-N] [--json]: a factor set's factors,
// headroom, k, regimes and bounds; --json: the whole FactorSet.
int FactorsShow(const Options& options, std::ostream& out, std::ostream& err);

// The calibration page of `set` as text (calib page, calib show).
void PrintPage(const v1::FactorSet& set, std::ostream& out);

// headroom calib eval --train A.jsonl --test B.jsonl [--json]: fits on A as
// the service does and predicts every row of B.
int CalibEval(const Options& options, std::ostream& out, std::ostream& err);

// headroom refit [--runs FILE] [--force] [--dry_run]: imports runs, refits
// on the server, reports whether the new factor set became current.
int Refit(const Options& options, std::ostream& out, std::ostream& err);

// headroom factors list | promote --version fs-N | rollback.
int FactorsList(const Options& options, std::ostream& out, std::ostream& err);
int FactorsPromote(const Options& options, bool rollback, std::ostream& out,
                   std::ostream& err);

// headroom health: the server's gRPC health status; exit 0 when serving.
int Health(const Options& options, std::ostream& out, std::ostream& err);

// Registration (cli.cc calls these in the order of headroom --help): `fit`;
// `calib`, `refit` and `factors`; `health`. Each adds its commands' flags to
// `app` and says what they run (cli_context.h).
void RegisterFitCommands(CLI::App& app, CliContext& ctx);
void RegisterCalibrationCommands(CLI::App& app, CliContext& ctx);
void RegisterHealthCommand(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_COMMANDS_H_
