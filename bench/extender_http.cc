// headroom-extender-http: the scheduler extender's whole HTTP path at
// cluster size. The planner's HTTP server (HttpServer on 127.0.0.1:0, the
// planner's options, TLS with --tls) serves SchedulerExtender (the
// planner's defaults: a 50 ms budget, FITS only, unknown GPUs fail) over
// the planner's first fit of the shipped runs; a keep-alive client (as
// kube-scheduler's) POSTs ExtenderArgs of N candidate nodes and times each
// whole call: send, parse, decide, answer, receive.
//
// For each size: full node objects with GPU Feature Discovery labels
// (nodeCacheCapable: false) and names only (nodeCacheCapable: true, each
// node's card from the inventory of the worker on it, kept as the fleet
// keeps it), filter and prioritize. Every answer must be the
// direct decision's byte for byte (DecideNodes over the same planner, no
// HTTP, no pool): a failed, refused, fail-open or different answer is an
// error (and its time counts in the percentiles: kube-scheduler waited
// for it). The same body through SchedulerExtender::Filter / Prioritize
// alone (no HTTP) is timed beside it. Loops are bounded in calls and
// seconds.

#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/calibration/calibrate.h"
#include "core/evidence/evidence.h"
#include "core/planner/fit_planner.h"
#include "core/scheduling/extender.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "nlohmann/json.hpp"
#include "prometheus/registry.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/http_server.h"
#include "server/service/metrics.h"
#include "server/service/scheduler_extender.h"
#include "spdlog/spdlog.h"
#include "tests/support/extender_bodies.h"

ABSL_FLAG(int, calls, 300,
          "timed calls per size, payload form and verb (1..100000)");
ABSL_FLAG(int, seconds, 30, "longest one phase runs, in seconds (1..600)");
ABSL_FLAG(std::string, sizes, "1000,5000",
          "candidate node counts, comma-separated (each 1..20000)");
ABSL_FLAG(std::string, model, "bert-base", "the pod's headroom.dev/model");
ABSL_FLAG(int, batch, 512, "the pod's headroom.dev/batch (1..100000)");
ABSL_FLAG(std::string, answers_dir, "",
          "write each phase's expected answer to DIR/NODES-FORM-VERB.json "
          "(to compare builds byte for byte)");
ABSL_FLAG(bool, tls, false,
          "serve HTTPS with development certificates (deploy/ serves TLS)");

namespace headroom {
namespace {

using ::headroom::testing::ClusterNamesBody;
using ::headroom::testing::ClusterNodesBody;
using ::headroom::testing::EightGfdKinds;
using ::headroom::testing::ExtenderPod;
using ::headroom::testing::GfdKind;

const std::string kRoot = HEADROOM_SOURCE_DIR;

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index =
      std::min(values.size() - 1,
               static_cast<size_t>(std::lround(p * (values.size() - 1))));
  return values[index];
}

double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - start)
      .count();
}

// The planner's first fit of the shipped runs and its evidence.
struct Planned {
  std::unique_ptr<FitPlanner> planner;
  std::shared_ptr<const Evidence> evidence;
};

absl::StatusOr<Planned> Plan() {
  auto catalog = LoadModelCatalog(kRoot + "/models");
  if (!catalog.ok()) return catalog.status();
  auto runs = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
  if (!runs.ok()) return runs.status();
  auto shared = std::make_shared<const ModelCatalog>(*std::move(catalog));
  auto fitted = Calibrate(*runs, *shared, FitOptions{}, "bench");
  if (!fitted.ok()) return fitted.status();
  Planned planned;
  planned.planner =
      std::make_unique<FitPlanner>(shared, fitted->factor_set, 0.95);
  planned.evidence = Evidence::Build(*runs, *shared, planned.planner->priors());
  return planned;
}

