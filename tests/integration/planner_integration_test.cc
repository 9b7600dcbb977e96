// Starts the real planner (PlannerApp, as the binary does) on port 0 and
// talks to it through the generated stubs and plain HTTP on loopback.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "io/files.h"
#include "server/service/planner_app.h"
#include "tests/support/loopback.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/sqlite_files.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

using ::headroom::testing::HttpGet;
using ::headroom::testing::TestPlannerConfig;

class PlannerIntegrationTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto app = PlannerApp::Start(TestPlannerConfig());
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = app->release();
  }
  static void TearDownTestSuite() {
    delete app_;
    app_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(app_, nullptr);
    channel_ =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    stub_ = std::make_unique<testing::PlannerStubs>(channel_);
  }

  grpc::Status Call(const v1::CheckFitRequest& request,
                    v1::CheckFitResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    return stub_->fit->CheckFit(&context, request, response);
  }

  static v1::CheckFitRequest Request(const std::string& model) {
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_(model);
    request.add_batches(8);
    request.add_batches(64);
    request.add_targets()->set_gpu("L4");
    request.add_targets()->set_gpu("H100");
    request.add_targets()->set_memory_gb(16);
    return request;
  }

  static PlannerApp* app_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<testing::PlannerStubs> stub_;
};

PlannerApp* PlannerIntegrationTest::app_ = nullptr;

TEST_F(PlannerIntegrationTest, ChecksFitOnSeveralTargetsAndBatches) {
  v1::CheckFitResponse response;
  const grpc::Status status = Call(Request("bert-base"), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.factor_set_version(), "fs-1");
  EXPECT_EQ(response.factor_set_version(), app_->factor_set_version());
  EXPECT_EQ(response.params(), 31120896u);
  ASSERT_EQ(response.estimates_size(), 2);
  EXPECT_GT(response.estimates(1).peak_gb(), response.estimates(0).peak_gb());
  ASSERT_EQ(response.targets_size(), 3);
  EXPECT_EQ(response.targets(0).name(), "L4");
  EXPECT_EQ(response.targets(0).memory_gb(), 24);
  EXPECT_EQ(response.targets(2).name(), "16 GB");
  for (const auto& target : response.targets()) {
    ASSERT_EQ(target.verdicts_size(), 2);
    EXPECT_GE(target.max_batch_not_does_not_fit(), target.max_batch_fits());
  }
  // H100 (80 GB) takes a larger batch than L4 (24 GB).
  EXPECT_GT(response.targets(1).max_batch_fits(),
            response.targets(0).max_batch_fits());
}

TEST_F(PlannerIntegrationTest, BadInputGetsNamedErrorsAndServerKeepsServing) {
  struct Case {
    v1::CheckFitRequest request;
    grpc::StatusCode code;
    std::string says;
  };
  std::vector<Case> cases;
  {
    auto r = Request("bert-base");
    r.set_batches(0, 0);
    cases.push_back({r, grpc::StatusCode::INVALID_ARGUMENT, "batches[0] = 0"});
  }
  {
    auto r = Request("bert-base");
    r.set_batches(1, (1u << 20) + 1);
    cases.push_back(
        {r, grpc::StatusCode::INVALID_ARGUMENT, "allowed 1..1048576"});
  }
  cases.push_back(
      {Request("bert-bas"), grpc::StatusCode::NOT_FOUND, "bert-base"});
  {
    auto r = Request("bert-base");
    r.add_targets()->set_gpu("H10");
    cases.push_back({r, grpc::StatusCode::NOT_FOUND, "H100"});
  }
  {
    auto r = Request("bert-base");
    r.mutable_model()->mutable_spec()->set_name("nothing");
    cases.push_back(
        {r, grpc::StatusCode::INVALID_ARGUMENT, "spec.layers is empty"});
  }
  {
    auto r = Request("bert-base");
    r.add_targets()->set_memory_gb(-1);
    cases.push_back({r, grpc::StatusCode::INVALID_ARGUMENT, "memory_gb = -1"});
  }
  {
    // An oversized message: a spec of about 5 MB, over the 4 MB limit.
    auto r = Request("bert-base");
    v1::ModelSpec* spec = r.mutable_model()->mutable_spec();
    spec->set_name("huge");
    spec->set_positions(1);
    for (int i = 0; i < 120000; ++i) {
      v1::Layer* layer = spec->add_layers();
      layer->set_name("layer-with-a-long-descriptive-name");
      layer->mutable_linear()->set_in_features(4);
      layer->mutable_linear()->set_out_features(4);
    }
    cases.push_back(
        {r, grpc::StatusCode::INVALID_ARGUMENT, "bytes; allowed up to"});
  }
  for (const Case& c : cases) {
    v1::CheckFitResponse response;
    const grpc::Status status = Call(c.request, &response);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.says));
  }
  v1::CheckFitResponse response;
  EXPECT_TRUE(Call(Request("gpt2"), &response).ok());
}

