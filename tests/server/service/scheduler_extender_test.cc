// The scheduler extender over HTTP on a real planner (loopback), and its
// fail-open path: a decision that does not finish in its budget lets every
// node through, logged and counted, and never holds placement.

#include "server/service/scheduler_extender.h"

#include "absl/synchronization/notification.h"
#include "core/scheduling/extender.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "server/service/planner_app.h"
#include "tests/support/extender_bodies.h"
#include "tests/support/loopback.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::headroom::testing::ExtenderBody;

const std::string kRoot = HEADROOM_SOURCE_DIR;
using ::headroom::testing::HttpBody;
using ::headroom::testing::HttpGet;
using ::headroom::testing::HttpPost;
using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(SchedulerExtenderHttpTest, FilterAndPrioritizeOnThePlannersHttpPort) {
  auto app = PlannerApp::Start(::headroom::testing::TestPlannerConfig());
  ASSERT_TRUE(app.ok()) << app.status();
  const int port = (*app)->http_port();
  ASSERT_GT(port, 0);

  const std::string filtered =
      HttpPost(port, "/scheduler/filter", ExtenderBody("filter-nodes.json"));
  ASSERT_THAT(filtered, HasSubstr("HTTP/1.1 200"));
  const Json result = Json::parse(HttpBody(filtered));
  ASSERT_EQ(result["Nodes"]["items"].size(), 1u);
  EXPECT_EQ(result["Nodes"]["items"][0]["metadata"]["name"], "gpu-h100-a");
  EXPECT_TRUE(result["FailedAndUnresolvableNodes"].contains("gpu-l4-a"));

  const std::string scored = HttpPost(port, "/scheduler/prioritize",
                                      ExtenderBody("filter-nodes.json"));
  ASSERT_THAT(scored, HasSubstr("HTTP/1.1 200"));
  const Json scores = Json::parse(HttpBody(scored));
  ASSERT_EQ(scores.size(), 4u);
  EXPECT_EQ(scores[1]["Host"], "gpu-h100-a");
  EXPECT_EQ(scores[1]["Score"], 10);

  // A pod that does not ask Headroom: every node, untouched.
  Json plain = Json::parse(ExtenderBody("filter-nodes.json"));
  plain["Pod"]["metadata"].erase("annotations");
  const Json untouched =
      Json::parse(HttpBody(HttpPost(port, "/scheduler/filter", plain.dump())));
  EXPECT_EQ(untouched["Nodes"]["items"].size(), 4u);

  // A malformed body is a 400 naming the field; the planner keeps serving.
  const std::string bad =
      HttpPost(port, "/scheduler/filter", "{\"Nodes\":{\"items\":[]}}");
  EXPECT_THAT(bad, HasSubstr("HTTP/1.1 400"));
  EXPECT_THAT(HttpBody(bad), HasSubstr("Pod is required"));
  EXPECT_THAT(HttpGet(port, "/scheduler/filter"), HasSubstr("HTTP/1.1 405"));
  // A body claiming more than the limit is refused before it is read.
  EXPECT_THAT(::headroom::testing::HttpRaw(
                  port,
                  "POST /scheduler/filter HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Connection: close\r\nContent-Length: 100000000\r\n\r\n"),
              HasSubstr("HTTP/1.1 413"));
  // More candidate nodes than any cluster has: a 400, not a long wait.
  std::string many = "{\"Pod\":{},\"NodeNames\":[";
  for (int i = 0; i < 20001; ++i) many += (i ? ",\"n\"" : "\"n\"");
  many += "]}";
  const std::string too_many = HttpPost(port, "/scheduler/filter", many);
  EXPECT_THAT(too_many, HasSubstr("HTTP/1.1 400"));
  EXPECT_THAT(HttpBody(too_many), HasSubstr("NodeNames has more than 20000"));
  EXPECT_THAT(HttpGet(port, "/healthz"), HasSubstr("ok"));

  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("headroom_extender_calls_total{outcome="
                                 "\"answered\",verb=\"filter\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("headroom_extender_calls_total{outcome="
                                 "\"untouched\",verb=\"filter\"} 1"));
  // The malformed body and the 20,001 names (the 413 never reached it).
  EXPECT_THAT(metrics, HasSubstr("headroom_extender_calls_total{outcome="
                                 "\"bad_request\",verb=\"filter\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("headroom_extender_nodes_filtered_total 3"));
}

// A cluster of 5,000 candidate nodes through the planner's HTTP port, full
// node objects and names only: every node's place in the answer is the
// verdict the planner gives its card when asked directly (one CheckFit per
// kind over gRPC). Ten kinds: the eight GFD kinds, a product the catalog
// does not know with a memory label (checked as a bare 51.53 GB card:
// 49152 MiB x 1048576 / 1e9 = 51.5396, floored to the hundredth), and a node
// without GPU labels (unknown).
TEST(SchedulerExtenderHttpTest, AnswersFiveThousandNodesAsTheDirectDecision) {
  PlannerConfig config = ::headroom::testing::TestPlannerConfig();
  config.extender_budget_ms = 60000;  // the answer, never a fail-open
  auto app = PlannerApp::Start(config);
  ASSERT_TRUE(app.ok()) << app.status();
  const int port = (*app)->http_port();
  auto fit = v1::Fit::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials()));

  std::vector<::headroom::testing::GfdKind> kinds =
      ::headroom::testing::EightGfdKinds();
  kinds.push_back({"Mystery-GPU", "49152"});
  kinds.push_back({"", ""});
  constexpr int kNodes = 5000;
  const std::string pod = ::headroom::testing::ExtenderPod("bert-base", 512);

  // The direct decision per kind: nullopt for an unknown GPU.
  std::vector<std::optional<v1::Verdict>> verdicts;
  for (const auto& kind : kinds) {
    ExtenderNode labels;
    labels.gpu_product = kind.product;
    if (!kind.memory_mib.empty()) {
      labels.gpu_memory_mib = std::stod(kind.memory_mib);
    }
    const std::optional<v1::Target> target = TargetFromLabels(labels);
    if (!target.has_value()) {
      verdicts.push_back(std::nullopt);
      continue;
    }
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(512);
    *request.add_targets() = *target;
    v1::CheckFitResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(fit->CheckFit(&context, request, &response).ok());
    verdicts.push_back(
        static_cast<v1::Verdict>(response.targets(0).verdicts(0)));
  }
  ASSERT_FALSE(verdicts[9].has_value());
  ASSERT_TRUE(verdicts[8].has_value());  // a bare 51.53 GB card

  const std::string filtered = ::headroom::testing::HttpPost(
      port, "/scheduler/filter",
      ::headroom::testing::ClusterNodesBody(pod, kNodes, kinds));
  ASSERT_THAT(filtered, HasSubstr("HTTP/1.1 200"));
  const Json result = Json::parse(HttpBody(filtered));
  const Json& items = result["Nodes"]["items"];
  const Json& unresolvable = result["FailedAndUnresolvableNodes"];
  const Json& unknown = result["FailedNodes"];
  size_t passing = 0, failing = 0, unknowns = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::string node = "node-" + std::to_string(i);
    const std::optional<v1::Verdict>& verdict = verdicts[i % kinds.size()];
    if (!verdict.has_value()) {
      ++unknowns;
      ASSERT_TRUE(unknown.contains(node)) << node;
      EXPECT_THAT(unknown[node].get<std::string>(),
                  HasSubstr("the node's GPU is unknown"));
    } else if (*verdict == v1::FITS) {
      // Passing nodes come back as they were sent, in order.
      ASSERT_LT(passing, items.size()) << node;
      EXPECT_EQ(items[passing++]["metadata"]["name"], node);
      EXPECT_FALSE(unresolvable.contains(node)) << node;
    } else {
      ++failing;
      ASSERT_TRUE(unresolvable.contains(node)) << node;
      EXPECT_THAT(unresolvable[node].get<std::string>(),
                  HasSubstr(" is " + v1::Verdict_Name(*verdict) + " on "));
    }
  }
  EXPECT_EQ(items.size(), passing);
  EXPECT_EQ(unresolvable.size(), failing);
  EXPECT_EQ(unknown.size(), unknowns);
  EXPECT_EQ(unknowns, 500u);  // every tenth node has no GPU labels
  EXPECT_GT(passing, 0u);
  EXPECT_GT(failing, 0u);

  // Prioritize: one score per node in order, 0 unless it passes, the same
  // for nodes of one kind, and 10 for the tightest fit.
  const std::string scored = ::headroom::testing::HttpPost(
      port, "/scheduler/prioritize",
      ::headroom::testing::ClusterNodesBody(pod, kNodes, kinds));
  ASSERT_THAT(scored, HasSubstr("HTTP/1.1 200"));
  const Json scores = Json::parse(HttpBody(scored));
  ASSERT_EQ(scores.size(), static_cast<size_t>(kNodes));
  int64_t best = 0;
  for (int i = 0; i < kNodes; ++i) {
    const std::optional<v1::Verdict>& verdict = verdicts[i % kinds.size()];
    EXPECT_EQ(scores[i]["Host"], "node-" + std::to_string(i));
    const int64_t score = scores[i]["Score"].get<int64_t>();
    if (!verdict.has_value() || *verdict != v1::FITS) {
      EXPECT_EQ(score, 0) << i;
    } else {
      EXPECT_EQ(score, scores[i % kinds.size()]["Score"].get<int64_t>()) << i;
    }
    best = std::max(best, score);
  }
  EXPECT_EQ(best, 10);

  // Names only, no worker connected: no node's GPU is known.
  const Json names = Json::parse(HttpBody(::headroom::testing::HttpPost(
      port, "/scheduler/filter",
      ::headroom::testing::ClusterNamesBody(pod, kNodes))));
  EXPECT_TRUE(names["NodeNames"].empty());
  EXPECT_EQ(names["FailedNodes"].size(), static_cast<size_t>(kNodes));
}

