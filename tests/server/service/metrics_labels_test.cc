// Metric labels a request can set are bounded: made-up methods count as
// grpc_method="unknown", GPU series from hellos are capped and go with
// their worker, and factor-set series are kept for the latest versions.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/build_info.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "prometheus/text_serializer.h"
#include "server/service/metrics.h"
#include "server/service/planner_app.h"
#include "tests/support/loopback.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Lines of `text` that start with `prefix`.
int CountLines(const std::string& text, const std::string& prefix) {
  int n = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) ++n;
  }
  return n;
}

// What /metrics serializes.
std::string Scrape(const PlannerMetrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.exported()->Collect());
}

grpc::Status CallGeneric(grpc::GenericStub* stub, const std::string& method) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  std::mutex mu;
  std::condition_variable done_cv;
  bool done = false;
  grpc::Status status;
  stub->UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                  [&](grpc::Status s) {
                    std::lock_guard<std::mutex> lock(mu);
                    status = std::move(s);
                    done = true;
                    done_cv.notify_one();
                  });
  std::unique_lock<std::mutex> lock(mu);
  done_cv.wait(lock, [&] { return done; });
  return status;
}

// headroom_build_info: one series, value 1, the build's identity in its
// labels (sorted by name, as the text format writes them).
TEST(MetricsBuildInfoTest, OneSeriesWithTheBuildsLabelsAtOne) {
  PlannerMetrics metrics;
  const std::string text = Scrape(metrics);
  const BuildInfo& build = GetBuildInfo();
  EXPECT_EQ(CountLines(text, "headroom_build_info{"), 1);
  EXPECT_THAT(text, HasSubstr(absl::StrCat("headroom_build_info{build_type=\"",
                                           build.build_type, "\",commit=\"",
                                           build.commit, "\",version=\"",
                                           build.version, "\"} 1\n")));
  EXPECT_THAT(text, HasSubstr("# TYPE headroom_build_info gauge"));
}

TEST(MetricsLabelsTest, MadeUpMethodsAddNoSeriesBeyondUnknown) {
  PlannerConfig config = ::headroom::testing::TestPlannerConfig();
  auto app = PlannerApp::Start(config);
  ASSERT_TRUE(app.ok()) << app.status();
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*app)->grpc_port()),
                          grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  ASSERT_TRUE(CallGeneric(&stub, "/headroom.v1.Fit/Ping").ok());
  EXPECT_EQ(CallGeneric(&stub, "/headroom.v1.Fit/MadeUp0").error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  const std::string before =
      ::headroom::testing::HttpGet((*app)->http_port(), "/metrics");
  const int series_before = CountLines(before, "grpc_server_");
  for (const char* method :
       {"/headroom.v1.Fit/MadeUp1", "/headroom.v1.Fleet/MadeUp2",
        "/made.up.Service/Method3", "/x", "/headroom.v1.Fit/MadeUp4"}) {
    EXPECT_EQ(CallGeneric(&stub, method).error_code(),
              grpc::StatusCode::UNIMPLEMENTED)
        << method;
  }
  const std::string after =
      ::headroom::testing::HttpGet((*app)->http_port(), "/metrics");
  EXPECT_EQ(CountLines(after, "grpc_server_"), series_before);
  EXPECT_THAT(after, Not(HasSubstr("MadeUp")));
  EXPECT_THAT(after, Not(HasSubstr("made.up")));
  EXPECT_THAT(after, HasSubstr("grpc_method=\"unknown\""));
  // gRPC sees an unregistered method as a bidi stream.
  EXPECT_THAT(after, HasSubstr("grpc_server_started_total{grpc_method="
                               "\"unknown\",grpc_service=\"unknown\","
                               "grpc_type=\"bidi_stream\"} 6"));
  // A real method keeps its name.
  EXPECT_THAT(after, HasSubstr("grpc_method=\"Ping\""));
  (*app)->Shutdown(std::chrono::milliseconds(0));
}

TEST(MetricsLabelsTest, GpuSeriesAreCappedAndGoWithTheirWorker) {
  PlannerMetrics metrics;
  std::vector<PlannerMetrics::GpuGauges> gauges;
  const size_t gpus = PlannerMetrics::kMaxGpuSeries + 10;
  for (size_t i = 0; i < gpus; ++i) {
    gauges.push_back(metrics.GpuSeries(
        "0", absl::StrCat("GPU-", i, std::string(1000, 'u')), "L4", "host"));
  }
  // The same GPU from a second connection shares its series.
  gauges.push_back(metrics.GpuSeries(
      "0", absl::StrCat("GPU-", 0, std::string(1000, 'u')), "L4", "host"));
  // A series is exported once its GPU reads.
  for (const auto& g : gauges) metrics.GpuSample(g, 1, 2, 3, 60000);
  std::string text = Scrape(metrics);
  EXPECT_EQ(CountLines(text, "DCGM_FI_DEV_FB_USED{"),
            static_cast<int>(PlannerMetrics::kMaxGpuSeries) + 1);
  EXPECT_THAT(text, HasSubstr("UUID=\"other\""));
  // Label values are cut: no 1000-character UUID reaches the scrape.
  EXPECT_THAT(text, Not(HasSubstr(std::string(200, 'u'))));
  for (const auto& g : gauges) metrics.ReleaseGpuSeries(g);
  text = Scrape(metrics);
  EXPECT_EQ(CountLines(text, "DCGM_FI_DEV_FB_USED{"), 1);  // "other"
}

