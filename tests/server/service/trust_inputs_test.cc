// The attacks on stored state issue 19 found, each against a real planner
// (PlannerApp on 127.0.0.1 port 0): every one now gets a named error, stores
// nothing, and leaves the planner serving and its listings working.

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/microbatch/cache_key.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "server/service/planner_app.h"
#include "server/store/sqlite_store.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/sqlite_files.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::headroom::testing::TestPlannerConfig;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kRoot = HEADROOM_SOURCE_DIR;

std::chrono::system_clock::time_point In(int seconds) {
  return std::chrono::system_clock::now() + std::chrono::seconds(seconds);
}

// A planner of its own per test, on a SQLite file the test may also open.
class TrustInputsTest : public ::testing::Test {
 protected:
  void Start(PlannerConfig config = TestPlannerConfig()) {
    db_ = ::testing::TempDir() + "/trust-" + std::to_string(getpid()) + "-" +
          ::testing::UnitTest::GetInstance()->current_test_info()->name() +
          ".db";
    std::filesystem::remove(db_);
    config.db_path = db_;
    config.http_listen = "";
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = std::move(*app);
    auto channel =
        grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                            grpc::InsecureChannelCredentials());
    planner_ = std::make_unique<testing::PlannerStubs>(channel);
    fleet_ = v1::Fleet::NewStub(channel);
  }

  void TearDown() override {
    app_.reset();
    RemoveSqliteFiles(db_);
  }

  // Ping and a CheckFit both answer; returns the factor set answering.
  std::string ExpectServing() {
    grpc::ClientContext ping_context;
    ping_context.set_deadline(In(10));
    v1::PingResponse pong;
    EXPECT_TRUE(planner_->fit->Ping(&ping_context, {}, &pong).ok());
    grpc::ClientContext context;
    context.set_deadline(In(30));
    v1::CheckFitRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    request.add_targets()->set_gpu("L4");
    v1::CheckFitResponse response;
    EXPECT_TRUE(planner_->fit->CheckFit(&context, request, &response).ok());
    return response.factor_set_version();
  }

  v1::EstimateEnergyResponse Estimate() {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::EstimateEnergyRequest request;
    request.set_params_b(7);
    request.set_gpu("RTX 5090");
    request.set_quant("nf4");
    v1::EstimateEnergyResponse response;
    EXPECT_TRUE(
        planner_->energy->EstimateEnergy(&context, request, &response).ok());
    return response;
  }

  v1::ListEnergyCurveSetsResponse ListCurves(int page_size = 0,
                                             const std::string& token = "",
                                             grpc::Status* status = nullptr) {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::ListEnergyCurveSetsRequest request;
    request.set_page_size(page_size);
    request.set_page_token(token);
    v1::ListEnergyCurveSetsResponse response;
    const grpc::Status got =
        planner_->energy->ListEnergyCurveSets(&context, request, &response);
    if (status != nullptr) {
      *status = got;
    } else {
      EXPECT_TRUE(got.ok()) << got.error_message();
    }
    return response;
  }

  grpc::Status PromoteCurves(const v1::PromoteEnergyCurveSetRequest& request,
                             v1::PromoteEnergyCurveSetResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    return planner_->energy->PromoteEnergyCurveSet(&context, request, response);
  }

  std::string db_;
  std::unique_ptr<PlannerApp> app_;
  std::unique_ptr<testing::PlannerStubs> planner_;
  std::unique_ptr<v1::Fleet::Stub> fleet_;
};

// Blackwell NF4 at three sizes with fp16 partners: a plausible refit.
v1::RefitEnergyRequest PlausibleEnergyRuns() {
  v1::RefitEnergyRequest request;
  const double n[] = {1.1, 3.0, 7.0};
  const double fp16[] = {1659.0, 3382.64, 5508.56};
  const double de[] = {26.49, 11.74, -11.45};
  const char* model[] = {"TinyLlama-1.1B", "Qwen2.5-3B", "Qwen2-7B"};
  for (int i = 0; i < 3; ++i) {
    for (int q = 0; q < 2; ++q) {
      v1::EnergyRun* run = request.add_runs();
      run->set_model(model[i]);
      run->set_params_b(n[i]);
      run->set_gpu("RTX 5090");
      run->set_quant(q ? "nf4" : "fp16");
      run->set_tokens_generated(2000);
      run->set_energy_j(2 * fp16[i] * (q ? 1 + de[i] / 100 : 1));
      run->set_idle_w(40);
      run->set_window_s(10);
    }
  }
  return request;
}

