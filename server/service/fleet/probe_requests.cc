#include "server/service/fleet/probe_requests.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "core/energy/energy_curves.h"
#include "core/memory/parallel.h"
#include "core/memory/training_setup.h"
#include "core/planner/fit_planner.h"
#include "server/service/fleet/worker_reports.h"
#include "server/service/paging.h"
#include "server/service/reply.h"

namespace headroom {

absl::Status CheckProbeParallel(const v1::SubmitProbeRequest& request) {
  const v1::TrainingSetup& setup = request.setup();
  if (setup.gpus() > kMaxProbeGpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.gpus = ", setup.gpus(),
        " is out of range for a probe; allowed 0 or 1 (one GPU) .. ",
        kMaxProbeGpus, " (the GPUs of one node)"));
  }
  if (setup.nodes() > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.nodes = ", setup.nodes(),
        "; a probe runs on one node: allowed 0 or 1 (fit answers take more)"));
  }
  const uint32_t gpus = std::max(1u, setup.gpus());
  if (setup.gpus_per_node() != 0 && setup.gpus_per_node() < gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.gpus_per_node = ", setup.gpus_per_node(),
        " is under setup.gpus = ", gpus,
        "; a probe runs on one node: allowed 0 or at least setup.gpus"));
  }
  if (gpus == 1) return absl::OkStatus();
  if (request.has_autotune()) {
    return absl::InvalidArgumentError(
        absl::StrCat("setup.gpus = ", gpus,
                     ": an autotune probe runs on one GPU; allowed 0 "
                     "or 1"));
  }
  const std::string& executor = request.executor();
  if (executor == "cuda") {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.gpus = ", gpus,
        ": the cuda executor runs on one GPU; allowed 0 or 1 (or executor "
        "\"torch\" or \"sim\")"));
  }
  const v1::TrainingSetup::Parallel strategy = setup.parallel();
  const bool zero = strategy == v1::TrainingSetup::ZERO1 ||
                    strategy == v1::TrainingSetup::ZERO2 ||
                    strategy == v1::TrainingSetup::ZERO3;
  if (zero && executor != "sim") {
    return absl::InvalidArgumentError(absl::StrCat(
        "setup.parallel = ", StrategyName(strategy),
        " needs DeepSpeed, which the torch executor does not run; allowed with "
        "executor \"torch\" (or empty): ddp, fsdp-full, fsdp-grad-op, "
        "fsdp-hybrid; every strategy with executor \"sim\""));
  }
  return absl::OkStatus();
}

absl::Status CheckProbeRequestBytes(const google::protobuf::Message& request) {
  // The request is stored with the probe and listed by ListProbes: bounded
  // so that no probe can make a listing fail for everyone.
  if (request.ByteSizeLong() <= kMaxStoredProbeRequestBytes) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "request is ", request.ByteSizeLong(),
      " bytes; a stored probe request allows up to ",
      kMaxStoredProbeRequestBytes,
      " (256 KiB): send an ONNX graph without its weights, or a spec"));
}

