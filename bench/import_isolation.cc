// headroom-import-isolation: catalog CheckFit latency alone, then while 16
// clients keep large ONNX imports running, against a real planner on
// loopback, in one run. Imports run on the planner's import pool; catalog
// answers stay inline, so their p99 should stay within 2x.
//
// Every loop is bounded by a call count and by time; calls carry a deadline.

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "bench/catalog_latency.h"
#include "bench/closed_loop.h"
#include "grpcpp/grpcpp.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "spdlog/spdlog.h"
#include "tests/core/frontends/onnx_test_graphs.h"

ABSL_FLAG(double, seconds, 5.0, "length of each phase in seconds (0.5..120)");
ABSL_FLAG(int, importers, 16, "clients sending ONNX imports at once (1..256)");
ABSL_FLAG(int, layers, 48, "layers of the imported Llama-style graph (1..512)");
ABSL_FLAG(int, import_threads, 2, "the planner's --import_threads");

namespace headroom::bench {
namespace {

using Ms = std::chrono::duration<double, std::milli>;

v1::CheckFitRequest OnnxRequest(int layers) {
  testing::LlamaShape shape;
  shape.layers = layers;
  shape.hidden = 4096;
  shape.heads = 32;
  shape.kv_heads = 8;
  shape.ffn = 11008;
  shape.vocab = 32000;
  shape.positions = 2048;
  v1::CheckFitRequest request;
  request.mutable_model()->set_onnx(testing::LlamaGraph(shape));
  request.mutable_setup()->set_positions(2048);
  request.add_batches(1);
  request.add_targets()->set_gpu("H100");
  return request;
}

int Run() {
  const double seconds = std::clamp(absl::GetFlag(FLAGS_seconds), 0.5, 120.0);
  const int importers = std::clamp(absl::GetFlag(FLAGS_importers), 1, 256);
  const int layers = std::clamp(absl::GetFlag(FLAGS_layers), 1, 512);
  PlannerConfig config;
  const std::string root = HEADROOM_SOURCE_DIR;
  config.listen = "127.0.0.1:0";
  config.http_listen = "";
  config.db_path = ":memory:";
  config.models_dir = root + "/models";
  config.runs_path = root + "/data/memory-runs.jsonl";
  config.energy_curves_path = root + "/data/energy-curves.json";
  config.import_threads = absl::GetFlag(FLAGS_import_threads);
  // Every importer's call waits rather than being refused.
  config.import_queue = std::max(64, importers);
  auto app = PlannerApp::Start(config);
  if (!app.ok()) {
    std::fprintf(stderr, "planner: %s\n", app.status().ToString().c_str());
    return 1;
  }
  const std::string target = absl::StrCat("127.0.0.1:", (*app)->grpc_port());
  auto channel =
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::Fit::NewStub(channel);

  const v1::CheckFitRequest onnx = OnnxRequest(layers);
  // One import alone, to say what one costs.
  double one_import_ms = 0;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(60));
    v1::CheckFitResponse response;
    const auto start = Clock::now();
    const grpc::Status status = stub->CheckFit(&context, onnx, &response);
    one_import_ms = Ms(Clock::now() - start).count();
    if (!status.ok()) {
      std::fprintf(stderr, "the ONNX import fails: %s\n",
                   status.error_message().c_str());
      return 1;
    }
  }

  MeasureCatalog(stub.get(), std::min(seconds, 1.0));  // warm-up
  const Latency alone = MeasureCatalog(stub.get(), seconds);

  std::atomic<bool> stop{false};
  std::atomic<int64_t> imports{0}, import_failures{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < importers; ++i) {
    clients.emplace_back([&, i] {
      // Importers stand for other machines' clients: here they share the
      // planner's CPUs, so they run at the lowest priority.
      (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)),
                        19);
      // Their own connections, as separate clients would have.
      grpc::ChannelArguments args;
      args.SetInt("headroom.importer", i);
      auto own = v1::Fit::NewStub(grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), args));
      for (int n = 0; n < 100000 && !stop.load(); ++n) {
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(120));
        v1::CheckFitResponse response;
        if (own->CheckFit(&context, onnx, &response).ok()) {
          ++imports;
        } else {
          ++import_failures;
        }
      }
    });
  }
  // Let every importer's first call reach the planner.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const Latency loaded = MeasureCatalog(stub.get(), seconds);
  const int64_t imports_during = imports.load();
  stop = true;
  for (std::thread& client : clients) client.join();
  (*app)->Shutdown(std::chrono::milliseconds(0));

  std::printf(
      "ONNX graph: Llama-style, %d layers, %zu bytes; one import alone "
      "%.1f ms; import_threads %d\n",
      layers, onnx.ByteSizeLong(), one_import_ms, config.import_threads);
  std::printf("%-40s %10s %10s %8s %7s\n", "catalog CheckFit (bert-base)",
              "p50 ms", "p99 ms", "calls", "failed");
  std::printf("%-40s %10.3f %10.3f %8zu %7zu\n", "alone", alone.p50_ms,
              alone.p99_ms, alone.calls, alone.failed);
  std::printf("%-40s %10.3f %10.3f %8zu %7zu\n",
              absl::StrCat("with ", importers, " importers").c_str(),
              loaded.p50_ms, loaded.p99_ms, loaded.calls, loaded.failed);
  std::printf(
      "ratio (with / alone): p50 %.2fx, p99 %.2fx; imports answered during "
      "the phase %lld (failed %lld)\n",
      loaded.p50_ms / alone.p50_ms, loaded.p99_ms / alone.p99_ms,
      static_cast<long long>(imports_during),
      static_cast<long long>(import_failures.load()));
  return 0;
}

}  // namespace
}  // namespace headroom::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  spdlog::set_level(spdlog::level::warn);
  return headroom::bench::Run();
}