TEST(SchedulerExtenderTest, ADecisionPastItsBudgetLetsEveryNodeThrough) {
  PlannerMetrics metrics;
  absl::Notification release;
  SchedulerExtender::Options options;
  options.budget = absl::Milliseconds(20);
  // The planner stalls (a store, an import): it answers only when released.
  SchedulerExtender extender(
      [&](const v1::CheckFitRequest&) -> absl::StatusOr<v1::CheckFitResponse> {
        release.WaitForNotification();
        return absl::UnavailableError("released");
      },
      [] { return nullptr; }, &metrics, options);

  const HttpServer::Answer answer =
      extender.Filter(ExtenderBody("filter-nodes.json"));
  EXPECT_EQ(answer.status, 200);
  const Json result = Json::parse(answer.body);
  EXPECT_EQ(result["Nodes"]["items"].size(), 4u);
  EXPECT_TRUE(result["FailedAndUnresolvableNodes"].empty());
  const HttpServer::Answer scored =
      extender.Prioritize(ExtenderBody("filter-nodes.json"));
  EXPECT_EQ(scored.status, 200);
  EXPECT_EQ(Json::parse(scored.body).size(), 4u);
  release.Notify();

  int fail_open = 0;
  for (const auto& family : metrics.registry()->Collect()) {
    if (family.name != "headroom_extender_calls_total") continue;
    for (const auto& metric : family.metric) {
      bool is_fail_open = false;
      for (const auto& label : metric.label) {
        if (label.name == "outcome" && label.value == "fail_open") {
          is_fail_open = true;
        }
      }
      if (is_fail_open) fail_open += static_cast<int>(metric.counter.value);
    }
  }
  EXPECT_EQ(fail_open, 2);
}

