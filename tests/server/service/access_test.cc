// Who may call what: the tokens file, the role of every method, the
// decisions, the loopback rule, and a TLS + mTLS + tokens planner on
// loopback refusing what the roles refuse (with nothing stored).

#include "server/service/access.h"

#include <httplib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/client_channel.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "headroom/v1/fleet.grpc.pb.h"
#include "headroom/v1/planner.grpc.pb.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/support/child_process.h"
#include "tests/support/planner_stubs.h"
#include "tests/support/test_planner.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;

constexpr char kAdminHash[] =
    "8c6976e5b5410415bde908bd4dee15dfb167a9c873fc4bb8a81f6f2ab448a918";  // admin

TEST(AccessTest, TokensFileLinesAreParsedAndBadOnesNamed) {
  auto tokens = ParseTokens(
      "# comment\n\nalice admin " + std::string(kAdminHash) +
          "\nbob reader "
          "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n",
      "tokens");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  ASSERT_EQ(tokens->size(), 2u);
  EXPECT_EQ(tokens->at(kAdminHash).name, "alice");
  EXPECT_EQ(tokens->at(kAdminHash).role, Role::kAdmin);
  // Upper-case hex is read as lower case.
  EXPECT_EQ(tokens->at(std::string(64, 'a')).role, Role::kReader);

  // A worker token: its name is the worker id it connects as.
  auto workers =
      ParseTokens("gpu-node-7 worker " + std::string(kAdminHash), "tokens");
  ASSERT_TRUE(workers.ok()) << workers.status();
  EXPECT_EQ(workers->at(kAdminHash).role, Role::kWorker);
  EXPECT_EQ(workers->at(kAdminHash).name, "gpu-node-7");

  const std::string hash(kAdminHash);
  const std::pair<std::string, std::string> bad[] = {
      {"alice admin", "line 1: has 2 fields"},
      {"alice root " + hash,
       "role = root; allowed reader, operator, admin, worker"},
      {"w@host worker " + hash,
       "a worker token's name is the worker id it connects as; w@host has "
       "'@'"},
      {"alice admin secret-token", "must be 64 hex digits"},
      {"al/ce admin " + hash, "name must be"},
      {"a admin " + hash + "\na reader " + std::string(64, 'b'),
       "line 2: name a is also on line 1"},
      {"a admin " + hash + "\nb reader " + hash, "same token hash"},
  };
  for (const auto& [text, message] : bad) {
    auto parsed = ParseTokens(text, "tokens.txt");
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("tokens.txt"));
    EXPECT_THAT(parsed.status().message(), HasSubstr(message)) << text;
  }
}

// The role each method of the API needs, as the issue on trust says; a
// method added to a proto fails here until its need is decided.
TEST(AccessTest, EveryMethodOfTheApiHasTheNeedItsDomainSays) {
  const std::map<std::string, Need> expected = {
      {"/headroom.v1.Fit/CheckFit", Need::kRead},
      {"/headroom.v1.Calibration/GetCalibration", Need::kRead},
      {"/headroom.v1.Fit/Ping", Need::kAnyone},
      {"/headroom.v1.Calibration/Refit", Need::kAdmin},
      {"/headroom.v1.Calibration/ListFactorSets", Need::kRead},
      {"/headroom.v1.Calibration/PromoteFactorSet", Need::kAdmin},
      {"/headroom.v1.Density/RankDensity", Need::kRead},
      {"/headroom.v1.Density/SubmitDensityRuns", Need::kOperator},
      {"/headroom.v1.Energy/EstimateEnergy", Need::kRead},
      {"/headroom.v1.Energy/TrainEnergy", Need::kRead},
      {"/headroom.v1.Energy/PlotEnergy", Need::kRead},
      {"/headroom.v1.Energy/RefitEnergy", Need::kAdmin},
      {"/headroom.v1.Energy/ListEnergyCurveSets", Need::kRead},
      {"/headroom.v1.Energy/PromoteEnergyCurveSet", Need::kAdmin},
      {"/headroom.v1.Microbatch/PlanMicrobatch", Need::kRead},
      {"/headroom.v1.Microbatch/PutAutotuneRecord", Need::kOperator},
      {"/headroom.v1.Microbatch/ListAutotuneRecords", Need::kRead},
      {"/headroom.v1.Microbatch/DropAutotuneRecord", Need::kOperator},
      {"/headroom.v1.Fleet/Connect", Need::kWorker},
      {"/headroom.v1.Fleet/ListWorkers", Need::kRead},
      {"/headroom.v1.Fleet/SubmitProbe", Need::kOperator},
      {"/headroom.v1.Fleet/SubmitAutotune", Need::kOperator},
      {"/headroom.v1.Fleet/SubmitEnergyProbe", Need::kOperator},
      {"/headroom.v1.Fleet/WatchProbe", Need::kRead},
      {"/headroom.v1.Fleet/CancelProbe", Need::kOperator},
      {"/headroom.v1.Fleet/ListProbes", Need::kRead},
  };
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  int methods = 0;
  for (const char* service :
       {"headroom.v1.Fit", "headroom.v1.Calibration", "headroom.v1.Energy",
        "headroom.v1.Density", "headroom.v1.Microbatch", "headroom.v1.Fleet"}) {
    const google::protobuf::ServiceDescriptor* descriptor =
        pool->FindServiceByName(service);
    ASSERT_NE(descriptor, nullptr) << service;
    for (int i = 0; i < descriptor->method_count(); ++i) {
      const std::string name =
          "/" + std::string(service) + "/" + descriptor->method(i)->name();
      ++methods;
      auto it = expected.find(name);
      ASSERT_NE(it, expected.end()) << name << ": decide its role here";
      EXPECT_EQ(NeedOf(name), it->second) << name;
    }
  }
  EXPECT_GE(methods, 21);
  EXPECT_EQ(NeedOf("/headroom.v1.Fit/MadeUp"), Need::kAdmin);
  EXPECT_TRUE(Mutates("/headroom.v1.Calibration/Refit"));
  EXPECT_FALSE(Mutates("/headroom.v1.Fit/CheckFit"));
}