TEST_F(PlannerIntegrationTest, ChecksFitFromHuggingFaceConfig) {
  std::ifstream file(kRoot + "/tests/data/hf/llama-2-7b.json");
  std::stringstream text;
  text << file.rdbuf();
  ASSERT_FALSE(text.str().empty());
  v1::CheckFitRequest request = Request("unused");
  request.mutable_model()->set_hf_config(text.str());
  request.mutable_setup()->set_positions(4096);
  request.mutable_setup()->set_precision(v1::TrainingSetup::BF16_MIXED);
  v1::CheckFitResponse response;
  const grpc::Status status = Call(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.params(), 6738415616u);
  // 7B parameters at 18 bytes each do not fit an L4 (24 GB) at any batch.
  EXPECT_EQ(response.targets(0).verdicts(0), v1::DOES_NOT_FIT);
  EXPECT_EQ(response.targets(0).max_batch_not_does_not_fit(), 0u);

  request.mutable_model()->set_hf_config("{not json");
  const grpc::Status bad = Call(request, &response);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("model.hf_config"));
  request.mutable_model()->set_hf_config(R"({"model_type": "gpt3000"})");
  const grpc::Status unknown = Call(request, &response);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(unknown.error_message(), HasSubstr("llama"));
}

TEST_F(PlannerIntegrationTest, PlansMicrobatchesWithTheCurrentFactors) {
  v1::PlanMicrobatchRequest request;
  request.set_template_("gpt2");
  request.set_global_batch(256);
  for (uint32_t candidate : {1, 2, 4, 8, 16, 32, 64, 128, 256}) {
    request.add_microbatch_candidates(candidate);
  }
  request.set_vram_fraction(0.9);
  request.set_reserve_gb(1);
  request.set_gpu("L4");
  v1::PlanMicrobatchResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status =
        stub_->microbatch->PlanMicrobatch(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(response.factor_set_version(), "fs-1");
  EXPECT_NEAR(response.budget_gb(), 0.9 * 24 - 1, 1e-9);
  EXPECT_EQ(response.measure_count() + response.skip_count(),
            response.candidates_size());
  EXPECT_GT(response.skip_count(), 0);
  request.set_vram_fraction(1.5);
  grpc::ClientContext context;
  const grpc::Status bad =
      stub_->microbatch->PlanMicrobatch(&context, request, &response);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("vram_fraction"));
}