// RefitEnergy once took 1e300 J and made it current (answers of 1e298 J),
// with no way back. Now: INVALID_ARGUMENT naming the field and its range,
// nothing stored; a plausible refit is stored and can be rolled back.
TEST_F(TrustInputsTest, EnergyRefitRefusesImplausibleRunsAndRollsBack) {
  Start();
  const v1::EstimateEnergyResponse before = Estimate();
  EXPECT_EQ(before.curves_version(), "ec-1");

  v1::RefitEnergyRequest huge = PlausibleEnergyRuns();
  huge.mutable_runs(1)->set_energy_j(1e300);
  v1::RefitEnergyResponse refit;
  {
    grpc::ClientContext context;
    context.set_deadline(In(30));
    const grpc::Status status =
        planner_->energy->RefitEnergy(&context, huge, &refit);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                AllOf(HasSubstr("runs[1] (TinyLlama-1.1B)"),
                      HasSubstr("energy_j = 1e+300 is out of range; allowed "
                                "(0, 1.728e+08] J")));
  }
  EXPECT_EQ(ListCurves().curve_sets_size(), 1);
  EXPECT_EQ(Estimate().quant_j_per_1k(), before.quant_j_per_1k());

  // Three sizes cannot hold one out: the promotion rule keeps ec-1 (the
  // set is stored as ec-2 all the same), and force makes it current.
  {
    grpc::ClientContext context;
    context.set_deadline(In(30));
    const grpc::Status status =
        planner_->energy->RefitEnergy(&context, PlausibleEnergyRuns(), &refit);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  EXPECT_EQ(refit.curve_set().version(), "ec-2");
  EXPECT_FALSE(refit.promoted());
  EXPECT_THAT(refit.promotion_reason(),
              HasSubstr("too few points to hold one out"));
  EXPECT_EQ(refit.current_version(), "ec-1");
  EXPECT_EQ(Estimate().curves_version(), "ec-1");
  {
    v1::PromoteEnergyCurveSetRequest promote;
    promote.set_version("ec-2");
    v1::PromoteEnergyCurveSetResponse promoted;
    grpc::ClientContext context;
    context.set_deadline(In(30));
    ASSERT_TRUE(
        planner_->energy->PromoteEnergyCurveSet(&context, promote, &promoted)
            .ok());
  }
  EXPECT_EQ(Estimate().curves_version(), "ec-2");

  // Listing pages in storage order, the current one marked.
  v1::ListEnergyCurveSetsResponse first = ListCurves(1);
  ASSERT_EQ(first.curve_sets_size(), 1);
  EXPECT_EQ(first.curve_sets(0).version(), "ec-1");
  EXPECT_FALSE(first.curve_sets(0).current());
  EXPECT_EQ(first.current_version(), "ec-2");
  ASSERT_FALSE(first.next_page_token().empty());
  v1::ListEnergyCurveSetsResponse second =
      ListCurves(1, first.next_page_token());
  ASSERT_EQ(second.curve_sets_size(), 1);
  EXPECT_EQ(second.curve_sets(0).version(), "ec-2");
  EXPECT_TRUE(second.curve_sets(0).current());
  EXPECT_TRUE(second.next_page_token().empty());
  grpc::Status status;
  ListCurves(501, "", &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("page_size = 501 is out of range; allowed 1..500"));
  ListCurves(0, "not-a-token", &status);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("page_token"));

  // Roll back to the shipped curves; answers follow. Once more has nowhere
  // to go.
  v1::PromoteEnergyCurveSetRequest rollback;
  rollback.set_rollback(true);
  v1::PromoteEnergyCurveSetResponse promoted;
  status = PromoteCurves(rollback, &promoted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(promoted.current_version(), "ec-1");
  EXPECT_EQ(promoted.previous_version(), "ec-2");
  EXPECT_EQ(Estimate().curves_version(), "ec-1");
  EXPECT_EQ(Estimate().quant_j_per_1k(), before.quant_j_per_1k());
  status = PromoteCurves(rollback, &promoted);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(),
              HasSubstr("no energy curve set was current before ec-1"));
  v1::PromoteEnergyCurveSetRequest unknown;
  unknown.set_version("ec-9");
  EXPECT_EQ(PromoteCurves(unknown, &promoted).error_code(),
            grpc::StatusCode::NOT_FOUND);
  v1::PromoteEnergyCurveSetRequest again;
  again.set_version("ec-2");
  ASSERT_TRUE(PromoteCurves(again, &promoted).ok());
  EXPECT_EQ(Estimate().curves_version(), "ec-2");
  ExpectServing();
}