// A planner that gives the device figures: the filter reports them and the
// scores rank by the device upper bound, not the allocator's peak x k (by
// which the A100 would be the tightest fit here, not the H100).
TEST(SchedulerExtenderTest, ReportsAndScoresByTheDeviceFigure) {
  struct Card {
    double memory_gb, peak_gb, device_gb, device_upper_gb;
    v1::Verdict verdict;
  };
  const std::map<std::string, Card> cards = {
      {"L4", {24, 5, 30, 33, v1::DOES_NOT_FIT}},
      {"H100", {80, 5, 70, 75, v1::FITS}},
      {"A100-40GB", {40, 30, 18, 20, v1::FITS}},
  };
  const auto check_fit = [&](const v1::CheckFitRequest& request)
      -> absl::StatusOr<v1::CheckFitResponse> {
    v1::CheckFitResponse response;
    v1::BatchEstimate* estimate = response.add_estimates();
    estimate->set_batch(request.batches(0));
    estimate->set_k(1.2);
    for (const v1::Target& target : request.targets()) {
      const Card& card = cards.at(target.gpu());
      v1::TargetResult* result = response.add_targets();
      result->set_name(target.gpu());
      result->set_memory_gb(card.memory_gb);
      result->add_verdicts(card.verdict);
      result->add_peaks_gb(card.peak_gb);
      v1::TargetBatch* batch = result->add_batches();
      batch->set_batch(request.batches(0));
      batch->set_phase("eval");
      batch->mutable_figures()->set_allocated_gb(card.peak_gb);
      batch->mutable_figures()->set_reserved_gb(card.peak_gb * 1.2);
      batch->mutable_figures()->set_device_gb(card.device_gb);
      batch->mutable_figures()->set_device_upper_gb(card.device_upper_gb);
    }
    return response;
  };
  PlannerMetrics metrics;
  SchedulerExtender::Options options;
  options.budget = absl::Seconds(10);
  SchedulerExtender extender(
      check_fit, [] { return nullptr; }, &metrics, options);

  const HttpServer::Answer filtered =
      extender.Filter(ExtenderBody("filter-nodes.json"));
  ASSERT_EQ(filtered.status, 200);
  const Json result = Json::parse(filtered.body);
  ASSERT_EQ(result["Nodes"]["items"].size(), 2u);
  ASSERT_TRUE(result["FailedAndUnresolvableNodes"].contains("gpu-l4-a"));
  EXPECT_EQ(result["FailedAndUnresolvableNodes"]["gpu-l4-a"],
            "headroom: bert-base at batch 512 is DOES_NOT_FIT on L4 (24.0 "
            "GB): device 30.0 GB (allocated 5.0 GB, reserved 6.0 GB) in the "
            "eval phase, upper bound 33.0 GB; largest batch FITS 0");

  const HttpServer::Answer scored =
      extender.Prioritize(ExtenderBody("filter-nodes.json"));
  ASSERT_EQ(scored.status, 200);
  const Json scores = Json::parse(scored.body);
  ASSERT_EQ(scores.size(), 4u);
  // Tightest fit first: the H100 leaves 5 GB above its device upper bound,
  // the A100 20 GB.
  EXPECT_EQ(scores[1]["Host"], "gpu-h100-a");
  EXPECT_EQ(scores[1]["Score"], 10);
  EXPECT_EQ(scores[2]["Host"], "gpu-a100-40");
  EXPECT_EQ(scores[2]["Score"], 0);
  EXPECT_EQ(scores[0]["Score"], 0);  // the L4 does not pass
}

