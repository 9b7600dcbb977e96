// Learning by probing, end to end on loopback with the real binaries: a
// planner and one simulated L4. A new spec is answered from the prior and
// is BORDERLINE; with learn the planner queues a small probe on the worker;
// once its runs are stored the answer is anchored on them, and four times
// beyond the probed batches it is within 3 % of the sim's hidden truth.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "tests/support/fleet_client.h"
#include "tests/support/loopback.h"
#include "tests/support/sim_fleet.h"
#include "tests/support/tiny_lm.h"
#include "worker/daemon/sim_executor.h"

namespace headroom {
namespace {

const std::string kRoot = HEADROOM_SOURCE_DIR;

using ::headroom::testing::WaitFor;

using ::headroom::testing::TinyLm;

class LearnIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        sim_.StartPlanner({"--runs=" + kRoot + "/data/memory-runs.jsonl," +
                               kRoot + "/data/harness-runs.jsonl",
                           "--probe_lease_ms=3000", "--store_poll_ms=100",
                           // The only worker is simulated: let its card name
                           // its node to the extender (by default it does
                           // not: NodeTargetsTest).
                           "--extender_include_simulated"},
                          /*http=*/true));
    fleet_ = v1::Fleet::NewStub(sim_.channel());
    planner_stub_ = v1::Fit::NewStub(sim_.channel());
    ASSERT_TRUE(sim_.StartWorker(
        "sim-l4", {"--node_name=gpu-node-7", "--sim_gpu=L4", "--sim_seed=7",
                   "--sim_step_ms=5", "--sample_ms=20"}));
  }

  v1::CheckFitRequest Request(const std::vector<uint32_t>& batches) {
    v1::CheckFitRequest request;
    *request.mutable_model()->mutable_spec() = TinyLm();
    for (uint32_t batch : batches) request.add_batches(batch);
    request.add_targets()->set_gpu("L4");
    request.add_targets()->set_memory_gb(16);
    return request;
  }

  bool Ask(const v1::CheckFitRequest& request, v1::CheckFitResponse* answer) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    const grpc::Status status =
        planner_stub_->CheckFit(&context, request, answer);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return status.ok();
  }

  ::headroom::testing::SimFleet sim_{"learn"};
  std::unique_ptr<v1::Fleet::Stub> fleet_;
  std::unique_ptr<v1::Fit::Stub> planner_stub_;
};

TEST_F(LearnIntegrationTest, APriorAnswerLearnsFromOneProbe) {
  // Asked without simulated evidence allowed: the only worker is simulated,
  // so nothing is queued, and the answer says why.
  v1::CheckFitRequest request = Request({64, 256});
  request.set_learn(true);
  v1::CheckFitResponse first;
  ASSERT_TRUE(Ask(request, &first));
  EXPECT_EQ(first.estimates(0).basis().kind(), v1::Basis::PRIOR);
  EXPECT_NE(first.learning().find("no probe queued: only simulated workers"),
            std::string::npos)
      << first.learning();

  // With simulated evidence allowed: PRIOR, not FITS at 256 on 16 GB, a
  // BORDERLINE verdict (what makes a learning answer probe), and a probe
  // is queued on the simulated L4.
  request.set_include_simulated(true);
  ASSERT_TRUE(Ask(request, &first));
  EXPECT_EQ(first.estimates(0).basis().kind(), v1::Basis::PRIOR);
  EXPECT_NE(first.targets(1).verdicts(1), v1::FITS);
  bool borderline = false;
  for (const v1::TargetResult& target : first.targets()) {
    for (int verdict : target.verdicts()) {
      borderline |= verdict == v1::BORDERLINE;
    }
  }
  EXPECT_TRUE(borderline) << first.ShortDebugString();
  ASSERT_EQ(first.learning().rfind("probe p-", 0), 0u) << first.learning();
  const std::string probe_id =
      first.learning().substr(6, first.learning().find(' ', 6) - 6);
  // A second learn request while it waits queues nothing more.
  v1::CheckFitResponse again;
  ASSERT_TRUE(Ask(request, &again));
  EXPECT_NE(again.learning().find("already queued or running"),
            std::string::npos)
      << again.learning();

  std::optional<v1::Probe> probe;
  ASSERT_TRUE(WaitFor(
      [&] {
        probe = ::headroom::testing::ProbeSnapshot(fleet_.get(), probe_id);
        return probe.has_value() && probe->state() == v1::Probe::SUCCEEDED;
      },
      120))
      << (probe.has_value() ? probe->ShortDebugString() : "no probe");
  EXPECT_FALSE(probe->request().learn_key().empty());
  EXPECT_EQ(probe->request().learn_key(),
            first.estimates(0).basis().model_key());
  uint32_t largest = 0;
  for (const v1::BatchResult& result : probe->results()) {
    EXPECT_FALSE(result.oom()) << "a learning probe chose a batch that OOMs";
    largest = std::max(largest, result.batch());
  }
  ASSERT_GT(largest, 0u);

  // Four times beyond the largest probed batch, anchored on the probe's
  // runs once the evidence has caught up with all of them.
  const uint32_t far = 4 * largest;
  v1::CheckFitResponse anchored;
  v1::CheckFitRequest later = Request({far});
  later.set_include_simulated(true);
  ASSERT_TRUE(WaitFor(
      [&] {
        return Ask(later, &anchored) &&
               anchored.estimates(0).basis().kind() == v1::Basis::ANCHORED &&
               anchored.estimates(0).basis().runs() == probe->results_size();
      },
      30))
      << anchored.ShortDebugString();
  const v1::Basis& basis = anchored.estimates(0).basis();
  EXPECT_EQ(basis.runs(), probe->results_size());
  EXPECT_EQ(basis.source(), "sim");
  EXPECT_NEAR(basis.extrapolation(), 4.0, 1e-9);

  worker::SimGpuConfig config;
  config.kind = "L4";
  config.memory_gb = 24;
  config.seed = 7;
  const worker::SimExecutor sim(config);
  v1::Assignment assignment;
  *assignment.mutable_spec() = TinyLm();
  const double truth = sim.TruePeakGb(assignment, far);
  const double predicted = anchored.targets(0).peaks_gb(0);  // on the L4
  std::printf(
      "learn: probed up to batch %u; at %u predicted %.3f GB, hidden "
      "truth %.3f GB (%+.2f %%)\n",
      largest, far, predicted, truth, 100 * (predicted / truth - 1));
  EXPECT_NEAR(predicted / truth, 1.0, 0.03)
      << "predicted " << predicted << " GB, hidden truth " << truth << " GB";

  // Real answers stay on the prior: sim evidence is kept out of them.
  v1::CheckFitResponse real;
  ASSERT_TRUE(Ask(Request({far}), &real));
  EXPECT_EQ(real.estimates(0).basis().kind(), v1::Basis::PRIOR);
}

