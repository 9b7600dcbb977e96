#include "server/service/planner_app.h"

#include <algorithm>
#include <chrono>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "common/build_info.h"
#include "core/calibration/calibrate.h"
#include "core/calibration/fit_inputs.h"
#include "core/energy/energy_curves.h"
#include "core/evidence/evidence.h"
#include "core/memory/fit_verdict.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/impl/server_builder_option.h"
#include "grpcpp/impl/server_builder_plugin.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "io/catalog_files.h"
#include "io/files.h"
#include "io/published_runs.h"
#include "server/service/decode_errors.h"
#include "server/store/open_store.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// The stored current factor set, or a new one fitted to the shipped runs
// (stored and made current) when the store has none yet. Replicas starting
// together on an empty store may each store one (the runs only once: AddRuns
// skips identical runs); the last one stored is current, and the others
// follow it within a store poll (SyncWithStore).
absl::StatusOr<v1::FactorSet> EnsureFactorSet(Store& store,
                                              const ModelCatalog& catalog,
                                              const std::string& runs_path) {
  ASSIGN_OR_RETURN(std::optional<v1::FactorSet> current,
                   store.CurrentFactorSet());
  if (current.has_value()) return *current;
  ASSIGN_OR_RETURN(std::vector<v1::MeasuredRun> runs,
                   LoadRunsFiles(runs_path, catalog));
  StampRuns(catalog, &runs);
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(
      CalibrationResult result,
      Calibrate(runs, catalog, FitOptions{},
                absl::StrCat(runs_path, " (", runs.size(), " runs)")));
  result.factor_set.set_inputs_sha256(FitInputsSha256(runs));
  ASSIGN_OR_RETURN(int64_t stored, store.AddRuns(runs));
  ASSIGN_OR_RETURN(v1::FactorSet set,
                   store.AddFactorSet(std::move(result.factor_set), true));
  const auto& page = set.page().summary();
  spdlog::info(
      "event=factor_set_fitted version={} runs={} stored_runs={} "
      "seconds={:.3f} "
      "median_abs_err={} heldout_median_abs_err={} k95={}",
      set.version(), runs.size(), stored,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count(),
      page.at("ours").median_abs_err(),
      page.at("ours_heldout").median_abs_err(), set.k95());
  return set;
}

// The stored current energy curves, or the shipped file's stored as the
// first version.
absl::StatusOr<v1::EnergyCurveSet> EnsureEnergyCurves(Store& store,
                                                      const std::string& path) {
  ASSIGN_OR_RETURN(std::optional<v1::EnergyCurveSet> current,
                   store.CurrentEnergyCurveSet());
  if (current.has_value()) return *current;
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  ASSIGN_OR_RETURN(v1::EnergyCurveSet set, ParseCurveSet(text, path));
  ASSIGN_OR_RETURN(v1::EnergyCurveSet stored,
                   store.AddEnergyCurveSet(std::move(set), true));
  spdlog::info("event=energy_curves_stored version={} source={}",
               stored.version(), path);
  return stored;
}

// Plaintext on loopback, TLS (and mTLS) where configured; a non-loopback
// address without TLS only with allow_insecure.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const PlannerConfig& config) {
  if (config.tls_cert.empty() != config.tls_key.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key go together: give both (the planner's "
        "certificate and its key, PEM) or neither");
  }
  if (config.tls_cert.empty()) {
    if (!config.tls_client_ca.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key (client "
          "certificates are checked only over TLS)");
    }
    for (const auto& [flag, address] :
         {std::pair<const char*, const std::string*>{"listen", &config.listen},
          {"http_listen", &config.http_listen},
          {"extender_listen", &config.extender_listen}}) {
      if (address->empty() || IsLoopbackListen(*address)) continue;
      if (!config.allow_insecure) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--", flag, " = ", address->substr(0, 200),
            " is not a loopback address and the planner has no TLS: give "
            "--tls_cert and --tls_key (with --tokens_file), or "
            "--allow_insecure to serve plaintext to the network anyway"));
      }
      spdlog::warn(
          "event=insecure_listen flag={} address={} warning=\"plaintext, no "
          "TLS, reachable from the network (--allow_insecure)\"",
          flag, *address);
    }
    return grpc::InsecureServerCredentials();
  }
  auto cert = ReadFile(config.tls_cert);
  auto key = ReadFile(config.tls_key);
  if (!cert.ok() || !key.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert = ", config.tls_cert, ", --tls_key = ", config.tls_key,
        ": cannot read ", !cert.ok() ? "the certificate" : "the key"));
  }
  grpc::SslServerCredentialsOptions ssl(
      config.tls_client_ca.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  if (!config.tls_client_ca.empty()) {
    auto ca = ReadFile(config.tls_client_ca);
    if (!ca.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_client_ca = ", config.tls_client_ca, ": cannot read it"));
    }
    ssl.pem_root_certs = *std::move(ca);
  }
  ssl.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
  return grpc::SslServerCredentials(ssl);
}

