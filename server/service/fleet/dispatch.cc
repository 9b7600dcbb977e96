#include "server/service/fleet/dispatch.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/catalog/gpu_catalog.h"
#include "server/service/fleet_autotune.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// What 0 means in a probe request (fleet.proto): the API's defaults, not
// the planner's policy.
constexpr uint32_t kDefaultWarmupSteps = 1;
constexpr uint32_t kDefaultSteps = kDefaultProbeSteps;
constexpr double kDefaultBatchTimeoutS = 600;

}  // namespace

std::string NoWorkerFor(const v1::Probe& probe,
                        const std::vector<ConnectedWorker>& workers) {
  const v1::SubmitProbeRequest& request = probe.request();
  const std::string& executor = request.executor();
  int connected = 0;
  bool placed = false;
  std::set<std::string> kinds;  // the GPU kinds connected, for the reason
  for (const ConnectedWorker& worker : workers) {
    if (worker.draining) continue;
    ++connected;
    bool here =
        request.has_worker() ? worker.worker == request.worker() : false;
    for (const v1::GpuDevice& device : worker.gpus) {
      const std::string kind = CatalogGpuForDriverName(device.name());
      kinds.insert(kind.empty() ? device.name() : kind);
      if (!request.has_worker() && kind == probe.gpu()) here = true;
    }
    if (!here) continue;
    placed = true;
    const auto& executors = worker.executors;
    if (executor.empty() || std::find(executors.begin(), executors.end(),
                                      executor) != executors.end()) {
      return "";
    }
  }
  if (connected == 0) return "no worker is connected";
  if (placed) {
    return absl::StrCat("no connected worker that matches runs the \"",
                        executor.substr(0, 32), "\" executor");
  }
  if (request.has_worker()) {
    return absl::StrCat("worker '", request.worker().substr(0, 64),
                        "' is not connected");
  }
  return absl::StrCat("no connected worker has a ", probe.gpu(),
                      " (connected: ", absl::StrJoin(kinds, ", "), ")");
}

v1::Assignment AssignmentFor(const v1::Probe& probe,
                             const std::vector<v1::GpuDevice>& gpus,
                             const DispatchPolicy& policy) {
  v1::Assignment assignment;
  assignment.set_assignment_id(probe.assignment_id());
  assignment.set_probe_id(probe.id());
  *assignment.mutable_spec() = probe.spec();
  assignment.set_template_(probe.template_());
  *assignment.mutable_setup() = probe.request().setup();
  // Only what is not measured yet (a re-queued probe resumes).
  const uint32_t repetitions = std::max(1u, probe.request().repetitions());
  // An energy probe: one run per quantization (the mode) and repetition.
  if (probe.request().has_energy()) {
    *assignment.mutable_energy() = probe.request().energy();
    for (const std::string& quant : probe.request().energy().quants()) {
      for (uint32_t rep = 0; rep < repetitions; ++rep) {
        bool done = false;
        for (const v1::BatchResult& r : probe.results()) {
          if (r.mode() == quant && r.repetition() == rep) done = true;
        }
        if (done) continue;
        v1::BatchRun* run = assignment.add_runs();
        run->set_batch(1);
        run->set_repetition(rep);
        run->set_mode(quant);
      }
    }
  }
  for (uint32_t batch : probe.request().batches()) {
    if (probe.request().has_energy()) break;
    for (uint32_t rep = 0; rep < repetitions; ++rep) {
      bool done = false;
      for (const v1::BatchResult& r : probe.results()) {
        if (r.batch() == batch && r.repetition() == rep) done = true;
      }
      if (done) continue;
      v1::BatchRun* run = assignment.add_runs();
      run->set_batch(batch);
      run->set_repetition(rep);
    }
  }
  assignment.set_executor(probe.request().executor());
  for (const v1::GpuDevice& gpu : gpus) {
    if (gpu.catalog_gpu() == probe.gpu()) {
      assignment.set_gpu_index(gpu.index());
      break;
    }
  }
  const v1::SubmitProbeRequest& request = probe.request();
  assignment.set_warmup_steps(request.warmup_steps() == 0
                                  ? kDefaultWarmupSteps
                                  : request.warmup_steps());
  assignment.set_steps(request.steps() == 0 ? kDefaultSteps : request.steps());
  assignment.set_lease_ms(policy.lease_ms);
  assignment.set_batch_timeout_s(request.batch_timeout_s() == 0
                                     ? kDefaultBatchTimeoutS
                                     : request.batch_timeout_s());
  return assignment;
}

