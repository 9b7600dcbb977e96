// headroom-memory-burst: the planner's resident memory before, during and
// after a burst of large inline specs (issue 32, item 6). Starts the real
// planner binary on loopback, reads its VmRSS and VmHWM from
// /proc/PID/status, sends --clients concurrent CheckFit calls each carrying
// an inline spec of about --spec_mb MB, and reports RSS before, the peak
// during the burst, and RSS after --idle_seconds idle, with the calls'
// outcomes (OK, RESOURCE_EXHAUSTED, other).
//
// Every loop is bounded by a count and by time; calls carry a deadline.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"

ABSL_FLAG(int, clients, 80, "concurrent CheckFit calls in the burst (1..1000)");
ABSL_FLAG(double, spec_mb, 4.0,
          "size of each inline spec in MB, 10^6 bytes (0.01..4.1)");
ABSL_FLAG(int, bursts, 1, "bursts, each followed by the idle wait (1..10)");
ABSL_FLAG(double, idle_seconds, 5.0,
          "idle wait after each burst before RSS is read again (0..120)");
ABSL_FLAG(int, port, 50097, "loopback port for the planner");
ABSL_FLAG(std::string, planner_bin, HEADROOM_PLANNER_BIN, "planner binary");
ABSL_FLAG(std::string, planner_args, "",
          "extra planner flags, space-separated (e.g. --import_queue=64)");

namespace {

using Clock = std::chrono::steady_clock;
const std::string kRoot = HEADROOM_SOURCE_DIR;

// A /proc/PID/status field in kB (VmRSS, VmHWM); -1 when unreadable.
int64_t StatusKb(pid_t pid, const std::string& field) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoll(line.substr(field.size() + 1));
    }
  }
  return -1;
}

double Mb(int64_t kb) { return kb * 1024.0 / 1e6; }

// A valid inline spec of about `bytes` serialized bytes: named Linear
// layers, as a client generating a spec per block of a large graph sends.
headroom::v1::CheckFitRequest LargeSpecRequest(size_t bytes) {
  headroom::v1::CheckFitRequest request;
  headroom::v1::ModelSpec* spec = request.mutable_model()->mutable_spec();
  spec->set_name("burst");
  spec->set_family("other");
  spec->set_positions(128);
  for (int i = 0; i < 10000000 && request.ByteSizeLong() < bytes; ++i) {
    // Checked each 1000 layers: ByteSizeLong walks the whole spec.
    for (int j = 0; j < 1000; ++j) {
      headroom::v1::Layer* layer = spec->add_layers();
      layer->set_name(absl::StrCat("block-", i, "-", j, ".fc"));
      layer->mutable_linear()->set_in_features(1024);
      layer->mutable_linear()->set_out_features(1024);
    }
  }
  request.add_batches(1);
  request.add_targets()->set_gpu("H100");
  return request;
}

struct Outcomes {
  std::map<std::string, int> by_code;
  std::string first_refusal;
};