// The hellos of one worker per node, node-<i> with a card of kind
// i % kinds: what FleetService::NodeInventory makes the inventory from.
std::vector<v1::WorkerHello> Hellos(int nodes,
                                    const std::vector<GfdKind>& kinds) {
  std::vector<v1::WorkerHello> hellos;
  for (int i = 0; i < nodes; ++i) {
    const GfdKind& kind = kinds[static_cast<size_t>(i) % kinds.size()];
    v1::WorkerHello hello;
    hello.set_worker_id(absl::StrCat("worker-", i));
    hello.set_node_name(absl::StrCat("node-", i));
    for (int g = 0; g < 8; ++g) {
      v1::GpuDevice* gpu = hello.add_gpus();
      gpu->set_index(g);
      std::string name = kind.product;
      std::replace(name.begin(), name.end(), '-', ' ');
      gpu->set_name(name);
      double mib = 0;
      if (absl::SimpleAtod(kind.memory_mib, &mib)) {
        gpu->set_memory_bytes(static_cast<uint64_t>(mib * 1048576));
      }
    }
    hellos.push_back(std::move(hello));
  }
  return hellos;
}

struct Phase {
  std::string form;  // "nodes" or "names"
  std::string verb;  // "filter" or "prioritize"
  size_t request_bytes = 0;
  size_t answer_bytes = 0;
  std::vector<double> http_ms;
  std::vector<double> handler_ms;
  int errors = 0;
  int handler_errors = 0;
  std::string first_error;
};

// The direct decision's answer to `body` (no HTTP, no pool).
absl::StatusOr<std::string> Expected(
    const std::string& body, const std::string& verb,
    const std::map<std::string, v1::Target>& inventory,
    const CheckFitFn& check_fit, const ExtenderOptions& options) {
  absl::StatusOr<ExtenderArgs> args = ParseExtenderArgs(body);
  if (!args.ok()) return args.status();
  auto job = JobFromAnnotations(args->annotations, args->gpus);
  if (!job.ok()) return job.status();
  if (!job->has_value()) {
    return absl::InvalidArgumentError("the pod does not ask Headroom");
  }
  std::vector<std::optional<v1::Target>> targets;
  for (const ExtenderNode& node : args->nodes) {
    std::optional<v1::Target> target = TargetFromLabels(node);
    if (!target.has_value()) {
      auto it = inventory.find(node.name);
      if (it != inventory.end()) target = it->second;
    }
    targets.push_back(std::move(target));
  }
  auto decisions = DecideNodes(**job, *args, targets, check_fit, options);
  if (!decisions.ok()) return decisions.status();
  return verb == "filter" ? FilterResultJson(*args, *decisions)
                          : PriorityListJson(*args, *decisions, options);
}

// What a filter answer says: the nodes that pass, fail, and fail with the
// device figures (device, allocated, reserved, phase) in their reason.
void DescribeFilter(const std::string& answer, int nodes) {
  const nlohmann::json result = nlohmann::json::parse(answer);
  size_t passing = 0;
  if (result.contains("NodeNames") && result["NodeNames"].is_array()) {
    passing = result["NodeNames"].size();
  } else if (result.contains("Nodes") && result["Nodes"].is_object()) {
    passing = result["Nodes"]["items"].size();
  }
  size_t with_figures = 0;
  const nlohmann::json& failed = result["FailedAndUnresolvableNodes"];
  for (const auto& [node, reason] : failed.items()) {
    const std::string text = reason.get<std::string>();
    if (text.find(" (allocated ") != std::string::npos &&
        text.find(" phase, upper bound ") != std::string::npos) {
      ++with_figures;
    }
  }
  std::printf(
      "  %d nodes: %zu pass, %zu fail on memory (%zu with the device figures "
      "in the reason), %zu unknown\n",
      nodes, passing, failed.size(), with_figures,
      result["FailedNodes"].size());
}

struct Server {
  std::unique_ptr<SchedulerExtender> extender;
  std::unique_ptr<HttpServer> http;
};