// A clock the test moves by hand.
struct FakeClock {
  int64_t now_ms = 1000;
};

TEST(MetricsGpuTest, SimulatedLabelAndEnergyAsACounter) {
  FakeClock clock;
  PlannerMetrics metrics([&] { return clock.now_ms; });
  // Before any GPU reads: the families as HELP and TYPE alone.
  std::string text = Scrape(metrics);
  EXPECT_THAT(text, HasSubstr("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION "
                              "counter"));
  EXPECT_THAT(text, HasSubstr("# TYPE DCGM_FI_DEV_FB_USED gauge"));
  EXPECT_EQ(CountLines(text, "DCGM_FI_DEV_FB_USED{"), 0);
  const PlannerMetrics::GpuGauges sim =
      metrics.GpuSeries("0", "SIM-0", "L4", "sim-host", /*simulated=*/true);
  const PlannerMetrics::GpuGauges real =
      metrics.GpuSeries("0", "GPU-0", "NVIDIA H200", "gpu-host");
  // Registered but not read yet: nothing to tell.
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 0);
  metrics.GpuSample(sim, 512, 70.5, 123456, 200);
  metrics.GpuSample(real, 1024, std::nullopt, std::nullopt, 200);
  text = Scrape(metrics);
  EXPECT_THAT(text, HasSubstr("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION "
                              "counter"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{Hostname="
                              "\"sim-host\",UUID=\"SIM-0\",gpu=\"0\","
                              "modelName=\"L4\",simulated=\"true\"} 123456"));
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_POWER_USAGE{Hostname=\"sim-host\","
                              "UUID=\"SIM-0\",gpu=\"0\",modelName=\"L4\","
                              "simulated=\"true\"} 70.5"));
  // A real GPU has no simulated label, and no power or energy series when
  // it does not read them.
  EXPECT_THAT(text, HasSubstr("DCGM_FI_DEV_FB_USED{Hostname=\"gpu-host\","
                              "UUID=\"GPU-0\",gpu=\"0\",modelName=\"NVIDIA "
                              "H200\"} 1024"));
  EXPECT_EQ(CountLines(text, "DCGM_FI_DEV_POWER_USAGE{"), 1);
  EXPECT_EQ(CountLines(text, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{"), 1);
}

TEST(MetricsGpuTest, SeriesGoStaleAfterTwoPeriodsAndWithTheirWorker) {
  FakeClock clock;
  PlannerMetrics metrics([&] { return clock.now_ms; });
  const PlannerMetrics::GpuGauges gpu =
      metrics.GpuSeries("0", "GPU-0", "L4", "host");
  // First sample: no period yet, the fallback (500 ms) bounds it.
  metrics.GpuSample(gpu, 1, 50, 1000, 500);
  clock.now_ms += 1000;
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 1);
  clock.now_ms += 1;  // 1001 ms > 2 x 500
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 0);
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_POWER_USAGE{"), 0);
  EXPECT_EQ(
      CountLines(Scrape(metrics), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{"), 0);
  // It reads again: back, and two samples 100 ms apart set its period.
  metrics.GpuSample(gpu, 2, 50, 2000, 500);
  clock.now_ms += 100;
  metrics.GpuSample(gpu, 3, 50, 3000, 500);
  clock.now_ms += 200;  // 2 x 100: still fresh
  std::string text = Scrape(metrics);
  EXPECT_THAT(text, HasSubstr("modelName=\"L4\"} 3"));
  clock.now_ms += 1;  // past 2 x its 100 ms period, well inside the fallback
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 0);
  // A fresh reading, then the worker disconnects: gone at once, and a late
  // sample does not bring it back.
  metrics.GpuSample(gpu, 4, 50, 4000, 500);
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 1);
  metrics.ReleaseGpuSeries(gpu);
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 0);
  metrics.GpuSample(gpu, 5, 50, 5000, 500);
  EXPECT_EQ(CountLines(Scrape(metrics), "DCGM_FI_DEV_FB_USED{"), 0);
}

TEST(MetricsLabelsTest, FactorSetSeriesAreKeptForTheLatestVersions) {
  PlannerMetrics metrics;
  for (int i = 1; i <= 40; ++i) {
    v1::FactorSet set;
    set.set_version(absl::StrCat("fs-", i));
    (*set.mutable_page()->mutable_summary())["ours"].set_median_abs_err(0.1);
    metrics.FactorSetInstalled(set);
  }
  const std::string text = Scrape(metrics);
  EXPECT_EQ(CountLines(text, "headroom_factor_set_info{"), 16);
  EXPECT_EQ(CountLines(text, "headroom_calibration_median_abs_error{"), 16);
  EXPECT_THAT(text,
              HasSubstr("headroom_factor_set_info{factor_set=\"fs-40\"} 1"));
  EXPECT_THAT(text, Not(HasSubstr("factor_set=\"fs-24\"")));
}

}  // namespace
}  // namespace headroom