// SubmitProbe says why no connected worker can take a probe (it stays
// queued), and says nothing when one can.
TEST_F(LearnIntegrationTest, SubmitProbeSaysWhichWorkerIsMissing) {
  const auto warning = [&](v1::SubmitProbeRequest request) {
    request.mutable_model()->set_template_("simple-cnn");
    request.add_batches(8);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SubmitProbeResponse response;
    EXPECT_TRUE(fleet_->SubmitProbe(&context, request, &response).ok());
    return response.warning();
  };
  v1::SubmitProbeRequest h100;
  h100.set_gpu("H100");
  EXPECT_NE(warning(h100).find("no connected worker has a H100 (connected: "
                               "L4)"),
            std::string::npos)
      << warning(h100);
  v1::SubmitProbeRequest torch;
  torch.set_gpu("L4");
  torch.set_executor("torch");
  EXPECT_NE(warning(torch).find("runs the \"torch\" executor"),
            std::string::npos)
      << warning(torch);
  v1::SubmitProbeRequest absent;
  absent.set_worker("nosuch");
  EXPECT_NE(warning(absent).find("worker 'nosuch' is not connected"),
            std::string::npos)
      << warning(absent);
  v1::SubmitProbeRequest fine;
  fine.set_gpu("L4");
  fine.set_executor("sim");
  EXPECT_EQ(warning(fine), "");
}

// The scheduler extender with node names only (nodeCacheCapable): a node's
// GPU is the one its connected worker reports.
TEST_F(LearnIntegrationTest, ExtenderFindsANodesGpuThroughItsWorker) {
  const std::string body =
      "{\"Pod\":{\"metadata\":{\"name\":\"p\",\"annotations\":{"
      "\"headroom.dev/model\":\"bert-base\",\"headroom.dev/batch\":"
      "\"32\"}}},\"NodeNames\":[\"gpu-node-7\",\"elsewhere\"]}";
  const std::string raw = ::headroom::testing::HttpPost(
      sim_.http_port(), "/scheduler/filter", body);
  const std::string response = ::headroom::testing::HttpBody(raw);
  ASSERT_FALSE(raw.empty()) << "no answer on port " << sim_.http_port();
  // gpu-node-7 is the simulated L4: bert-base at 32 FITS there.
  EXPECT_NE(response.find("\"NodeNames\":[\"gpu-node-7\"]"), std::string::npos)
      << response;
  EXPECT_NE(response.find("\"elsewhere\":\"headroom: the node's GPU is "
                          "unknown"),
            std::string::npos)
      << response;
}

}  // namespace
}  // namespace headroom