v1::AutotuneRecord ShippedRecord() {
  std::ifstream file(kRoot + "/data/microbatch-autotune.json");
  std::stringstream text;
  text << file.rdbuf();
  v1::AutotuneRecord record;
  EXPECT_TRUE(
      google::protobuf::util::JsonStringToMessage(text.str(), &record).ok());
  return record;
}

// PutAutotuneRecord once stored a selection that is not among its
// measurements, a negative budget, and overwrote a worker-measured record.
TEST_F(TrustInputsTest, AutotuneRecordsMustRecomputeAndWorkerRecordsStand) {
  Start();
  const auto put = [&](const v1::AutotuneRecord& record, bool force,
                       v1::PutAutotuneRecordResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::PutAutotuneRecordRequest request;
    *request.mutable_record() = record;
    request.set_force(force);
    return planner_->microbatch->PutAutotuneRecord(&context, request, response);
  };
  const auto stored = [&] {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::ListAutotuneRecordsResponse response;
    EXPECT_TRUE(
        planner_->microbatch->ListAutotuneRecords(&context, {}, &response)
            .ok());
    return response;
  };
  v1::PutAutotuneRecordResponse response;

  v1::AutotuneRecord forged = ShippedRecord();
  forged.mutable_selected()->set_microbatch(1000);
  grpc::Status status = put(forged, false, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr("selected (compiled microbatch 1000"),
                    HasSubstr("is not what max_batch selects")));

  forged = ShippedRecord();
  forged.set_budget_gb(-1);
  status = put(forged, false, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("budget_gb = -1 is out of range; allowed (0, "));

  forged = ShippedRecord();
  forged.mutable_measurements(0)->set_peak_gb(1e6);
  status = put(forged, false, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("measurements[0].peak_gb = 1e+06 is out of range"));

  forged = ShippedRecord();
  forged.set_note(std::string(1 << 20, 'n'));
  status = put(forged, false, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("record is "));
  EXPECT_LT(status.error_message().size(), 1000u);
  EXPECT_EQ(stored().entries_size(), 0);

  // A record a worker measured (stored as the fleet stores one).
  const v1::AutotuneRecord shipped = ShippedRecord();
  const std::string id = CacheKeyId(shipped.cache_key());
  {
    auto store = SqliteStore::Open(db_);
    ASSERT_TRUE(store.ok()) << store.status();
    v1::AutotuneRecord measured = shipped;
    measured.set_measured_by_probe("p-7");
    ASSERT_TRUE((*store)
                    ->PutAutotuneRecord(id, CacheKeyBytes(shipped.cache_key()),
                                        measured)
                    .ok());
  }
  v1::AutotuneRecord claimed = shipped;
  claimed.set_note("mine now");
  claimed.set_measured_by_probe("p-99");  // forged provenance is dropped
  status = put(claimed, false, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(),
              AllOf(HasSubstr(id), HasSubstr("probe p-7"), HasSubstr("force")));
  ASSERT_EQ(stored().entries_size(), 1);
  EXPECT_EQ(stored().entries(0).record().measured_by_probe(), "p-7");
  EXPECT_EQ(stored().entries(0).record().note(), shipped.note());

  // An admin's force replaces it; the put is not the worker's any more.
  status = put(claimed, true, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(response.replaced());
  ASSERT_EQ(stored().entries_size(), 1);
  EXPECT_EQ(stored().entries(0).record().note(), "mine now");
  EXPECT_TRUE(stored().entries(0).record().measured_by_probe().empty());
  // A client's record is replaced by another put without force.
  claimed.set_note("again");
  EXPECT_TRUE(put(claimed, false, &response).ok());
  ExpectServing();
}