Caller TokenCaller(Role role) {
  Caller caller;
  caller.token_role = role;
  caller.token_name = "t";
  caller.identity = "token:t";
  return caller;
}

TEST(AccessTest, DecisionsFollowTheRoles) {
  const std::string refit = "/headroom.v1.Calibration/Refit";
  const std::string probe = "/headroom.v1.Fleet/SubmitProbe";
  const std::string fit = "/headroom.v1.Fit/CheckFit";
  const std::string connect = "/headroom.v1.Fleet/Connect";
  std::map<std::string, TokenEntry> tokens = {
      {std::string(kAdminHash), {"alice", Role::kAdmin}}};

  // Open: no TLS, no tokens (loopback only): everyone may do everything.
  Access open({}, {});
  EXPECT_TRUE(open.open());
  EXPECT_TRUE(open.Allow(Caller{}, refit).ok());

  Access with_tokens({"tokens", false, true, false}, tokens);
  EXPECT_TRUE(with_tokens.Allow(Caller{}, fit).ok());  // reads open
  EXPECT_TRUE(with_tokens.Allow(Caller{}, "/headroom.v1.Fit/Ping").ok());
  absl::Status anonymous = with_tokens.Allow(Caller{}, refit);
  EXPECT_EQ(anonymous.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(anonymous.message(), HasSubstr("role admin"));
  absl::Status reader = with_tokens.Allow(TokenCaller(Role::kReader), probe);
  EXPECT_EQ(reader.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(reader.message(), HasSubstr("needs role operator"));
  EXPECT_THAT(reader.message(), HasSubstr("has role reader"));
  EXPECT_EQ(with_tokens.Allow(TokenCaller(Role::kOperator), refit).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(with_tokens.Allow(TokenCaller(Role::kOperator), probe).ok());
  EXPECT_TRUE(with_tokens.Allow(TokenCaller(Role::kAdmin), refit).ok());
  Caller unknown;
  unknown.presented_unknown_token = true;
  EXPECT_EQ(with_tokens.Allow(unknown, fit).code(),
            absl::StatusCode::kUnauthenticated);
  // A worker: a certificate issued for workers, or a worker token; each
  // bound to the one worker it names.
  Caller worker;
  worker.has_certificate = true;
  worker.worker_certificate = true;
  worker.certificate_name = "w1";
  worker.identity = "cert:w1";
  EXPECT_TRUE(with_tokens.Allow(worker, connect).ok());
  EXPECT_EQ(worker.WorkerIdentity(), "cert:w1");
  const Caller worker_token = TokenCaller(Role::kWorker);
  EXPECT_TRUE(with_tokens.Allow(worker_token, connect).ok());
  EXPECT_EQ(worker_token.WorkerIdentity(), "token:t");
  // Not workers: an operator's or admin's token, any other certificate.
  for (Role role : {Role::kReader, Role::kOperator, Role::kAdmin}) {
    absl::Status refused = with_tokens.Allow(TokenCaller(role), connect);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(refused.message(), HasSubstr("needs a worker credential"));
    EXPECT_THAT(refused.message(), HasSubstr(kWorkerKeyUsageOid));
    EXPECT_THAT(refused.message(),
                HasSubstr(absl::StrCat("token t has role ", RoleName(role))));
    EXPECT_EQ(TokenCaller(role).WorkerIdentity(), "");
  }
  Caller operator_certificate;
  operator_certificate.has_certificate = true;
  operator_certificate.certificate_name = "operator";
  operator_certificate.identity = "cert:operator";
  absl::Status not_issued = with_tokens.Allow(operator_certificate, connect);
  EXPECT_EQ(not_issued.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(not_issued.message(),
              HasSubstr("the client certificate (CN operator) is not issued "
                        "for workers"));
  EXPECT_EQ(with_tokens.Allow(Caller{}, connect).code(),
            absl::StatusCode::kUnauthenticated);
  // A worker certificate and a worker token naming two workers: neither.
  Caller both = worker;
  both.token_role = Role::kWorker;
  both.token_name = "w2";
  EXPECT_THAT(with_tokens.Allow(both, connect).message(),
              HasSubstr("names worker w1 and the worker token worker w2"));
  both.token_name = "w1";
  EXPECT_TRUE(with_tokens.Allow(both, connect).ok());
  // A certificate alone does not mutate, nor does a worker token.
  EXPECT_EQ(with_tokens.Allow(worker, probe).code(),
            absl::StatusCode::kUnauthenticated);
  absl::Status worker_probe = with_tokens.Allow(worker_token, probe);
  EXPECT_EQ(worker_probe.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(worker_probe.message(),
              HasSubstr("needs role operator; token t has role worker"));
  EXPECT_FALSE(with_tokens.Holds(worker_token, Role::kReader));

  Access reads_too({"tokens", true, true, false}, tokens);
  EXPECT_EQ(reads_too.Allow(Caller{}, fit).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(reads_too.Allow(TokenCaller(Role::kReader), fit).ok());
  // A worker token only connects its worker.
  absl::Status worker_read = reads_too.Allow(worker_token, fit);
  EXPECT_EQ(worker_read.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(worker_read.message(), HasSubstr("token t has role worker"));
  // The HTTP port's reads follow the same rule.
  EXPECT_EQ(
      reads_too.AllowHttp(worker_token, "/calibration", Need::kRead).code(),
      absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(
      reads_too
          .AllowHttp(TokenCaller(Role::kReader), "/calibration", Need::kRead)
          .ok());

  // TLS without a tokens file: every mutating call refused, reads served,
  // workers with certificates connect.
  Access tls_only({"", false, true, true}, {});
  EXPECT_FALSE(tls_only.open());
  absl::Status refused = tls_only.Allow(TokenCaller(Role::kAdmin), refit);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(), HasSubstr("no --tokens_file"));
  EXPECT_TRUE(tls_only.Allow(Caller{}, fit).ok());
  EXPECT_TRUE(tls_only.Allow(worker, connect).ok());
  EXPECT_EQ(tls_only.Allow(operator_certificate, connect).code(),
            absl::StatusCode::kPermissionDenied);
  // Open: anyone connects, as any worker (loopback only).
  EXPECT_TRUE(open.Allow(Caller{}, connect).ok());
  EXPECT_TRUE(open.Allow(TokenCaller(Role::kOperator), connect).ok());
}

TEST(AccessTest, LoopbackAddresses) {
  for (const char* local : {"127.0.0.1:50051", "127.1.2.3:0", "localhost:9464",
                            "[::1]:50051", "unix:/run/headroom.sock"}) {
    EXPECT_TRUE(IsLoopbackListen(local)) << local;
  }
  for (const char* remote :
       {"0.0.0.0:50051", "[::]:50051", ":50051", "10.0.0.5:50051",
        "planner.example.com:443", "127.0.0.1.example.com:1", "[::1", "1"}) {
    EXPECT_FALSE(IsLoopbackListen(remote)) << remote;
  }
}

// One Fleet.Connect stream driven by a test, every read bounded by its
// deadline.
class WorkerConnection {
 public:
  explicit WorkerConnection(const std::shared_ptr<grpc::Channel>& channel)
      : stub_(v1::Fleet::NewStub(channel)) {
    context_.set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(30));
    stream_ = stub_->Connect(&context_);
  }
  // Sends a hello as `id`: true when welcomed.
  bool Hello(const std::string& id) {
    v1::WorkerMessage message;
    message.mutable_hello()->set_worker_id(id);
    message.mutable_hello()->add_executors("sim");
    if (!stream_->Write(message)) return false;
    v1::PlannerMessage answer;
    for (int i = 0; i < 100 && stream_->Read(&answer); ++i) {
      if (answer.has_welcome()) return true;
    }
    return false;
  }
  // The status the planner ended the stream with.
  grpc::Status End() {
    stream_->WritesDone();
    v1::PlannerMessage answer;
    for (int i = 0; i < 1000 && stream_->Read(&answer); ++i) {
    }
    return stream_->Finish();
  }

 private:
  std::unique_ptr<v1::Fleet::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<v1::WorkerMessage, v1::PlannerMessage>>
      stream_;
};

// A planner with TLS, client certificates and tokens (app_), and one with
// TLS and tokens but no client certificates (tokens_app_); certificates and
// tokens from scripts/dev-certs.sh.
class SecurePlannerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(std::filesystem::temp_directory_path() /
                           ("headroom-certs-" + std::to_string(getpid())));
    const std::string make = std::string(HEADROOM_SOURCE_DIR) +
                             "/scripts/dev-certs.sh " + *dir_ +
                             " --workers w1,w2,w3 2>/dev/null";
    ASSERT_EQ(std::system(make.c_str()), 0) << make;
    PlannerConfig config = testing::TestPlannerConfig();
    config.tls_cert = *dir_ + "/planner.pem";
    config.tls_key = *dir_ + "/planner-key.pem";
    config.tls_client_ca = *dir_ + "/ca.pem";
    config.tokens_file = *dir_ + "/tokens";
    auto app = PlannerApp::Start(config);
    ASSERT_TRUE(app.ok()) << app.status();
    app_ = app->release();
    config.tls_client_ca = "";
    config.http_listen = "";
    auto tokens_app = PlannerApp::Start(config);
    ASSERT_TRUE(tokens_app.ok()) << tokens_app.status();
    tokens_app_ = tokens_app->release();
  }
  static void TearDownTestSuite() {
    delete app_;
    app_ = nullptr;
    delete tokens_app_;
    tokens_app_ = nullptr;
    if (dir_ != nullptr) std::filesystem::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    ASSERT_NE(app_, nullptr);
    ASSERT_NE(tokens_app_, nullptr);
  }

  // A channel to `app` presenting the client certificate `certificate`
  // ("worker-w1", "operator"; "" for none) and the token in the file
  // `token` ("token-operator", "token-worker-w1"; "" for none).
  static std::shared_ptr<grpc::Channel> Dial(PlannerApp* app,
                                             const std::string& certificate,
                                             const std::string& token) {
    ChannelSecurity security;
    security.tls_ca = *dir_ + "/ca.pem";
    if (!certificate.empty()) {
      security.tls_cert = *dir_ + "/" + certificate + ".pem";
      security.tls_key = *dir_ + "/" + certificate + "-key.pem";
    }
    if (!token.empty()) security.token = Read(token);
    auto channel = OpenChannel("localhost:" + std::to_string(app->grpc_port()),
                               security, grpc::ChannelArguments());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return *channel;
  }

  static std::string Read(const std::string& name) {
    std::ifstream in(*dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    std::string value = text.str();
    while (!value.empty() && value.back() == '\n') value.pop_back();
    return value;
  }

  // An operator's client certificate and `token` ("" sends none).
  static std::shared_ptr<grpc::Channel> Channel(const std::string& token,
                                                bool certificate = true) {
    ChannelSecurity security;
    security.tls_ca = *dir_ + "/ca.pem";
    if (certificate) {
      security.tls_cert = *dir_ + "/operator.pem";
      security.tls_key = *dir_ + "/operator-key.pem";
    }
    security.token = token.empty() ? "" : Read("token-" + token);
    auto channel = OpenChannel("localhost:" + std::to_string(app_->grpc_port()),
                               security, grpc::ChannelArguments());
    EXPECT_TRUE(channel.ok()) << channel.status();
    return *channel;
  }

  // Calls `method` with an empty request: the status says whether the
  // call got past the access check (validation then fails it otherwise).
  static grpc::Status Empty(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& method) {
    grpc::GenericStub stub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::Slice nothing("");
    grpc::ByteBuffer request(&nothing, 1), response;
    std::promise<grpc::Status> done;
    stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                   [&](grpc::Status status) { done.set_value(status); });
    return done.get_future().get();
  }

  static PlannerApp* app_;
  static PlannerApp* tokens_app_;
  static std::string* dir_;
};

PlannerApp* SecurePlannerTest::app_ = nullptr;
PlannerApp* SecurePlannerTest::tokens_app_ = nullptr;
std::string* SecurePlannerTest::dir_ = nullptr;

// The attacks from the issue: anyone reaching the port promoted a factor
// set, forced a refit, cancelled probes, dropped or overwrote autotune
// records and queued GPU time. Every mutating method now needs its role.
TEST_F(SecurePlannerTest, EveryMutatingCallNeedsItsRoleAndNothingIsStored) {
  const auto anonymous = Channel("");
  const auto reader = Channel("reader");
  const auto operator_ = Channel("operator");
  const auto* pool = google::protobuf::DescriptorPool::generated_pool();
  int mutating = 0;
  for (const char* service :
       {"headroom.v1.Fit", "headroom.v1.Calibration", "headroom.v1.Energy",
        "headroom.v1.Density", "headroom.v1.Microbatch", "headroom.v1.Fleet"}) {
    const auto* descriptor = pool->FindServiceByName(service);
    for (int i = 0; i < descriptor->method_count(); ++i) {
      const std::string method =
          "/" + std::string(service) + "/" + descriptor->method(i)->name();
      const Need need = NeedOf(method);
      if (need == Need::kRead || need == Need::kAnyone) {
        const grpc::Status status = Empty(reader, method);
        EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
            << method;
        EXPECT_NE(status.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method;
        continue;
      }
      if (need == Need::kWorker) continue;  // the operator's certificate
      ++mutating;
      const grpc::Status none = Empty(anonymous, method);
      EXPECT_EQ(none.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << method << ": " << none.error_message();
      const grpc::Status read_only = Empty(reader, method);
      EXPECT_EQ(read_only.error_code(), grpc::StatusCode::PERMISSION_DENIED)
          << method;
      EXPECT_THAT(read_only.error_message(), HasSubstr("has role reader"));
      if (need == Need::kAdmin) {
        const grpc::Status op = Empty(operator_, method);
        EXPECT_EQ(op.error_code(), grpc::StatusCode::PERMISSION_DENIED)
            << method;
        EXPECT_THAT(op.error_message(), HasSubstr("needs role admin"));
      }
    }
  }
  EXPECT_GE(mutating, 9);

  // Real requests, refused alike; nothing of them is stored.
  auto planner = std::make_unique<testing::PlannerStubs>(reader);
  auto fleet = v1::Fleet::NewStub(anonymous);
  {
    grpc::ClientContext context;
    v1::RefitRequest request;
    request.set_force(true);
    v1::RefitResponse response;
    EXPECT_EQ(
        planner->calibration->Refit(&context, request, &response).error_code(),
        grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext context;
    v1::SubmitProbeRequest request;
    request.mutable_model()->set_template_("bert-base");
    request.add_batches(8);
    request.set_gpu("L4");
    request.set_repetitions(10);
    v1::SubmitProbeResponse response;
    EXPECT_EQ(fleet->SubmitProbe(&context, request, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  auto admin = std::make_unique<testing::PlannerStubs>(Channel("admin"));
  grpc::ClientContext sets_context;
  v1::ListFactorSetsResponse sets;
  ASSERT_TRUE(
      admin->calibration
          ->ListFactorSets(&sets_context, v1::ListFactorSetsRequest(), &sets)
          .ok());
  EXPECT_EQ(sets.factor_sets_size(), 1);
  grpc::ClientContext probes_context;
  v1::ListProbesResponse probes;
  ASSERT_TRUE(
      v1::Fleet::NewStub(Channel("operator"))
          ->ListProbes(&probes_context, v1::ListProbesRequest(), &probes)
          .ok());
  EXPECT_EQ(probes.probes_size(), 0);

  // The admin may.
  grpc::ClientContext promote_context;
  v1::PromoteFactorSetRequest promote;
  promote.set_version(sets.factor_sets(0).version());
  v1::PromoteFactorSetResponse promoted;
  EXPECT_TRUE(
      admin->calibration->PromoteFactorSet(&promote_context, promote, &promoted)
          .ok());
}

TEST_F(SecurePlannerTest, AuditLogsEveryMutatingCallAndRefusalWithItsCaller) {
  std::ostringstream log;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
  spdlog::default_logger()->sinks().push_back(sink);
  {
    grpc::ClientContext context;
    v1::DropAutotuneRecordRequest request;
    request.set_id("nosuch");
    v1::DropAutotuneRecordResponse response;
    v1::Microbatch::NewStub(Channel("reader"))
        ->DropAutotuneRecord(&context, request, &response);
  }
  {
    grpc::ClientContext context;
    v1::DropAutotuneRecordRequest request;
    request.set_id("nosuch");
    v1::DropAutotuneRecordResponse response;
    v1::Microbatch::NewStub(Channel("operator"))
        ->DropAutotuneRecord(&context, request, &response);
  }
  {
    grpc::ClientContext context;
    v1::CheckFitResponse response;
    v1::Fit::NewStub(Channel("reader"))
        ->CheckFit(&context, v1::CheckFitRequest(), &response);
  }
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.erase(std::find(sinks.begin(), sinks.end(), sink));
  const std::string text = log.str();
  EXPECT_THAT(text,
              HasSubstr("event=audit "
                        "method=/headroom.v1.Microbatch/DropAutotuneRecord "
                        "identity=cert:operator token:dev-reader "
                        "peer=ipv4:127.0.0.1:"));
  EXPECT_THAT(text, HasSubstr("outcome=PermissionDenied"));
  EXPECT_THAT(text, HasSubstr("identity=cert:operator token:dev-operator"));
  EXPECT_THAT(text, HasSubstr("outcome=NotFound"));
  // A read that is served is not audited.
  EXPECT_THAT(text,
              ::testing::Not(HasSubstr("method=/headroom.v1.Fit/CheckFit")));
}

// A worker's identity is its certificate's subject: a hello naming another
// id is refused, and only the same identity replaces a live connection.
TEST_F(SecurePlannerTest, AWorkersIdentityIsItsCertificate) {
  WorkerConnection impostor(Dial(app_, "worker-w1", ""));
  EXPECT_FALSE(impostor.Hello("w2"));
  const grpc::Status refused = impostor.End();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(), HasSubstr("w2"));

  WorkerConnection first(Dial(app_, "worker-w1", ""));
  ASSERT_TRUE(first.Hello("w1"));
  // The same certificate may replace its own connection (a reconnect).
  WorkerConnection second(Dial(app_, "worker-w1", ""));
  EXPECT_TRUE(second.Hello("w1"));
  EXPECT_EQ(first.End().error_code(), grpc::StatusCode::ABORTED);
  // Another certificate may not take the id, whatever its token.
  WorkerConnection other(Dial(app_, "operator", "token-admin"));
  EXPECT_FALSE(other.Hello("w1"));
  EXPECT_EQ(other.End().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  second.End();
}

// Issue 32: the dev CA's worker certificates carry Headroom's worker key
// usage; the operator's and the planner's do not.
TEST_F(SecurePlannerTest, WorkerCertificatesCarryTheWorkerKeyUsage) {
  EXPECT_TRUE(IssuedForWorkers(Read("worker-w1.pem")));
  EXPECT_TRUE(IssuedForWorkers(Read("worker-w2.pem")));
  EXPECT_FALSE(IssuedForWorkers(Read("operator.pem")));
  EXPECT_FALSE(IssuedForWorkers(Read("planner.pem")));
  EXPECT_FALSE(IssuedForWorkers(Read("ca.pem")));
  EXPECT_FALSE(IssuedForWorkers("-----BEGIN CERTIFICATE-----\nAAAA\n"));
  EXPECT_FALSE(IssuedForWorkers(""));
}

// Issue 32: the operator's CLI certificate registered as worker `operator`.
// Now a certificate the CA signed without the worker key usage is refused
// for Fleet.Connect, with or without the operator's token, naming what a
// worker needs; nothing is registered.
TEST_F(SecurePlannerTest, TheOperatorsCertificateIsNotAWorker) {
  for (const char* token : {"", "token-operator"}) {
    SCOPED_TRACE(token);
    WorkerConnection operator_(Dial(app_, "operator", token));
    EXPECT_FALSE(operator_.Hello("operator"));
    const grpc::Status refused = operator_.End();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(refused.error_message(),
                HasSubstr("needs a worker credential"));
  }
  WorkerConnection bare(Dial(app_, "operator", ""));
  EXPECT_FALSE(bare.Hello("operator"));
  EXPECT_THAT(bare.End().error_message(),
              HasSubstr("the client certificate (CN operator) is not issued "
                        "for workers"));
  grpc::ClientContext context;
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(v1::Fleet::NewStub(Dial(app_, "operator", "token-reader"))
                  ->ListWorkers(&context, v1::ListWorkersRequest(), &workers)
                  .ok());
  for (const auto& worker : workers.workers()) {
    EXPECT_NE(worker.hello().worker_id(), "operator");
  }
}

// Issue 32: with tokens and no client certificates, the operator's token
// connected as any worker. Now operator and admin tokens are refused for
// Fleet.Connect, naming their role and what a worker needs.
TEST_F(SecurePlannerTest, OperatorAndAdminTokensAreNotWorkers) {
  for (const char* token : {"token-operator", "token-admin"}) {
    SCOPED_TRACE(token);
    WorkerConnection worker(Dial(tokens_app_, "", token));
    EXPECT_FALSE(worker.Hello("w1"));
    const grpc::Status refused = worker.End();
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_THAT(refused.error_message(),
                HasSubstr("needs a worker credential"));
    EXPECT_THAT(refused.error_message(), HasSubstr("has role"));
  }
  WorkerConnection anonymous(Dial(tokens_app_, "", ""));
  EXPECT_FALSE(anonymous.Hello("w1"));
  EXPECT_EQ(anonymous.End().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

// A worker token connects as the worker it is named for, and only as it.
TEST_F(SecurePlannerTest, AWorkerTokenConnectsAsItsOwnIdOnly) {
  WorkerConnection other_id(Dial(tokens_app_, "", "token-worker-w1"));
  EXPECT_FALSE(other_id.Hello("w2"));
  const grpc::Status refused = other_id.End();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("hello.worker_id 'w2' is not the worker 'token:w1'"));

  WorkerConnection own(Dial(tokens_app_, "", "token-worker-w1"));
  EXPECT_TRUE(own.Hello("w1"));
  own.End();
}

// Issue 32: a second connection with the operator token took over a live
// worker's id. Now no other credential can: not the operator's token, not
// another worker's token, not a worker token for the id when the worker
// connected with its certificate; the worker keeps its stream until its
// own credential reconnects.
TEST_F(SecurePlannerTest, ALiveWorkerIsNotTakenOverByAnotherCredential) {
  WorkerConnection live(Dial(tokens_app_, "", "token-worker-w3"));
  ASSERT_TRUE(live.Hello("w3"));
  for (const char* token :
       {"token-operator", "token-admin", "token-worker-w2"}) {
    SCOPED_TRACE(token);
    WorkerConnection thief(Dial(tokens_app_, "", token));
    EXPECT_FALSE(thief.Hello("w3"));
    EXPECT_EQ(thief.End().error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  // Its own token reconnects: the live stream is the one replaced, so it
  // was still registered.
  WorkerConnection reconnect(Dial(tokens_app_, "", "token-worker-w3"));
  EXPECT_TRUE(reconnect.Hello("w3"));
  EXPECT_EQ(live.End().error_code(), grpc::StatusCode::ABORTED);
  reconnect.End();

  // Under mTLS: w2 connected with its certificate; w2's token with another
  // certificate is another credential.
  WorkerConnection certified(Dial(app_, "worker-w2", ""));
  ASSERT_TRUE(certified.Hello("w2"));
  WorkerConnection by_token(Dial(app_, "operator", "token-worker-w2"));
  EXPECT_FALSE(by_token.Hello("w2"));
  const grpc::Status refused = by_token.End();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(refused.error_message(),
              HasSubstr("worker w2 is connected as 'cert:w2'"));
  certified.End();
}

TEST_F(SecurePlannerTest, PlaintextAndCertificatelessClientsAreNotServed) {
  auto plaintext = std::make_unique<testing::PlannerStubs>(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(app_->grpc_port()),
                          grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(5));
  v1::PingResponse pong;
  EXPECT_EQ(
      plaintext->fit->Ping(&context, v1::PingRequest(), &pong).error_code(),
      grpc::StatusCode::UNAVAILABLE);

  auto no_certificate =
      std::make_unique<testing::PlannerStubs>(Channel("admin", false));
  grpc::ClientContext context2;
  context2.set_deadline(std::chrono::system_clock::now() +
                        std::chrono::seconds(5));
  EXPECT_EQ(no_certificate->fit->Ping(&context2, v1::PingRequest(), &pong)
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);

  auto with = std::make_unique<testing::PlannerStubs>(Channel(""));
  grpc::ClientContext context3;
  EXPECT_TRUE(with->fit->Ping(&context3, v1::PingRequest(), &pong).ok());
}

TEST_F(SecurePlannerTest, TheHttpPortServesHttpsOnly) {
  httplib::SSLClient https("localhost", app_->http_port());
  https.set_ca_cert_path((*dir_ + "/ca.pem").c_str());
  https.enable_server_certificate_verification(true);
  auto health = https.Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);

  httplib::Client plain("127.0.0.1", app_->http_port());
  plain.set_connection_timeout(5, 0);
  plain.set_read_timeout(5, 0);
  auto refused = plain.Get("/healthz");
  EXPECT_TRUE(!refused || refused->status != 200);
}

// The issue: /calibration, /energy and the extender's verdicts answered
// anyone on a planner that required client certificates on gRPC. Now every
// HTTP route but /healthz needs one too (asked for at the handshake, not
// required there, so that health checks need none).
TEST_F(SecurePlannerTest, TheHttpPortNeedsAClientCertificateButForHealthz) {
  const auto client = [&](const std::string& name) {
    auto https = name.empty() ? std::make_unique<httplib::SSLClient>(
                                    "localhost", app_->http_port())
                              : std::make_unique<httplib::SSLClient>(
                                    "localhost", app_->http_port(),
                                    name + ".pem", name + "-key.pem");
    https->set_ca_cert_path((*dir_ + "/ca.pem").c_str());
    https->enable_server_certificate_verification(true);
    https->set_read_timeout(10, 0);
    return https;
  };
  const auto none = client("");
  const auto certified = client(*dir_ + "/operator");
  auto health = none->Get("/healthz");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  for (const char* path : {"/metrics", "/calibration", "/energy"}) {
    auto refused = none->Get(path);
    ASSERT_TRUE(refused) << path;
    EXPECT_EQ(refused->status, 401) << path;
    EXPECT_THAT(refused->body, HasSubstr("needs a client certificate"));
    auto served = certified->Get(path);
    ASSERT_TRUE(served) << path;
    EXPECT_EQ(served->status, 200) << path;
  }
  auto metrics = certified->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_THAT(metrics->body, HasSubstr("headroom_fit_verdicts_total"));
  for (const char* verb : {"/scheduler/filter", "/scheduler/prioritize"}) {
    auto refused = none->Post(verb, "{}", "application/json");
    ASSERT_TRUE(refused) << verb;
    EXPECT_EQ(refused->status, 401) << verb;
    auto answered = certified->Post(verb, "{}", "application/json");
    ASSERT_TRUE(answered) << verb;
    EXPECT_NE(answered->status, 401) << verb;  // past access: 200 or 400
  }

  // A certificate another CA signed is refused at the handshake.
  const std::string other = *dir_ + "/other";
  const std::string make = std::string(HEADROOM_SOURCE_DIR) +
                           "/scripts/dev-certs.sh " + other + " 2>/dev/null";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  auto foreign = client(other + "/operator")->Get("/calibration");
  EXPECT_TRUE(!foreign || foreign->status != 200);
}

// Calls gRPC reflection's list_services on `channel`; the reply's bytes go
// to `reply`.
grpc::Status ListServices(const std::shared_ptr<grpc::Channel>& channel,
                          std::string* reply) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  grpc::CompletionQueue queue;
  auto call = stub.PrepareCall(
      &context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &queue);
  // One operation at a time: each yields one event.
  const auto next = [&queue] {
    void* tag = nullptr;
    bool ok = false;
    return queue.Next(&tag, &ok) && ok;
  };
  call->StartCall(nullptr);
  if (next()) {
    // ServerReflectionRequest{list_services: "*"} (field 7, a string).
    const char request[] = {0x3a, 0x01, '*'};
    grpc::Slice slice(request, sizeof(request));
    grpc::ByteBuffer buffer(&slice, 1);
    call->Write(buffer, nullptr);
    if (next()) {
      call->WritesDone(nullptr);
      next();
      grpc::ByteBuffer answer;
      call->Read(&answer, nullptr);
      if (next()) {
        std::vector<grpc::Slice> slices;
        (void)answer.Dump(&slices);
        for (const grpc::Slice& part : slices) {
          reply->append(reinterpret_cast<const char*>(part.begin()),
                        part.size());
        }
      }
    }
  }
  grpc::Status status;
  call->Finish(&status, nullptr);
  next();
  queue.Shutdown();
  void* tag = nullptr;
  bool ok = false;
  for (int i = 0; i < 100 && queue.Next(&tag, &ok); ++i) {
  }
  return status;
}

// Reflection is gRPC's own service and never asked Access: it answered
// anyone. It is served where reads are open, and not at all where reads
// need a token; the HTTP routes of such a planner need the token too.
TEST(ReadsNeedATokenTest, ReflectionAndTheHttpRoutesRefuseAnonymousReads) {
  {
    auto open = PlannerApp::Start(testing::TestPlannerConfig());
    ASSERT_TRUE(open.ok()) << open.status();
    std::string reply;
    const grpc::Status listed = ListServices(
        grpc::CreateChannel("127.0.0.1:" + std::to_string((*open)->grpc_port()),
                            grpc::InsecureChannelCredentials()),
        &reply);
    EXPECT_TRUE(listed.ok()) << listed.error_message();
    EXPECT_THAT(reply, HasSubstr("headroom.v1.Fit"));
  }
  const std::string tokens = std::filesystem::temp_directory_path() /
                             ("headroom-tokens-" + std::to_string(getpid()));
  std::ofstream(tokens) << "alice reader " << kAdminHash << "\n";
  PlannerConfig config = testing::TestPlannerConfig();
  config.tokens_file = tokens;
  config.require_token_for_reads = true;
  auto app = PlannerApp::Start(config);
  std::filesystem::remove(tokens);
  ASSERT_TRUE(app.ok()) << app.status();
  std::string reply;
  const grpc::Status refused = ListServices(
      grpc::CreateChannel("127.0.0.1:" + std::to_string((*app)->grpc_port()),
                          grpc::InsecureChannelCredentials()),
      &reply);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(reply, "");

  httplib::Client http("127.0.0.1", (*app)->http_port());
  http.set_read_timeout(10, 0);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  for (const char* path : {"/calibration", "/energy", "/metrics"}) {
    auto anonymous = http.Get(path);
    ASSERT_TRUE(anonymous) << path;
    EXPECT_EQ(anonymous->status, 401) << path;
    auto reader = http.Get(path, {{"Authorization", "Bearer admin"}});
    ASSERT_TRUE(reader) << path;
    EXPECT_EQ(reader->status, 200) << path;
  }
  auto verdicts = http.Post("/scheduler/filter", "{}", "application/json");
  ASSERT_TRUE(verdicts);
  EXPECT_EQ(verdicts->status, 401);
}

TEST(SafeDefaultsTest, ANetworkAddressWithoutTlsRefusesToStart) {
  for (const char* field : {"listen", "http_listen"}) {
    PlannerConfig config = testing::TestPlannerConfig();
    (std::string(field) == "listen" ? config.listen : config.http_listen) =
        "0.0.0.0:0";
    auto app = PlannerApp::Start(config);
    ASSERT_FALSE(app.ok()) << field;
    EXPECT_EQ(app.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(app.status().message(),
                HasSubstr(std::string("--") + field + " = 0.0.0.0:0"));
    EXPECT_THAT(app.status().message(), HasSubstr("--tls_cert"));
    EXPECT_THAT(app.status().message(), HasSubstr("--allow_insecure"));
    config.allow_insecure = true;
    auto insecure = PlannerApp::Start(config);
    EXPECT_TRUE(insecure.ok()) << insecure.status();
  }
}

TEST(SafeDefaultsTest, ThePlannerBinaryExitsWithTwo) {
  testing::Child planner({HEADROOM_PLANNER_BIN, "--listen=0.0.0.0:0",
                          "--http_listen=", "--db=:memory:"});
  EXPECT_EQ(planner.WaitExit(std::chrono::seconds(60)), 2);
}

}  // namespace
}  // namespace headroom