Dispatcher::Dispatcher(Store* store, DispatchTarget* target,
                       DispatchPolicy policy, std::function<int64_t()> now_ms)
    : store_(store),
      target_(target),
      policy_(std::move(policy)),
      now_ms_(std::move(now_ms)) {}

void Dispatcher::FailExpired(int64_t now_ms) {
  absl::StatusOr<std::vector<v1::Probe>> expired =
      store_->ListExpiredProbes(now_ms, policy_.expiries_per_pass);
  if (!expired.ok()) {
    spdlog::error("event=expiry_failed error=\"{}\"",
                  std::string(expired.status().message()));
    return;
  }
  if (expired->empty()) return;
  const std::vector<ConnectedWorker> connected = target_->ConnectedWorkers();
  for (const v1::Probe& queued : *expired) {
    std::string why = NoWorkerFor(queued, connected);
    if (why.empty()) why = "every connected worker that matches was busy";
    const std::string error = absl::StrCat(
        "expired: queued longer than ", queued.request().expires_s(),
        " s; no connected worker could take it (", why, ")");
    absl::StatusOr<v1::Probe> probe =
        store_->ExpireProbe(queued.id(), now_ms, error);
    if (!probe.ok()) {
      spdlog::error("event=expiry_failed probe={} error=\"{}\"", queued.id(),
                    std::string(probe.status().message()));
      continue;
    }
    if (probe->state() != v1::Probe::FAILED) continue;  // taken meanwhile
    spdlog::warn("event=probe_expired probe={} expires_s={} reason=\"{}\"",
                 probe->id(), queued.request().expires_s(), why);
    target_->ProbeChanged(*probe);
  }
}

void Dispatcher::Once() {
  const int64_t now = now_ms_();
  absl::StatusOr<std::vector<std::string>> requeued =
      store_->RequeueExpired(now);
  if (!requeued.ok()) {
    spdlog::error("event=requeue_failed error=\"{}\"",
                  std::string(requeued.status().message()));
  } else {
    for (const std::string& id : *requeued) {
      spdlog::warn("event=lease_expired probe={} action=requeued", id);
      absl::StatusOr<v1::Probe> probe = store_->GetProbe(id);
      if (probe.ok()) target_->ProbeChanged(*probe);
    }
  }
  FailExpired(now);

  // Claims are write transactions: none is tried while nothing waits.
  absl::StatusOr<std::vector<v1::Probe>> waiting =
      store_->ListProbes(v1::Probe::QUEUED, 1);
  if (!waiting.ok() || waiting->empty()) return;
  for (const IdleWorker& worker : target_->IdleWorkers()) {
    absl::StatusOr<std::optional<v1::Probe>> claimed =
        store_->ClaimProbe(worker.worker, worker.gpu_kinds, worker.executors,
                           now, policy_.lease_ms);
    if (!claimed.ok()) {
      spdlog::error("event=claim_failed worker={} error=\"{}\"", worker.worker,
                    std::string(claimed.status().message()));
      continue;
    }
    if (!claimed->has_value()) continue;
    const v1::Probe& probe = **claimed;
    v1::Assignment assignment = AssignmentFor(probe, worker.gpus, policy_);
    if (probe.request().has_autotune()) {
      // Sent even with every run measured: the worker writes the record.
      FillAutotuneAssignment(probe, &assignment);
    } else if (assignment.runs().empty()) {
      absl::StatusOr<v1::Probe> done =
          store_->FinishAssignment(probe.id(), probe.assignment_id(),
                                   v1::Probe::SUCCEEDED, "", "", false);
      if (done.ok()) target_->ProbeChanged(*done);
      continue;
    }
    if (!target_->Assign(worker.worker, probe, assignment)) {
      // The worker left between the snapshot and now: straight back.
      (void)store_->FinishAssignment(probe.id(), probe.assignment_id(),
                                     v1::Probe::QUEUED, "", "",
                                     /*requeue=*/true);
      continue;
    }
    spdlog::info(
        "event=probe_assigned probe={} assignment={} worker={} "
        "runs={} attempt={}",
        probe.id(), probe.assignment_id(), worker.worker,
        assignment.runs_size(), probe.attempts());
    target_->ProbeChanged(probe);
  }
}

}  // namespace headroom