absl::StatusOr<v1::Probe> NewProbe(const v1::SubmitProbeRequest& request,
                                   const ModelCatalog& catalog,
                                   size_t max_request_bytes, int64_t now_ms) {
  RETURN_IF_ERROR(CheckSize(request, max_request_bytes));
  RETURN_IF_ERROR(CheckProbeRequestBytes(request));
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string&>{"gpu", request.gpu()},
        {"worker", request.worker()},
        {"executor", request.executor()},
        {"learn_key", request.learn_key()},
        {"model.template", request.model().template_()}}) {
    RETURN_IF_ERROR(CheckLength(value, field, kMaxNameChars));
  }
  RETURN_IF_ERROR(CheckProbeParallel(request));
  // The setup as CheckFit and a stored run's check read it (known enums,
  // GPU counts): a probe measures nothing an answer or a Refit refuses.
  RETURN_IF_ERROR(ValidateSetup(request.setup()));
  ASSIGN_OR_RETURN(ResolvedModel model,
                   ResolveModelRef(request.model(), request.setup(), catalog));
  RETURN_IF_ERROR(CheckBatches(request.batches(), kMaxProbeBatches));
  v1::Probe probe;
  switch (request.placement_case()) {
    case v1::SubmitProbeRequest::kGpu: {
      absl::StatusOr<GpuInfo> gpu = FindGpu(request.gpu());
      if (!gpu.ok()) {
        return absl::Status(gpu.status().code(),
                            absl::StrCat("gpu: ", gpu.status().message()));
      }
      probe.set_gpu(gpu->name);
      break;
    }
    case v1::SubmitProbeRequest::kWorker:
      RETURN_IF_ERROR(CheckFleetId(request.worker(), "worker"));
      break;
    case v1::SubmitProbeRequest::PLACEMENT_NOT_SET:
      return absl::InvalidArgumentError(
          "placement is empty; set gpu (a catalog GPU kind such as \"L4\") "
          "or worker (a worker id from ListWorkers)");
  }
  if (request.repetitions() > kMaxRepetitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetitions = ", request.repetitions(),
                     " is out of range; allowed 0..", kMaxRepetitions));
  }
  const std::string& executor = request.executor();
  if (!executor.empty() && executor != "torch" && executor != "cuda" &&
      executor != "sim") {
    return absl::InvalidArgumentError(
        absl::StrCat("executor = \"", executor.substr(0, 32),
                     "\"; allowed \"torch\", \"cuda\", \"sim\" or empty"));
  }
  if (request.steps() > kMaxSteps || request.warmup_steps() > kMaxSteps) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps and warmup_steps must be 0..", kMaxSteps, "; got ",
                     request.steps(), " and ", request.warmup_steps()));
  }
  if (!(request.batch_timeout_s() >= 0 && request.batch_timeout_s() <= 86400)) {
    return absl::InvalidArgumentError(
        "batch_timeout_s is out of range; allowed 0..86400 seconds");
  }
  if (request.expires_s() > kMaxExpiresS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expires_s = ", request.expires_s(), " is out of range; allowed 0..",
        kMaxExpiresS, " seconds (30 days; 0 = never)"));
  }
  *probe.mutable_request() = request;
  probe.set_template_(model.template_name);
  *probe.mutable_spec() = model.spec();
  probe.set_created_unix_ms(now_ms);
  probe.set_updated_unix_ms(probe.created_unix_ms());
  *probe.mutable_request() = request;
  probe.set_template_(model.template_name);
  *probe.mutable_spec() = model.spec();
  probe.set_created_unix_ms(now_ms);
  probe.set_updated_unix_ms(now_ms);
  return probe;
}