// The HTTP ports take the gRPC port's TLS, client CA and access rules.
HttpServer::Options HttpOptions(const PlannerConfig& config,
                                std::shared_ptr<const Access> access) {
  HttpServer::Options options;
  options.tls = {config.tls_cert, config.tls_key, config.tls_client_ca};
  options.access = std::move(access);
  options.metrics_open = config.metrics_open;
  return options;
}

// Takes gRPC's reflection service off one server: linking grpc++_reflection
// adds it to every server the process builds.
class NoReflection : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [](const auto& plugin) {
                                    return plugin->name() ==
                                           "proto_server_reflection";
                                  }),
                   plugins->end());
  }
};

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerApp>> PlannerApp::Start(
    const PlannerConfig& config) {
  if (!KAtCoverage(0, 0, config.coverage).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat("coverage = ", config.coverage,
                     " is not calibrated; allowed 0.9, 0.95"));
  }
  if (config.probe_lease_ms < 100 || config.probe_lease_ms > 86400000) {
    return absl::InvalidArgumentError(
        absl::StrCat("probe_lease_ms = ", config.probe_lease_ms,
                     " is out of range; allowed 100..86400000"));
  }
  if (config.worker_heartbeat_ms < 10 ||
      config.worker_heartbeat_ms * 2 > config.probe_lease_ms) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker_heartbeat_ms = ", config.worker_heartbeat_ms,
                     " is out of range; allowed 10..probe_lease_ms/2 (",
                     config.probe_lease_ms / 2, ")"));
  }
  if (config.store_poll_ms < 10 || config.store_poll_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("store_poll_ms = ", config.store_poll_ms,
                     " is out of range; allowed 10..60000"));
  }
  for (const auto& [name, value, low, high] :
       {std::tuple<const char*, int64_t, int64_t, int64_t>{
            "dispatch_ms", config.dispatch_ms, 10, 60000},
        {"max_handbacks", config.max_handbacks, 1, 1000},
        {"expiries_per_pass", config.expiries_per_pass, 1, 100000},
        {"worker_last_seen_ms", config.worker_last_seen_ms, 1000, 3600000},
        {"worker_max_unhandled", config.worker_max_unhandled, 16, 1000000},
        {"probe_counts_ms", config.probe_counts_ms, 100, 60000}}) {
    if (value < low || value > high) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " = ", value, " is out of range; allowed ", low, "..", high));
    }
  }
  if (config.grpc_memory_bytes < 4 * int64_t{config.max_message_bytes}) {
    return absl::InvalidArgumentError(
        absl::StrCat("grpc_memory_bytes = ", config.grpc_memory_bytes,
                     " is too small; allowed at least 4 x max_message_bytes = ",
                     4 * int64_t{config.max_message_bytes}));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentialsFor(config));
  ASSIGN_OR_RETURN(
      std::shared_ptr<const Access> access,
      Access::Create({config.tokens_file, config.require_token_for_reads,
                      !config.tls_cert.empty(),
                      !config.tls_client_ca.empty()}));
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"auto_probe_per_caller",
                                    config.auto_probe_per_caller},
        {"auto_probe_total", config.auto_probe_total}}) {
    if (value < 1 || value > 10000) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " = ", value, " is out of range; allowed 1..10000"));
    }
  }
  if (config.import_threads < 1 || config.import_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("import_threads = ", config.import_threads,
                     " is out of range; allowed 1..64"));
  }
  if (config.import_queue < 1 || config.import_queue > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("import_queue = ", config.import_queue,
                     " is out of range; allowed 1..100000"));
  }
  if (config.store_threads < 1 || config.store_threads > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("store_threads = ", config.store_threads,
                     " is out of range; allowed 1..64"));
  }
  if (config.store_queue < 1 || config.store_queue > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("store_queue = ", config.store_queue,
                     " is out of range; allowed 1..100000"));
  }
  std::unique_ptr<PlannerApp> app(new PlannerApp());
  ASSIGN_OR_RETURN(ModelCatalog catalog, LoadModelCatalog(config.models_dir));
  app->catalog_ = std::make_shared<const ModelCatalog>(std::move(catalog));
  ASSIGN_OR_RETURN(app->store_,
                   OpenStore(config.db_path, config.db_pool, config.db_init));
  ASSIGN_OR_RETURN(
      v1::FactorSet set,
      EnsureFactorSet(*app->store_, *app->catalog_, config.runs_path));
  app->version_ = set.version();

  app->metrics_ = std::make_unique<PlannerMetrics>();
  app->metrics_->FactorSetInstalled(set);
  auto planner = std::make_shared<const FitPlanner>(
      app->catalog_, std::move(set), config.coverage);
  // The request limit, access rules and store queue every service answers
  // by: decided here once, given to the domain services and the fleet.
  ServiceOptions service;
  service.max_request_bytes = static_cast<size_t>(config.max_message_bytes);
  service.access = access;
  service.store_queue = static_cast<size_t>(config.store_queue);
  PlannerState::Options options;
  options.coverage = config.coverage;
  options.auto_probe = config.auto_probe;
  options.auto_probe_per_caller = config.auto_probe_per_caller;
  options.auto_probe_total = config.auto_probe_total;
  options.now_ms = config.learn_clock_ms;
  options.before_refit_commit = config.before_refit_commit;
  options.import_threads = config.import_threads;
  options.import_queue = static_cast<size_t>(config.import_queue);
  options.import_queue_bytes = config.import_queue_bytes;
  options.before_import = config.before_import;
  app->store_executor_ =
      std::make_unique<BackgroundWorker>(config.store_threads);
  app->state_ = std::make_unique<PlannerState>(
      app->catalog_, std::move(planner), app->store_.get(), app->metrics_.get(),
      app->store_executor_.get(), service, options);
  PlannerState* state = app->state_.get();
  app->fit_ = std::make_unique<FitService>(state);
  app->calibration_ = std::make_unique<CalibrationService>(state);
  app->energy_ = std::make_unique<EnergyService>(state);
  app->density_ = std::make_unique<DensityService>(state);
  app->microbatch_ = std::make_unique<MicrobatchService>(state);
  ASSIGN_OR_RETURN(v1::EnergyCurveSet curves,
                   EnsureEnergyCurves(*app->store_, config.energy_curves_path));
  app->state_->SetEnergyCurves(
      std::make_shared<const v1::EnergyCurveSet>(std::move(curves)));

  FleetService::Options fleet;
  fleet.policy.lease_ms = config.probe_lease_ms;
  fleet.policy.heartbeat_ms = config.worker_heartbeat_ms;
  fleet.policy.store_poll_ms = config.store_poll_ms;
  fleet.policy.dispatch_ms = config.dispatch_ms;
  fleet.policy.max_handbacks = static_cast<uint32_t>(config.max_handbacks);
  fleet.policy.expiries_per_pass = config.expiries_per_pass;
  fleet.policy.last_seen_write_ms = config.worker_last_seen_ms;
  fleet.policy.max_unhandled_messages =
      static_cast<size_t>(config.worker_max_unhandled);
  fleet.policy.probe_counts_ms = config.probe_counts_ms;
  fleet.planner_version = GetBuildInfo().version;
  app->fleet_ = std::make_unique<FleetService>(
      app->catalog_, app->store_.get(), app->metrics_.get(),
      app->store_executor_.get(), service, fleet);
  // Answers rest on the stored runs from the first request on; a probe's
  // stored result refreshes them, and learning probes go to the fleet.
  RETURN_IF_ERROR(app->state_->RefreshEvidence());
  app->state_->SetLearner(config.learner != nullptr ? config.learner
                                                    : app->fleet_.get());
  app->fleet_->OnRunStored([state] { state->EvidenceStale(); });

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // Reflection is gRPC's own service: its handler never asks Access, and a
  // server interceptor cannot refuse a call with a status (only cancel it).
  // So it is served only where reads are open (behind the handshake where
  // client certificates are required); where reads need a token it is not
  // served at all, and grpcurl takes the protos (-import-path proto -proto
  // ...) instead.
  if (config.require_token_for_reads) {
    builder.SetOption(std::make_unique<NoReflection>());
  }
  builder.AddListeningPort(config.listen, credentials, &app->grpc_port_);
  builder.RegisterService(app->fit_.get());
  builder.RegisterService(app->calibration_.get());
  builder.RegisterService(app->energy_.get());
  builder.RegisterService(app->density_.get());
  builder.RegisterService(app->microbatch_.get());
  builder.RegisterService(app->fleet_.get());
  builder.SetMaxReceiveMessageSize(2 * config.max_message_bytes);
  grpc::ResourceQuota quota("headroom-planner");
  quota.Resize(static_cast<size_t>(config.grpc_memory_bytes));
  builder.SetResourceQuota(quota);
  builder.SetMaxSendMessageSize(config.max_message_bytes);
  // Keepalive: answer client pings, probe idle connections.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  // First: the others see the status it gives an undecodable request.
  interceptors.push_back(DecodeErrorInterceptorFactory());
  interceptors.push_back(app->metrics_->InterceptorFactory());
  interceptors.push_back(access->AuditInterceptorFactory());
  app->access_ = access;
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  app->server_ = builder.BuildAndStart();
  if (app->server_ == nullptr || app->grpc_port_ == 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen for gRPC on ", config.listen, " (address in use?)"));
  }
  app->server_->GetHealthCheckService()->SetServingStatus(true);
  app->serving_ = true;
  app->sync_ = std::thread([raw = app.get(), poll = config.store_poll_ms] {
    while (!raw->stop_sync_.WaitForNotificationWithTimeout(
        absl::Milliseconds(poll))) {
      absl::StatusOr<bool> synced = raw->state_->SyncWithStore();
      if (!synced.ok()) {
        spdlog::warn("event=store_sync_failed error=\"{}\"",
                     std::string(synced.status().message()));
      }
      raw->state_->ReturnImportMemory();
    }
  });

  // The scheduler extender answers from the same planner and evidence as
  // CheckFit, and finds a node's GPUs in the fleet when labels do not say.
  if (config.extender_budget_ms < 1 || config.extender_budget_ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrCat("extender_budget_ms = ", config.extender_budget_ms,
                     " is out of range; allowed 1..60000"));
  }
  SchedulerExtender::Options extender = config.extender;
  extender.budget = absl::Milliseconds(config.extender_budget_ms);
  if (!config.extender_kube_api.empty()) {
    const std::string& api = config.extender_kube_api;
    if (api != "in-cluster" && !absl::StartsWith(api, "https://") &&
        !absl::StartsWith(api, "http://")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "extender_kube_api = ", api.substr(0, 64),
          " is not allowed; allowed in-cluster or an API server URL "
          "(https://HOST:PORT)"));
    }
    ConfigMapReaderOptions kube;
    if (api != "in-cluster") kube.api_url = api;
    app->configmaps_ = std::make_unique<ConfigMapReader>(kube);
    extender.read_job_file = [reader = app->configmaps_.get()](
                                 const std::string& ns, const std::string& name,
                                 const std::string& key) {
      return reader->Read(ns, name, key);
    };
  }
  app->extender_ = std::make_unique<SchedulerExtender>(
      // The Fit service's answers: one snapshot of planner and evidence,
      // and kept (AnswerCache) for the same pod asked about again.
      [fit = app->fit_.get()](const v1::CheckFitRequest& request)
          -> absl::StatusOr<v1::CheckFitResponse> {
        ASSIGN_OR_RETURN(std::shared_ptr<const v1::CheckFitResponse> answer,
                         fit->AnswerFor(request));
        return *answer;
      },
      [fleet = app->fleet_.get(),
       simulated = extender.decide.include_simulated] {
        return fleet->NodeInventory(simulated);
      },
      app->metrics_.get(), extender);

  PlannerApp* raw = app.get();
  // /calibration; ?include_simulated=1 draws simulated runs in the figures.
  const HttpServer::PageRenderer calibration_page =
      [raw](const HttpServer::Query& query) {
        auto it = query.find("include_simulated");
        const bool include_simulated =
            it != query.end() && (it->second == "1" || it->second == "true");
        return raw->calibration_->CalibrationHtml(include_simulated);
      };
  if (!config.http_listen.empty()) {
    ASSIGN_OR_RETURN(
        app->http_,
        HttpServer::Start(
            config.http_listen, HttpOptions(config, access),
            app->metrics_->exported(), [raw] { return raw->serving_.load(); },
            calibration_page));
    app->extender_->Register(app->http_.get());
    // /energy beside /calibration: the current curves and measured points.
    app->http_->HandlePage("/energy", [raw](const HttpServer::Query& query) {
      return raw->energy_->EnergyHtml(query);
    });
  }
  if (!config.extender_listen.empty()) {
    ASSIGN_OR_RETURN(
        app->extender_http_,
        HttpServer::Start(
            config.extender_listen, HttpOptions(config, access),
            app->metrics_->exported(), [raw] { return raw->serving_.load(); },
            calibration_page));
    app->extender_->Register(app->extender_http_.get());
  }
  return app;
}

void PlannerApp::Shutdown(std::chrono::milliseconds grace) {
  if (!stop_sync_.HasBeenNotified()) stop_sync_.Notify();
  if (sync_.joinable()) sync_.join();
  if (state_ != nullptr) state_->Quiesce();
  if (fleet_ != nullptr) fleet_->OnRunStored(nullptr);
  if (serving_.exchange(false) && server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    // Worker streams never end on their own: end them first.
    fleet_->Shutdown();
    server_->Shutdown(std::chrono::system_clock::now() + grace);
  }
  http_.reset();
  extender_http_.reset();
}

void PlannerApp::Wait() {
  if (server_ != nullptr) server_->Wait();
}

PlannerApp::~PlannerApp() { Shutdown(std::chrono::milliseconds(0)); }

}  // namespace headroom