// The autotune cache: the shipped record is stored under its key; a plan
// with exactly that key reuses its selection and measures nothing; any
// change of the key (here the torch version) misses; entries are listed and
// dropped; the plan says what margin its largest predicted fit keeps.
TEST_F(PlannerIntegrationTest, AutotuneCacheReusesOnlyAnExactKey) {
  std::ifstream file(kRoot + "/data/microbatch-autotune.json");
  std::stringstream text;
  text << file.rdbuf();
  v1::PutAutotuneRecordRequest put;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(text.str(),
                                                          put.mutable_record())
                  .ok());
  v1::PutAutotuneRecordResponse stored;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->microbatch->PutAutotuneRecord(&context, put, &stored).ok());
  }
  EXPECT_EQ(stored.id().size(), 16u);

  v1::PlanMicrobatchRequest request;
  request.set_template_("llama3-block");
  request.set_global_batch(90);
  for (uint32_t c : {8, 16, 32, 48, 64, 90}) {
    request.add_microbatch_candidates(c);
  }
  request.set_vram_fraction(0.98);
  request.set_memory_gb(96);
  request.set_context(2048);
  request.mutable_setup()->set_precision(v1::TrainingSetup::BF16_MIXED);
  *request.mutable_cache_key() = put.record().cache_key();
  v1::PlanMicrobatchResponse hit;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->microbatch->PlanMicrobatch(&context, request, &hit).ok());
  }
  ASSERT_TRUE(hit.has_cached());
  EXPECT_TRUE(hit.cached().cache_reused());
  EXPECT_EQ(hit.cached().selected().microbatch(), 90u);
  EXPECT_EQ(hit.cached().selected().mode(), "compiled");
  EXPECT_EQ(hit.measure_count(), 0);
  for (const auto& c : hit.candidates()) {
    EXPECT_EQ(c.action(), v1::PlannedMicrobatch::SKIP);
  }
  // The largest predicted fit and its margin: budget minus upper bound.
  ASSERT_TRUE(hit.has_largest_predicted_fit());
  EXPECT_NEAR(hit.margin_gb(),
              hit.budget_gb() - hit.largest_predicted_fit().upper_gb(), 1e-9);
  EXPECT_GT(hit.margin_gb(), 0);

  request.mutable_cache_key()->set_torch("2.9.0+cu128");
  v1::PlanMicrobatchResponse miss;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->microbatch->PlanMicrobatch(&context, request, &miss).ok());
  }
  EXPECT_FALSE(miss.has_cached());

  v1::ListAutotuneRecordsResponse listed;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->microbatch->ListAutotuneRecords(&context, {}, &listed).ok());
  }
  ASSERT_EQ(listed.entries_size(), 1);
  EXPECT_EQ(listed.entries(0).id(), stored.id());
  v1::DropAutotuneRecordRequest drop;
  drop.set_id(stored.id());
  v1::DropAutotuneRecordResponse dropped;
  {
    grpc::ClientContext context;
    EXPECT_TRUE(
        stub_->microbatch->DropAutotuneRecord(&context, drop, &dropped).ok());
  }
  grpc::ClientContext context;
  const grpc::Status again =
      stub_->microbatch->DropAutotuneRecord(&context, drop, &dropped);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(again.error_message(), HasSubstr(stored.id()));
}

TEST_F(PlannerIntegrationTest, RanksStoredDensityRunsAndRefusesBadOnes) {
  auto run = [](const std::string& arch, double acc, double thru,
                double ram_kib) {
    v1::DensityRawRun r;
    r.set_id(arch + "|float32|Tween|lr=1");
    r.set_arch(arch);
    r.set_dtype("float32");
    r.set_mode("Tween");
    r.set_avg_accuracy(acc);
    r.set_soft_acc(acc);
    r.set_throughput(thru);
    r.set_availability(40);
    r.set_ram_kib(ram_kib);
    r.set_score(thru * 40 * acc / 10000);
    return r;
  };
  v1::SubmitDensityRunsRequest submit;
  *submit.add_runs() = run("mlp", 50, 1000, 16);
  *submit.add_runs() = run("lstm", 45, 2000, 4);
  *submit.add_runs() = run("gru", 10, 9000, 2);
  v1::SubmitDensityRunsResponse submitted;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(
        stub_->density->SubmitDensityRuns(&context, submit, &submitted).ok());
  }
  EXPECT_EQ(submitted.stored(), 3);
  // A bad run is refused whole: nothing more is stored.
  v1::SubmitDensityRunsRequest bad;
  *bad.add_runs() = run("cnn", 40, 100, 8);
  *bad.add_runs() = run("tcn", 40, 100, -1);
  {
    grpc::ClientContext context;
    const grpc::Status status =
        stub_->density->SubmitDensityRuns(&context, bad, &submitted);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("ram_kib"));
  }
  v1::RankDensityRequest rank;
  rank.set_use_stored(true);
  v1::RankDensityResponse ranked;
  {
    grpc::ClientContext context;
    const grpc::Status status =
        stub_->density->RankDensity(&context, rank, &ranked);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(ranked.leaderboard().n(), 3);
  // lstm keeps 90 % of the best accuracy in a quarter of mlp's memory.
  ASSERT_GT(ranked.leaderboard().top_size(), 0);
  EXPECT_EQ(ranked.leaderboard().top(0).id(), "lstm|float32|Tween|lr=1");
  rank.set_arch("mlp");
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->density->RankDensity(&context, rank, &ranked).ok());
  }
  EXPECT_EQ(ranked.leaderboard().n(), 1);
}