// One SubmitDensityRuns with a 1 MB id, or two SubmitProbe with 3 MiB
// configs, once made RankDensity(use_stored) and ListProbes fail for
// everyone. Now each is refused with a short message and nothing stored.
TEST_F(TrustInputsTest, DensityRunsAndProbesAreBoundedAndListingsWork) {
  Start();
  v1::DensityRawRun run;
  run.set_id("mlp|float32|Tween|lr=1");
  run.set_arch("mlp");
  run.set_dtype("float32");
  run.set_mode("Tween");
  run.set_score(10);
  run.set_soft_acc(50);
  run.set_avg_accuracy(40);
  run.set_throughput(1000);
  run.set_availability(30);
  run.set_ram_kib(4);
  const auto submit = [&](const v1::DensityRawRun& r) {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::SubmitDensityRunsRequest request;
    *request.add_runs() = r;
    v1::SubmitDensityRunsResponse response;
    return planner_->density->SubmitDensityRuns(&context, request, &response);
  };
  v1::DensityRawRun huge = run;
  huge.set_id(std::string(1 << 20, 'i'));
  grpc::Status status = submit(huge);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("run 0.id is 1048576 bytes; allowed up to 256"));
  EXPECT_LT(status.error_message().size(), 1000u);
  v1::DensityRawRun percent = run;
  percent.set_availability(150);
  status = submit(percent);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("availability = 150 is out of range; allowed 0..100"));
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::RankDensityRequest rank;
    rank.set_use_stored(true);
    v1::RankDensityResponse ranked;
    status = planner_->density->RankDensity(&context, rank, &ranked);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(ranked.empty_reason(), "no runs to rank");
  }
  EXPECT_TRUE(submit(run).ok());

  const auto probe = [&](const v1::SubmitProbeRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::SubmitProbeResponse response;
    return fleet_->SubmitProbe(&context, request, &response);
  };
  v1::SubmitProbeRequest big;
  big.mutable_model()->set_hf_config(std::string(3 << 20, ' '));
  big.add_batches(8);
  big.set_gpu("L4");
  for (int i = 0; i < 2; ++i) {
    status = probe(big);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(),
                HasSubstr("a stored probe request allows up to 262144"));
  }
  v1::SubmitProbeRequest long_gpu;
  long_gpu.mutable_model()->set_template_("bert-base");
  long_gpu.add_batches(8);
  long_gpu.set_gpu(std::string(100000, 'g'));
  status = probe(long_gpu);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(),
              HasSubstr("gpu is 100000 bytes; allowed up to 256"));
  EXPECT_LT(status.error_message().size(), 1000u);
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::ListProbesResponse listed;
    status = fleet_->ListProbes(&context, {}, &listed);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(listed.probes_size(), 0);
  }
  ExpectServing();
}