int Main() {
  const int calls = std::clamp(absl::GetFlag(FLAGS_calls), 1, 100000);
  const double phase_ms =
      1000.0 * std::clamp(absl::GetFlag(FLAGS_seconds), 1, 600);
  const int batch = std::clamp(absl::GetFlag(FLAGS_batch), 1, 100000);
  std::vector<int> sizes;
  for (absl::string_view part :
       absl::StrSplit(absl::GetFlag(FLAGS_sizes), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 20000) {
      std::fprintf(stderr,
                   "headroom-extender-http: --sizes: %s is not a node count; "
                   "allowed 1..20000, comma-separated\n",
                   std::string(part).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  spdlog::set_level(spdlog::level::warn);

  absl::StatusOr<Planned> planned = Plan();
  if (!planned.ok()) {
    std::fprintf(stderr, "headroom-extender-http: %s\n",
                 planned.status().ToString().c_str());
    return 1;
  }
  const CheckFitFn check_fit = [&](const v1::CheckFitRequest& request) {
    return planned->planner->CheckFit(request, planned->evidence.get());
  };

  HttpServer::Options http_options;
  const bool tls = absl::GetFlag(FLAGS_tls);
  const std::string dir = std::filesystem::temp_directory_path() /
                          absl::StrCat("headroom-extender-http-", getpid());
  if (tls) {
    const std::string make = absl::StrCat(
        HEADROOM_SOURCE_DIR, "/scripts/dev-certs.sh ", dir, " 2>/dev/null");
    if (std::system(make.c_str()) != 0) {
      std::fprintf(stderr, "headroom-extender-http: %s failed\n", make.c_str());
      return 1;
    }
    http_options.tls = {dir + "/planner.pem", dir + "/planner-key.pem", ""};
  }

  const std::string pod = ExtenderPod(absl::GetFlag(FLAGS_model), batch);
  const std::vector<GfdKind> kinds = EightGfdKinds();
  PlannerMetrics metrics;
  std::vector<std::pair<int, std::vector<Phase>>> results;
  for (int nodes : sizes) {
    // The whole cluster is the candidates: the workers' inventory holds as
    // many nodes as the request names.
    const std::vector<v1::WorkerHello> hellos = Hellos(nodes, kinds);
    const std::map<std::string, v1::Target> inventory =
        NodeTargets(hellos, false);
    SchedulerExtender::Options options;  // the planner's defaults
    Server server;
    server.extender = std::make_unique<SchedulerExtender>(
        check_fit,
        // As FleetService::NodeInventory: made from the roster's hellos
        // once per change of the roster (none here) and shared.
        [shared = std::make_shared<const std::map<std::string, v1::Target>>(
             inventory)] { return shared; },
        &metrics, options);
    auto http = HttpServer::Start(
        "127.0.0.1:0", http_options, metrics.registry(), [] { return true; },
        [](const HttpServer::Query&) { return std::string(); });
    if (!http.ok()) {
      std::fprintf(stderr, "headroom-extender-http: %s\n",
                   http.status().ToString().c_str());
      return 1;
    }
    server.http = *std::move(http);
    server.extender->Register(server.http.get());

    std::unique_ptr<httplib::ClientImpl> client;
    if (tls) {
      auto https = std::make_unique<httplib::SSLClient>("127.0.0.1",
                                                        server.http->port());
      https->enable_server_certificate_verification(false);
      client = std::move(https);
    } else {
      client = std::make_unique<httplib::ClientImpl>("127.0.0.1",
                                                     server.http->port());
    }
    client->set_keep_alive(true);
    // As kube-scheduler's Go client: Go sets TCP_NODELAY on every TCP
    // connection (golang/go src/net/tcpsock.go newTCPConn @
    // 6953ef86cd72a835d398319c4da560c8b78ba28e); httplib's default is off
    // (httplib.h CPPHTTPLIB_TCP_NODELAY @ v0.11.4, 7992b148).
    client->set_tcp_nodelay(true);
    client->set_connection_timeout(5, 0);
    client->set_read_timeout(5, 0);
    client->set_write_timeout(5, 0);

    std::vector<Phase> phases;
    for (const char* form : {"nodes", "names"}) {
      const std::string body = std::string(form) == "nodes"
                                   ? ClusterNodesBody(pod, nodes, kinds)
                                   : ClusterNamesBody(pod, nodes);
      for (const char* verb : {"filter", "prioritize"}) {
        Phase phase;
        phase.form = form;
        phase.verb = verb;
        phase.request_bytes = body.size();
        absl::StatusOr<std::string> expected =
            Expected(body, verb, inventory, check_fit, options.decide);
        if (!expected.ok()) {
          std::fprintf(stderr, "headroom-extender-http: %s\n",
                       expected.status().ToString().c_str());
          return 1;
        }
        phase.answer_bytes = expected->size();
        if (const std::string out = absl::GetFlag(FLAGS_answers_dir);
            !out.empty()) {
          std::ofstream(
              absl::StrCat(out, "/", nodes, "-", form, "-", verb, ".json"))
              << *expected;
        }
        if (phase.verb == "filter") {
          std::printf("%d nodes, %s:\n", nodes, form);
          DescribeFilter(*expected, nodes);
        }
        const std::string path = absl::StrCat("/scheduler/", verb);
        // A few calls first: connection, thread-local parsers, caches.
        for (int i = 0; i < 3; ++i)
          client->Post(path, body, "application/json");
        const auto started = std::chrono::steady_clock::now();
        for (int i = 0; i < calls && MsSince(started) < phase_ms; ++i) {
          const auto start = std::chrono::steady_clock::now();
          httplib::Result answer = client->Post(path, body, "application/json");
          const double ms = MsSince(start);
          std::string error;
          if (!answer) {
            error = httplib::to_string(answer.error());
          } else if (answer->status != 200) {
            error = absl::StrCat("HTTP ", answer->status, ": ",
                                 answer->body.substr(0, 200));
          } else if (answer->body != *expected) {
            error = "the answer differs from the direct decision";
          }
          // A wrong answer took its time too (a fail-open one, the budget).
          phase.http_ms.push_back(ms);
          if (!error.empty() && phase.errors++ == 0) phase.first_error = error;
        }
        // The handler alone, as service_bench times it.
        const auto handler_started = std::chrono::steady_clock::now();
        for (int i = 0; i < calls && MsSince(handler_started) < phase_ms; ++i) {
          const auto start = std::chrono::steady_clock::now();
          HttpServer::Answer answer = phase.verb == "filter"
                                          ? server.extender->Filter(body)
                                          : server.extender->Prioritize(body);
          const double ms = MsSince(start);
          phase.handler_ms.push_back(ms);
          if (answer.status != 200 || answer.body != *expected) {
            ++phase.handler_errors;
          }
        }
        phases.push_back(std::move(phase));
      }
    }
    results.emplace_back(nodes, std::move(phases));
  }

  std::printf(
      "\n%s, keep-alive client, %s, batch %d; each call timed whole\n\n"
      "| nodes | payload | verb | request KB | answer KB | calls | errors | "
      "p50 ms | p99 ms | max ms | handler p50 ms | handler p99 ms | "
      "handler errors |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      tls ? "HTTPS" : "HTTP", absl::GetFlag(FLAGS_model).c_str(), batch);
  int errors = 0;
  for (const auto& [nodes, phases] : results) {
    for (const Phase& p : phases) {
      std::printf(
          "| %d | %s | %s | %.0f | %.0f | %zu | %d | %.2f | %.2f | %.2f | "
          "%.2f | %.2f | %d |\n",
          nodes, p.form == "nodes" ? "Nodes (full)" : "NodeNames",
          p.verb.c_str(), p.request_bytes / 1000.0, p.answer_bytes / 1000.0,
          p.http_ms.size(), p.errors, Percentile(p.http_ms, 0.5),
          Percentile(p.http_ms, 0.99), Percentile(p.http_ms, 1.0),
          Percentile(p.handler_ms, 0.5), Percentile(p.handler_ms, 0.99),
          p.handler_errors);
      if (p.errors > 0) {
        std::printf("  first error: %s\n", p.first_error.c_str());
      }
      errors += p.errors + p.handler_errors;
    }
  }
  if (tls) std::filesystem::remove_all(dir);
  return errors == 0 ? 0 : 1;
}

}  // namespace
}  // namespace headroom

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  try {
    return headroom::Main();
  } catch (const std::exception& e) {  // nlohmann's parse of an answer
    std::fprintf(stderr, "headroom-extender-http: %s\n", e.what());
    return 1;
  }
}