TEST_F(PlannerIntegrationTest, ServesCalibrationAndHealth) {
  grpc::ClientContext context;
  v1::GetCalibrationRequest request;
  v1::GetCalibrationResponse response;
  ASSERT_TRUE(
      stub_->calibration->GetCalibration(&context, request, &response).ok());
  const auto& summary = response.factor_set().page().summary();
  ASSERT_TRUE(summary.count("ours") && summary.count("ours_heldout"));
  EXPECT_EQ(summary.at("ours").runs(), 91);
  EXPECT_EQ(summary.at("reference_shipped").agree(), 625);
  EXPECT_GT(response.factor_set().k95(), 1.0);

  grpc::ClientContext missing_context;
  request.set_version("fs-404");
  EXPECT_EQ(
      stub_->calibration->GetCalibration(&missing_context, request, &response)
          .error_code(),
      grpc::StatusCode::NOT_FOUND);

  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext health_context;
  grpc::health::v1::HealthCheckResponse health_response;
  ASSERT_TRUE(health->Check(&health_context, {}, &health_response).ok());
  EXPECT_EQ(health_response.status(),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

TEST_F(PlannerIntegrationTest, EstimatesEnergyAndRejectsBadInput) {
  v1::EstimateEnergyRequest request;
  request.set_params_b(7);
  request.set_gpu("L4");
  request.set_quant("nf4");
  v1::EstimateEnergyResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status =
        stub_->energy->EstimateEnergy(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(response.arch(), "ada");
  EXPECT_GT(response.fp16_j_per_1k(), 0);
  request.set_params_b(-1);
  grpc::ClientContext context;
  const grpc::Status status =
      stub_->energy->EstimateEnergy(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("params_b"));
}

TEST_F(PlannerIntegrationTest, ExportsGrpcAndVerdictMetrics) {
  v1::CheckFitResponse response;
  ASSERT_TRUE(Call(Request("vit-b16"), &response).ok());
  auto bad = Request("vit-b16");
  bad.set_batches(0, 0);
  EXPECT_FALSE(Call(bad, &response).ok());
  const std::string metrics = HttpGet(app_->http_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(
      metrics,
      HasSubstr("grpc_server_started_total{grpc_method=\"CheckFit\","
                "grpc_service=\"headroom.v1.Fit\",grpc_type=\"unary\"}"));
  EXPECT_THAT(metrics, HasSubstr("grpc_code=\"InvalidArgument\""));
  EXPECT_THAT(metrics, HasSubstr("grpc_server_handling_seconds_bucket"));
  EXPECT_THAT(metrics,
              HasSubstr("headroom_fit_verdicts_total{verdict=\"FITS\"}"));
  EXPECT_THAT(HttpGet(app_->http_port(), "/healthz"), HasSubstr("ok"));
  const std::string page = HttpGet(app_->http_port(), "/calibration");
  EXPECT_THAT(page, HasSubstr("text/html"));
  EXPECT_THAT(page, HasSubstr("Calibration of factor set fs-1"));
  EXPECT_THAT(page, HasSubstr("<svg"));
  EXPECT_THAT(page, HasSubstr("reference_heldout"));
  EXPECT_THAT(page, HasSubstr("left out of the fit"));
  EXPECT_THAT(page, HasSubstr("<li>t5-small: at batch"));
  EXPECT_THAT(page, HasSubstr("a prior of weight 1 that each factor is 1"));
}

// The planner's pages: / links them; /energy draws every architecture a
// query may name and says Hopper has no measurements yet (the shipped
// curves borrow Ampere's for it); an unknown ?arch= is a 400 naming the
// allowed ones.
TEST_F(PlannerIntegrationTest, PagesIndexEnergyHopperAndBadArch) {
  const std::string index = HttpGet(app_->http_port(), "/");
  EXPECT_THAT(index, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(index, HasSubstr("<a href=\"/energy\">"));
  EXPECT_THAT(index, HasSubstr("<a href=\"/calibration\">"));
  const std::string energy = HttpGet(app_->http_port(), "/energy");
  EXPECT_THAT(energy, HasSubstr("HTTP/1.1 200"));
  EXPECT_THAT(energy, HasSubstr("no Hopper measurements yet (H100/H200)"));
  const std::string bad = HttpGet(app_->http_port(), "/energy?arch=foo");
  EXPECT_THAT(bad, HasSubstr("HTTP/1.1 400"));
  EXPECT_THAT(bad, HasSubstr("arch = 'foo' is not an architecture of the "
                             "energy curves; allowed ada, ampere, blackwell, "
                             "hopper, turing"));
}

// Refit, promotion and rollback against a planner of its own.
TEST(PlannerRefitTest, RefitPromoteRollbackAndBadRunsKeepTheStore) {
  auto app = PlannerApp::Start(TestPlannerConfig());
  ASSERT_TRUE(app.ok()) << app.status();
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials());
  auto stub = std::make_unique<testing::PlannerStubs>(channel);
  auto deadline = [] {
    return std::chrono::system_clock::now() + std::chrono::seconds(30);
  };
  auto refit = [&](const v1::RefitRequest& request, v1::RefitResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    return stub->calibration->Refit(&context, request, out);
  };
  auto version_answering = [&] {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    request.add_targets()->set_gpu("L4");
    v1::CheckFitResponse response;
    EXPECT_TRUE(stub->fit->CheckFit(&context, request, &response).ok());
    return response.factor_set_version();
  };

  // A dry run stores nothing.
  v1::RefitRequest dry;
  dry.set_dry_run(true);
  v1::RefitResponse response;
  ASSERT_TRUE(refit(dry, &response).ok());
  EXPECT_FALSE(response.promoted());
  EXPECT_EQ(response.runs_used(), 187);
  EXPECT_TRUE(response.factor_set().version().empty());

  // Bad runs: NOT_FOUND / INVALID_ARGUMENT naming the run; nothing stored.
  v1::RefitRequest bad;
  v1::MeasuredRun* run = bad.add_runs();
  run->set_template_("bert-base");
  run->set_gpu("L4");
  run->set_params(31120896);
  run->set_batch(8);
  run->set_measured_peak_gb(0.9);
  run = bad.add_runs();
  run->set_template_("no-such-model");
  run->set_gpu("L4");
  run->set_params(31120896);
  run->set_batch(8);
  run->set_measured_peak_gb(0.9);
  grpc::Status status = refit(bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(status.error_message(), HasSubstr("runs[1].template"));
  bad.mutable_runs(1)->set_template_("bert-base");
  bad.mutable_runs(1)->set_measured_peak_gb(-1);
  status = refit(bad, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(refit(dry, &response).ok());
  EXPECT_EQ(response.runs_used(), 187);

  // A refit with nothing new (no run given, or only runs stored already)
  // stores no factor set: fs-1 stays current.
  auto shipped = LoadRunsJsonl(kRoot + "/data/memory-runs.jsonl");
  ASSERT_TRUE(shipped.ok()) << shipped.status();
  for (int given : {0, 1}) {
    v1::RefitRequest nothing_new;
    if (given == 1) *nothing_new.add_runs() = shipped->front();
    ASSERT_TRUE(refit(nothing_new, &response).ok());
    EXPECT_FALSE(response.stored());
    EXPECT_FALSE(response.promoted());
    EXPECT_EQ(response.runs_imported(), 0);
    EXPECT_EQ(response.factor_set().version(), "fs-1");
    EXPECT_EQ(response.previous_version(), "fs-1");
    EXPECT_THAT(response.reason(),
                HasSubstr(absl::StrCat(
                    "nothing new to fit: no run imported (", given,
                    " given, every one stored already) and the stored runs "
                    "are those fs-1 was fitted on; no factor set stored, fs-1 "
                    "stays current")));
  }
  EXPECT_EQ(version_answering(), "fs-1");

  // A forced refit importing a run not stored yet (our harness's H200
  // measurement, data/harness-runs.jsonl's first row) becomes current and
  // answers name it.
  auto harness = LoadRunsJsonl(kRoot + "/data/harness-runs.jsonl");
  ASSERT_TRUE(harness.ok()) << harness.status();
  v1::RefitRequest forced;
  forced.set_force(true);
  *forced.add_runs() = harness->front();
  ASSERT_TRUE(refit(forced, &response).ok());
  EXPECT_TRUE(response.stored());
  EXPECT_TRUE(response.promoted());
  EXPECT_EQ(response.runs_imported(), 1);
  EXPECT_EQ(response.runs_used(), 188);
  EXPECT_EQ(response.factor_set().version(), "fs-2");
  EXPECT_EQ(response.previous_version(), "fs-1");
  EXPECT_EQ(version_answering(), "fs-2");

  {
    grpc::ClientContext context;
    v1::ListFactorSetsResponse list;
    ASSERT_TRUE(stub->calibration->ListFactorSets(&context, {}, &list).ok());
    ASSERT_EQ(list.factor_sets_size(), 2);
    EXPECT_EQ(list.current_version(), "fs-2");
    EXPECT_TRUE(list.factor_sets(1).current());
    EXPECT_GT(list.factor_sets(0).heldout_median_abs_err(), 0);
  }
  {
    grpc::ClientContext context;
    v1::PromoteFactorSetRequest rollback;
    rollback.set_rollback(true);
    v1::PromoteFactorSetResponse promoted;
    ASSERT_TRUE(
        stub->calibration->PromoteFactorSet(&context, rollback, &promoted)
            .ok());
    EXPECT_EQ(promoted.current_version(), "fs-1");
    EXPECT_EQ(promoted.previous_version(), "fs-2");
  }
  EXPECT_EQ(version_answering(), "fs-1");
  {
    // A second rollback walks further back, never forward to fs-2: before
    // fs-1 nothing was current.
    grpc::ClientContext context;
    v1::PromoteFactorSetRequest rollback;
    rollback.set_rollback(true);
    v1::PromoteFactorSetResponse promoted;
    const grpc::Status again =
        stub->calibration->PromoteFactorSet(&context, rollback, &promoted);
    EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(again.error_message(), HasSubstr("nothing to roll back to"));
  }
  EXPECT_EQ(version_answering(), "fs-1");
  {
    grpc::ClientContext context;
    v1::PromoteFactorSetRequest promote;
    promote.set_version("fs-9");
    v1::PromoteFactorSetResponse promoted;
    EXPECT_EQ(stub->calibration->PromoteFactorSet(&context, promote, &promoted)
                  .error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  const std::string metrics = HttpGet((*app)->http_port(), "/metrics");
  EXPECT_THAT(metrics,
              HasSubstr("headroom_factor_set_info{factor_set=\"fs-1\"} 1"));
  EXPECT_THAT(metrics,
              HasSubstr("headroom_factor_set_info{factor_set=\"fs-2\"} 0"));
  EXPECT_THAT(
      metrics,
      HasSubstr("headroom_calibration_said_fits_but_oom{factor_set=\"fs-2\"}"));
  EXPECT_THAT(metrics, HasSubstr("headroom_calibration_median_abs_error{column="
                                 "\"ours_heldout\",factor_set=\"fs-1\"}"));
}

// A forced refit with nothing new still fits and stores a set (RefitRequest
// .force); the same refit without force then stores nothing.
TEST(PlannerRefitTest, ForcedRefitWithNothingNewStillStoresASet) {
  auto app = PlannerApp::Start(TestPlannerConfig());
  ASSERT_TRUE(app.ok()) << app.status();
  auto stub = std::make_unique<testing::PlannerStubs>(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  auto refit = [&](bool force, v1::RefitResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(30));
    v1::RefitRequest request;
    request.set_force(force);
    return stub->calibration->Refit(&context, request, out);
  };
  v1::RefitResponse response;
  ASSERT_TRUE(refit(/*force=*/true, &response).ok());
  EXPECT_TRUE(response.stored());
  EXPECT_TRUE(response.promoted());
  EXPECT_EQ(response.runs_imported(), 0);
  EXPECT_EQ(response.factor_set().version(), "fs-2");
  ASSERT_TRUE(refit(/*force=*/false, &response).ok());
  EXPECT_FALSE(response.stored());
  EXPECT_EQ(response.factor_set().version(), "fs-2");
  EXPECT_THAT(response.reason(), HasSubstr("fs-2 stays current"));
  grpc::ClientContext context;
  v1::ListFactorSetsResponse list;
  ASSERT_TRUE(stub->calibration->ListFactorSets(&context, {}, &list).ok());
  EXPECT_EQ(list.factor_sets_size(), 2);
}

// A probe no connected worker can take is queued, and the answer says why.
TEST(PlannerFleetTest, SubmitProbeSaysWhenNoWorkerCanTakeIt) {
  auto app = PlannerApp::Start(TestPlannerConfig());
  ASSERT_TRUE(app.ok()) << app.status();
  auto fleet = v1::Fleet::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  const auto submit = [&](v1::SubmitProbeRequest request) {
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::SubmitProbeResponse response;
    EXPECT_TRUE(fleet->SubmitProbe(&context, request, &response).ok());
    EXPECT_EQ(response.probe().state(), v1::Probe::QUEUED);
    return response.warning();
  };
  v1::SubmitProbeRequest by_gpu;
  by_gpu.set_gpu("H100");
  EXPECT_THAT(submit(by_gpu),
              HasSubstr("no worker is connected; the probe stays queued"));
  v1::SubmitProbeRequest pinned;
  pinned.set_worker("nosuch");
  EXPECT_THAT(submit(pinned), HasSubstr("no worker is connected"));
}

// Cancelling a queued probe succeeds once; the second time it has already
// finished (CANCELLED) and the call says so instead of reporting success.
TEST(PlannerFleetTest, CancelOfAFinishedProbeIsRefused) {
  auto app = PlannerApp::Start(TestPlannerConfig());
  ASSERT_TRUE(app.ok()) << app.status();
  auto fleet = v1::Fleet::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  v1::SubmitProbeRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.add_batches(8);
  request.set_gpu("H100");
  v1::SubmitProbeResponse submitted;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(fleet->SubmitProbe(&context, request, &submitted).ok());
  }
  const auto cancel = [&](v1::CancelProbeResponse* out) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    v1::CancelProbeRequest cancel_request;
    cancel_request.set_id(submitted.probe().id());
    return fleet->CancelProbe(&context, cancel_request, out);
  };
  v1::CancelProbeResponse first;
  ASSERT_TRUE(cancel(&first).ok());
  EXPECT_EQ(first.probe().state(), v1::Probe::CANCELLED);
  v1::CancelProbeResponse second;
  const grpc::Status again = cancel(&second);
  EXPECT_EQ(again.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(again.error_message(),
            "probe " + submitted.probe().id() +
                " already finished (CANCELLED); only a QUEUED or RUNNING "
                "probe can be cancelled");
}

// A queued probe no connected worker can take fails once its expiry
// passes, saying why, and its watcher gets that final state; an expiry past
// 30 days is refused.
TEST(PlannerFleetTest, QueuedProbeFailsWhenItsExpiryPasses) {
  auto app = PlannerApp::Start(TestPlannerConfig());
  ASSERT_TRUE(app.ok()) << app.status();
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials());
  auto fleet = v1::Fleet::NewStub(channel);
  const auto deadline = [] {
    return std::chrono::system_clock::now() + std::chrono::seconds(20);
  };

  // A worker with an L4 only.
  grpc::ClientContext connect_context;
  connect_context.set_deadline(deadline());
  auto worker = fleet->Connect(&connect_context);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id("w-l4");
  hello.mutable_hello()->set_hostname("w-l4");
  v1::GpuDevice* gpu = hello.mutable_hello()->add_gpus();
  gpu->set_name("L4");
  gpu->set_memory_bytes(24ull << 30);
  gpu->set_simulated(true);
  hello.mutable_hello()->add_executors("sim");
  ASSERT_TRUE(worker->Write(hello));
  v1::PlannerMessage welcome;
  ASSERT_TRUE(worker->Read(&welcome));
  ASSERT_TRUE(welcome.has_welcome());

  v1::SubmitProbeRequest request;
  request.mutable_model()->set_template_("bert-base");
  request.add_batches(8);
  request.set_gpu("H100");
  request.set_expires_s(2592001);
  {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    v1::SubmitProbeResponse response;
    const grpc::Status refused =
        fleet->SubmitProbe(&context, request, &response);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(refused.error_message(),
                HasSubstr("expires_s = 2592001 is out of range; allowed "
                          "0..2592000"));
  }
  request.set_expires_s(1);
  v1::SubmitProbeResponse submitted;
  {
    grpc::ClientContext context;
    context.set_deadline(deadline());
    ASSERT_TRUE(fleet->SubmitProbe(&context, request, &submitted).ok());
  }
  EXPECT_EQ(submitted.probe().state(), v1::Probe::QUEUED);
  const std::string why = "no connected worker has a H100 (connected: L4)";
  EXPECT_EQ(submitted.warning(),
            why + "; the probe stays queued until one connects");

  // Watched until the stream ends (bounded by the call's deadline).
  grpc::ClientContext watch_context;
  watch_context.set_deadline(deadline());
  v1::WatchProbeRequest watch;
  watch.set_id(submitted.probe().id());
  watch.set_follow(true);
  auto events = fleet->WatchProbe(&watch_context, watch);
  v1::Probe last;
  for (v1::ProbeEvent event; events->Read(&event);) {
    if (event.has_probe()) last = event.probe();
  }
  EXPECT_TRUE(events->Finish().ok());
  EXPECT_EQ(last.state(), v1::Probe::FAILED);
  EXPECT_EQ(last.error(),
            "expired: queued longer than 1 s; no connected worker could take "
            "it (" +
                why + ")");
  EXPECT_EQ(last.attempts(), 0u);
  {
    // Cancelling the failed probe cancels nothing: FAILED_PRECONDITION
    // naming its final state, and the probe stays FAILED.
    grpc::ClientContext context;
    context.set_deadline(deadline());
    v1::CancelProbeRequest cancel;
    cancel.set_id(submitted.probe().id());
    v1::CancelProbeResponse cancelled;
    const grpc::Status refused =
        fleet->CancelProbe(&context, cancel, &cancelled);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(refused.error_message(),
                HasSubstr("probe " + submitted.probe().id() +
                          " already finished (FAILED)"));
  }

  worker->WritesDone();
  connect_context.TryCancel();
  (void)worker->Finish();
}

// The real binary: starts on port 0 and exits cleanly on SIGTERM.
TEST(PlannerBinaryTest, ShutsDownOnSigterm) {
  const std::string db =
      ::testing::TempDir() + "/sigterm-" + std::to_string(getpid()) + ".db";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string models = "--models_dir=" + kRoot + "/models";
    const std::string runs = "--runs=" + kRoot + "/data/memory-runs.jsonl";
    const std::string energy =
        "--energy_curves=" + kRoot + "/data/energy-curves.json";
    const std::string db_flag = "--db=" + db;
    execl(HEADROOM_PLANNER_BIN, HEADROOM_PLANNER_BIN, "--listen=127.0.0.1:0",
          "--http_listen=", models.c_str(), runs.c_str(), energy.c_str(),
          db_flag.c_str(), "--log_level=warn", static_cast<char*>(nullptr));
    _exit(127);
  }
  // Wait (bounded) until the database holds a factor set, i.e. it is up.
  bool up = false;
  for (int i = 0; i < 200 && !up; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    up = std::filesystem::exists(db);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ASSERT_TRUE(up);
  ASSERT_EQ(kill(pid, SIGTERM), 0);
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 200 && !exited; ++i) {
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!exited) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  EXPECT_TRUE(exited);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  RemoveSqliteFiles(db);
}

}  // namespace
}  // namespace headroom