// Sends `clients` calls of `bytes` at once and waits for all (each has a
// 300 s deadline); samples the planner's VmRSS meanwhile.
Outcomes Burst(grpc::GenericStub* stub, const std::string& bytes, int clients,
               pid_t planner, int64_t* peak_sampled_kb) {
  std::mutex mu;
  std::condition_variable done_cv;
  int done = 0;
  Outcomes out;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ByteBuffer>> responses;
  grpc::Slice slice(bytes);
  for (int i = 0; i < clients; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(std::chrono::system_clock::now() +
                                  std::chrono::seconds(300));
    responses.push_back(std::make_unique<grpc::ByteBuffer>());
    grpc::ByteBuffer request(&slice, 1);
    stub->UnaryCall(
        contexts.back().get(), "/headroom.v1.Fit/CheckFit", grpc::StubOptions(),
        &request, responses.back().get(), [&](grpc::Status status) {
          std::lock_guard<std::mutex> lock(mu);
          const std::string code =
              status.ok() ? "OK"
              : status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED
                  ? "RESOURCE_EXHAUSTED"
                  : absl::StrCat("code ", status.error_code());
          ++out.by_code[code];
          if (!status.ok() && out.first_refusal.empty()) {
            out.first_refusal = status.error_message();
          }
          ++done;
          done_cv.notify_one();
        });
  }
  std::unique_lock<std::mutex> lock(mu);
  const auto end = Clock::now() + std::chrono::seconds(310);
  while (done < clients && Clock::now() < end) {
    done_cv.wait_for(lock, std::chrono::milliseconds(20));
    *peak_sampled_kb = std::max(*peak_sampled_kb, StatusKb(planner, "VmRSS"));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int clients = std::clamp(absl::GetFlag(FLAGS_clients), 1, 1000);
  const double spec_mb = std::clamp(absl::GetFlag(FLAGS_spec_mb), 0.01, 4.1);
  const int bursts = std::clamp(absl::GetFlag(FLAGS_bursts), 1, 10);
  const double idle_seconds =
      std::clamp(absl::GetFlag(FLAGS_idle_seconds), 0.0, 120.0);
  const std::string address =
      absl::StrCat("127.0.0.1:", absl::GetFlag(FLAGS_port));
  const std::string db =
      absl::StrCat("/tmp/headroom-memory-burst-", getpid(), ".db");
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());

  std::vector<std::string> args = {
      absl::GetFlag(FLAGS_planner_bin),
      "--listen=" + address,
      "--http_listen=",
      "--models_dir=" + kRoot + "/models",
      "--runs=" + kRoot + "/data/memory-runs.jsonl",
      "--energy_curves=" + kRoot + "/data/energy-curves.json",
      "--db=" + db,
      "--log_level=warn"};
  for (size_t at = 0; !absl::GetFlag(FLAGS_planner_args).empty();) {
    const std::string& all = absl::GetFlag(FLAGS_planner_args);
    const size_t space = all.find(' ', at);
    const std::string arg = all.substr(at, space - at);
    if (!arg.empty()) args.push_back(arg);
    if (space == std::string::npos) break;
    at = space + 1;
  }
  const pid_t planner = fork();
  if (planner == 0) {
    std::vector<char*> argv_c;
    for (std::string& arg : args) argv_c.push_back(arg.data());
    argv_c.push_back(nullptr);
    execv(argv_c[0], argv_c.data());
    _exit(127);
  }
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxSendMessageSize(8 << 20);
  auto channel = grpc::CreateCustomChannel(
      address, grpc::InsecureChannelCredentials(), channel_args);
  auto fit = headroom::v1::Fit::NewStub(channel);
  bool up = false;
  for (int i = 0; i < 600 && !up; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
    headroom::v1::PingResponse pong;
    up = fit->Ping(&context, {}, &pong).ok();
    if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!up) {
    std::fprintf(stderr, "planner did not come up on %s\n", address.c_str());
    kill(planner, SIGKILL);
    waitpid(planner, nullptr, 0);
    return 1;
  }
  // A few catalog answers first, so "before" is a planner that has served.
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    headroom::v1::CheckFitRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    request.add_targets()->set_gpu("L4");
    headroom::v1::CheckFitResponse response;
    (void)fit->CheckFit(&context, request, &response);
  }

  const std::string bytes =
      LargeSpecRequest(static_cast<size_t>(spec_mb * 1e6)).SerializeAsString();
  grpc::GenericStub stub(channel);
  const int64_t before_kb = StatusKb(planner, "VmRSS");
  std::printf("planner %s, %d clients x %.2f MB inline spec (%zu bytes)\n",
              args[0].c_str(), clients, bytes.size() / 1e6, bytes.size());
  std::printf("%-6s %10s %10s %10s %10s  %s\n", "burst", "before MB", "peak MB",
              "after MB", "after/before", "outcomes");
  for (int b = 1; b <= bursts; ++b) {
    const int64_t start_kb = StatusKb(planner, "VmRSS");
    int64_t peak_kb = start_kb;
    const auto t0 = Clock::now();
    const Outcomes outcomes = Burst(&stub, bytes, clients, planner, &peak_kb);
    const double seconds =
        std::chrono::duration<double>(Clock::now() - t0).count();
    // Idle: sampled until idle_seconds have passed (bounded by the count).
    const auto idle_end =
        Clock::now() + std::chrono::duration<double>(idle_seconds);
    for (int i = 0; i < 100000 && Clock::now() < idle_end; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    const int64_t after_kb = StatusKb(planner, "VmRSS");
    std::string summary;
    for (const auto& [code, count] : outcomes.by_code) {
      absl::StrAppend(&summary, code, "=", count, " ");
    }
    absl::StrAppend(&summary, "(", static_cast<int>(seconds * 10) / 10.0,
                    " s)");
    std::printf("%-6d %10.1f %10.1f %10.1f %10.2fx  %s\n", b, Mb(start_kb),
                Mb(peak_kb), Mb(after_kb),
                static_cast<double>(after_kb) / start_kb, summary.c_str());
    if (!outcomes.first_refusal.empty()) {
      std::printf("       first refusal: %s\n",
                  outcomes.first_refusal.substr(0, 200).c_str());
    }
  }
  std::printf("RSS before the first burst %.1f MB; VmHWM (peak) %.1f MB\n",
              Mb(before_kb), Mb(StatusKb(planner, "VmHWM")));
  // The planner must still answer.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  headroom::v1::PingResponse pong;
  const bool serving = fit->Ping(&context, {}, &pong).ok();
  std::printf("planner %s\n", serving ? "still serving" : "NOT SERVING");
  kill(planner, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    if (waitpid(planner, nullptr, WNOHANG) == planner) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (i == 199) {
      kill(planner, SIGKILL);
      waitpid(planner, nullptr, 0);
    }
  }
  for (const char* s : {"", "-wal", "-shm"}) std::remove((db + s).c_str());
  return serving ? 0 : 1;
}
