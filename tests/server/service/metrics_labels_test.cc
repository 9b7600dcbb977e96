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

std::string Scrape(const PlannerMetrics& metrics) {
  return prometheus::TextSerializer().Serialize(metrics.registry()->Collect());
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