absl::StatusOr<v1::SubmitProbeRequest> EnergyProbeRequest(
    const v1::SubmitEnergyProbeRequest& request) {
  v1::SubmitProbeRequest probe;
  *probe.mutable_model() = request.model();
  v1::EnergyProbePlan* plan = probe.mutable_energy();
  if (request.quants_size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("quants has ", request.quants_size(),
                     " entries; allowed fp16, nf4, int8, each at most once"));
  }
  bool wanted[3] = {request.quants().empty(), request.quants().empty(),
                    request.quants().empty()};
  for (int i = 0; i < request.quants_size(); ++i) {
    absl::StatusOr<Quant> quant = ParseQuant(request.quants(i).substr(0, 64));
    if (!quant.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("quants[", i, "]: ", quant.status().message()));
    }
    if (wanted[static_cast<int>(*quant)]) {
      return absl::InvalidArgumentError(
          absl::StrCat("quants[", i, "] = ", QuantName(*quant),
                       " is named twice; each quantization at most once"));
    }
    wanted[static_cast<int>(*quant)] = true;
  }
  for (Quant quant : {Quant::kFp16, Quant::kNf4, Quant::kInt8}) {
    if (wanted[static_cast<int>(quant)]) plan->add_quants(QuantName(quant));
  }
  for (const auto& [field, value] :
       {std::pair<const char*, uint32_t>{"prompt_tokens",
                                         request.prompt_tokens()},
        {"new_tokens", request.new_tokens()}}) {
    if (value > kMaxGenerationTokens) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " = ", value, " is out of range; allowed 0..",
                       kMaxGenerationTokens, " (0 = the default)"));
    }
  }
  plan->set_prompt_tokens(request.prompt_tokens() == 0
                              ? kDefaultPromptTokens
                              : request.prompt_tokens());
  plan->set_new_tokens(request.new_tokens() == 0 ? kDefaultNewTokens
                                                 : request.new_tokens());
  if (request.model().has_hf_config()) {
    plan->set_hf_config(request.model().hf_config());
  }
  const std::string& executor = request.executor();
  if (!executor.empty() && executor != "torch" && executor != "sim") {
    return absl::InvalidArgumentError(absl::StrCat(
        "executor = \"", executor.substr(0, 32),
        "\"; an energy probe runs on \"torch\", \"sim\" or empty"));
  }
  probe.set_executor(executor);
  switch (request.placement_case()) {
    case v1::SubmitEnergyProbeRequest::kGpu:
      probe.set_gpu(request.gpu());
      break;
    case v1::SubmitEnergyProbeRequest::kWorker:
      probe.set_worker(request.worker());
      break;
    case v1::SubmitEnergyProbeRequest::PLACEMENT_NOT_SET:
      break;  // NewProbe names it
  }
  probe.add_batches(1);
  probe.set_repetitions(request.repetitions());
  probe.set_warmup_steps(1);
  probe.set_steps(1);
  probe.set_batch_timeout_s(request.batch_timeout_s());
  probe.set_expires_s(request.expires_s());
  return probe;
}

absl::Status CheckOperatorProbeRequest(const v1::SubmitProbeRequest& request) {
  if (request.has_autotune()) {
    return absl::InvalidArgumentError(
        "autotune is set by SubmitAutotune only; send the autotune there");
  }
  if (!request.learn_key().empty()) {
    return absl::InvalidArgumentError(
        "learn_key is set by the planner only (CheckFitRequest.learn)");
  }
  if (request.has_energy()) {
    return absl::InvalidArgumentError(
        "energy is set by SubmitEnergyProbe only; send the energy probe "
        "there");
  }
  return absl::OkStatus();
}

v1::SubmitProbeRequest LearningProbeRequest(
    const v1::CheckFitRequest& request, const std::vector<uint32_t>& batches,
    const std::string& worker, const std::string& executor,
    const std::string& learn_key) {
  v1::SubmitProbeRequest probe;
  *probe.mutable_model() = request.model();
  *probe.mutable_setup() = request.setup();
  for (uint32_t batch : batches) probe.add_batches(batch);
  probe.set_worker(worker);
  probe.set_executor(executor);
  probe.set_repetitions(1);
  // Few steps: the peak of a training step is reached in the first.
  probe.set_warmup_steps(1);
  probe.set_steps(2);
  probe.set_learn_key(learn_key);
  return probe;
}

absl::StatusOr<std::optional<std::string>> OutstandingLearning(
    Store* store, const std::string& learn_key) {
  for (v1::Probe::State state : {v1::Probe::QUEUED, v1::Probe::RUNNING}) {
    ASSIGN_OR_RETURN(std::vector<v1::Probe> probes,
                     store->ListProbes(state, 1000));
    for (const v1::Probe& probe : probes) {
      if (probe.request().learn_key() == learn_key) return probe.id();
    }
  }
  return std::nullopt;
}

absl::StatusOr<int32_t> ProbesPageSize(const v1::ListProbesRequest& request) {
  if (request.limit() > 10000) {
    return absl::InvalidArgumentError(
        absl::StrCat("limit = ", request.limit(),
                     " is out of range; allowed 0..10000 (0 = 100)"));
  }
  // A client from before paging sends limit alone: it is the page size,
  // at most kMaxPageSize.
  int32_t page_size = request.page_size();
  if (page_size == 0 && request.limit() > 0) {
    page_size =
        static_cast<int32_t>(std::min<uint32_t>(request.limit(), kMaxPageSize));
  }
  return page_size;
}

}  // namespace headroom