// A Refit whose client got DEADLINE_EXCEEDED once still committed and
// promoted a new factor set. The hook holds the refit at its commit until
// the call is no longer live (a condition, polled in a bounded loop); the
// refit then stores nothing: no factor set, not its runs.
TEST_F(TrustInputsTest, RefitWhoseCallerGaveUpCommitsNothing) {
  std::atomic<int> commits{0};
  std::atomic<bool> saw_dead_call{false};
  PlannerConfig config = TestPlannerConfig();
  config.before_refit_commit = [&](const std::function<bool()>& live) {
    if (commits.fetch_add(1) > 0) return;  // only the first refit waits
    for (int i = 0; i < 6000 && live(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    saw_dead_call = !live();
  };
  Start(config);
  const auto refit = [&](const v1::RefitRequest& request, int deadline_ms,
                         v1::RefitResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(deadline_ms));
    return planner_->calibration->Refit(&context, request, response);
  };
  v1::RefitRequest forced;
  forced.set_force(true);
  v1::MeasuredRun* run = forced.add_runs();
  run->set_template_("bert-base");
  run->set_gpu("L4");
  run->set_batch(3);
  run->set_params(31120896);
  run->set_measured_peak_gb(1.01);
  v1::RefitResponse response;
  const grpc::Status gave_up = refit(forced, 300, &response);
  EXPECT_EQ(gave_up.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  // Refits run one at a time in order: this dry run answers only after the
  // abandoned one ended.
  v1::RefitRequest dry;
  dry.set_dry_run(true);
  ASSERT_TRUE(refit(dry, 60000, &response).ok());
  EXPECT_TRUE(saw_dead_call);
  EXPECT_EQ(response.runs_used(), 187);  // the import was not stored
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::ListFactorSetsResponse list;
    ASSERT_TRUE(
        planner_->calibration->ListFactorSets(&context, {}, &list).ok());
    EXPECT_EQ(list.factor_sets_size(), 1);
    EXPECT_EQ(list.current_version(), "fs-1");
  }
  EXPECT_EQ(ExpectServing(), "fs-1");

  // A caller that waits gets its refit committed.
  const grpc::Status waited = refit(forced, 60000, &response);
  ASSERT_TRUE(waited.ok()) << waited.error_message();
  EXPECT_EQ(response.factor_set().version(), "fs-2");
  EXPECT_EQ(response.runs_imported(), 1);
  EXPECT_EQ(response.runs_used(), 188);
  EXPECT_EQ(ExpectServing(), "fs-2");
}

// Issue 32: a Refit stored rows CheckFit refuses (4294967295 GPUs, an
// unknown parallel enum, params 1 for bert-base), SubmitProbe stored a
// spec whose Linear 2^32 -> 2^32 counted 0 parameters, and CheckFit said
// FITS for it. Each is now INVALID_ARGUMENT naming the row or layer and the
// field, and nothing is stored.
TEST_F(TrustInputsTest, ImportsAndProbesAreHeldToOneSetOfBounds) {
  Start();
  const auto refit = [&](const v1::MeasuredRun& run) {
    grpc::ClientContext context;
    context.set_deadline(In(30));
    v1::RefitRequest request;
    request.set_force(true);
    *request.add_runs() = run;
    v1::RefitResponse response;
    return planner_->calibration->Refit(&context, request, &response);
  };
  v1::MeasuredRun bert;
  bert.set_template_("bert-base");
  bert.set_gpu("L4");
  bert.set_batch(3);
  bert.set_params(31120896);
  bert.set_measured_peak_gb(1.01);
  struct Case {
    std::function<void(v1::MeasuredRun*)> edit;
    std::string says;
  };
  const std::vector<Case> cases = {
      {[](v1::MeasuredRun* r) { r->mutable_setup()->set_gpus(4294967295u); },
       "runs[0].setup.gpus = 4294967295 is invalid"},
      {[](v1::MeasuredRun* r) {
         r->mutable_setup()->set_parallel(
             static_cast<v1::TrainingSetup::Parallel>(99));
       },
       "runs[0].setup.parallel = 99 is invalid"},
      {[](v1::MeasuredRun* r) { r->set_params(1); },
       "runs[0].params = 1 is not the model's count: template 'bert-base' "
       "has 31120896 parameters"},
      {[](v1::MeasuredRun* r) { r->set_step_seconds(1e9); },
       "runs[0].step_seconds = 1e+09 is out of range; allowed (0, 86400] s"},
      {[](v1::MeasuredRun* r) { r->set_energy_j(1e300); },
       "runs[0].energy_j = 1e+300 is out of range"},
  };
  for (const Case& c : cases) {
    v1::MeasuredRun run = bert;
    c.edit(&run);
    const grpc::Status status = refit(run);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(c.says));
  }
  EXPECT_EQ(ExpectServing(), "fs-1");

  // The inline spec of the finding, at SubmitProbe and at CheckFit.
  v1::ModelSpec wide;
  wide.set_name("wide");
  wide.set_positions(1);
  v1::Layer& fc = *wide.add_layers();
  fc.set_name("fc1");
  fc.mutable_linear()->set_in_features(uint64_t{1} << 32);
  fc.mutable_linear()->set_out_features(uint64_t{1} << 32);
  const std::string overflow =
      "layer 'fc1' (Linear): 4294967296 x 4294967296 overflows the parameter "
      "count";
  v1::SubmitProbeRequest probe;
  *probe.mutable_model()->mutable_spec() = wide;
  probe.add_batches(1);
  probe.set_gpu("H200");
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::SubmitProbeResponse response;
    const grpc::Status status = fleet_->SubmitProbe(&context, probe, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(overflow));
  }
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::CheckFitRequest request;
    *request.mutable_model()->mutable_spec() = wide;
    request.add_batches(1);
    request.add_targets()->set_gpu("H200");
    v1::CheckFitResponse response;
    const grpc::Status status =
        planner_->fit->CheckFit(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr(overflow));
  }
  // A probe's setup is held to what CheckFit reads.
  v1::SubmitProbeRequest bad_setup;
  bad_setup.mutable_model()->set_template_("bert-base");
  bad_setup.add_batches(8);
  bad_setup.set_gpu("L4");
  bad_setup.mutable_setup()->set_precision(
      static_cast<v1::TrainingSetup::Precision>(42));
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::SubmitProbeResponse response;
    const grpc::Status status =
        fleet_->SubmitProbe(&context, bad_setup, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("setup.precision = 42"));
  }
  {
    grpc::ClientContext context;
    context.set_deadline(In(10));
    v1::ListProbesResponse listed;
    ASSERT_TRUE(fleet_->ListProbes(&context, {}, &listed).ok());
    EXPECT_EQ(listed.probes_size(), 0);
  }
  ExpectServing();
}

}  // namespace
}  // namespace headroom