// headroom.dev/job: the extender reads the ConfigMap key through its reader
// (in the pod's namespace) into the request's job file; a key the pod named
// wrongly fails every node saying so, an API that does not answer lets
// every node through, and a planner without a reader says it reads none.
TEST(SchedulerExtenderTest, AJobAnnotationIsReadFromItsConfigMap) {
  Json pod = Json::parse(ExtenderBody("single-gpu-lora.json"));
  Json& annotations = pod["Pod"]["metadata"]["annotations"];
  annotations.erase("headroom.dev/model");
  annotations.erase("headroom.dev/batch");
  annotations["headroom.dev/job"] = "recipes/lora.yaml";
  const std::string body = pod.dump();

  v1::CheckFitRequest asked;
  const auto check_fit = [&](const v1::CheckFitRequest& request)
      -> absl::StatusOr<v1::CheckFitResponse> {
    asked = request;
    return absl::InvalidArgumentError("stop here");
  };
  std::vector<std::string> reads;
  absl::Status read_status = absl::OkStatus();
  PlannerMetrics metrics;
  SchedulerExtender::Options options;
  options.budget = absl::Seconds(10);
  options.read_job_file =
      [&](const std::string& ns, const std::string& name,
          const std::string& key) -> absl::StatusOr<std::string> {
    reads.push_back(ns + "/" + name + "/" + key);
    if (!read_status.ok()) return read_status;
    return std::string("model: {_component_: x}\n");
  };
  SchedulerExtender extender(
      check_fit, [] { return nullptr; }, &metrics, options);

  const Json asked_answer = Json::parse(extender.Filter(body).body);
  EXPECT_THAT(reads, ::testing::ElementsAre("ml/recipes/lora.yaml"));
  EXPECT_EQ(asked.job().job().name(), "recipes/lora.yaml");
  EXPECT_EQ(asked.job().job().content(), "model: {_component_: x}\n");
  EXPECT_EQ(asked.batches_size(), 0);           // the recipe says its batch
  EXPECT_EQ(asked.setup().lora().rank(), 16u);  // annotations beside it
  EXPECT_TRUE(asked_answer["FailedAndUnresolvableNodes"].contains("gpu-l4-a"));

  read_status = absl::NotFoundError("no key lora.yaml (keys: full.yaml)");
  const Json missing = Json::parse(extender.Filter(body).body);
  EXPECT_EQ(missing["Nodes"]["items"].size(), 0u);
  EXPECT_THAT(
      missing["FailedAndUnresolvableNodes"]["gpu-h100-a"].get<std::string>(),
      HasSubstr("annotation headroom.dev/job: ConfigMap recipes key "
                "lora.yaml: no key lora.yaml"));

  read_status = absl::UnavailableError("connection refused");
  const Json down = Json::parse(extender.Filter(body).body);
  EXPECT_EQ(down["Nodes"]["items"].size(), 3u);  // fail open

  SchedulerExtender::Options no_reader;
  no_reader.budget = absl::Seconds(10);
  SchedulerExtender plain(
      check_fit, [] { return nullptr; }, &metrics, no_reader);
  const Json refused = Json::parse(plain.Filter(body).body);
  EXPECT_THAT(
      refused["FailedAndUnresolvableNodes"]["gpu-l4-a"].get<std::string>(),
      HasSubstr("this planner reads no ConfigMaps"));
}

}  // namespace
}  // namespace headroom
