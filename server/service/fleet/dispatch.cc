#include "server/service/fleet/dispatch.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"
#include "server/service/fleet_autotune.h"
#include "server/store/probe_transitions.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

// What 0 means in a probe request (fleet.proto): the API's defaults, not
// the planner's policy.
constexpr uint32_t kDefaultWarmupSteps = 1;
constexpr uint32_t kDefaultSteps = kDefaultProbeSteps;
constexpr double kDefaultBatchTimeoutS = 600;

}  // namespace

namespace {

// A device's catalog kind (as OnHello filled it in, else from its name).
std::string KindOf(const v1::GpuDevice& device) {
  return device.catalog_gpu().empty() ? CatalogGpuForDriverName(device.name())
                                      : device.catalog_gpu();
}

// How many of `gpus` are of the catalog `kind`; with an empty `kind`, how
// many the most numerous kind has (cards the catalog does not know count
// as one kind).
int GpusOfKind(const std::vector<v1::GpuDevice>& gpus,
               const std::string& kind) {
  std::map<std::string, int> count;
  int largest = 0;
  for (const v1::GpuDevice& device : gpus) {
    largest = std::max(largest, ++count[KindOf(device)]);
  }
  if (kind.empty()) return largest;
  auto it = count.find(kind);
  return it == count.end() ? 0 : it->second;
}

// The kind a probe's GPUs are taken of on a worker: the probe's, or for a
// pinned probe the worker's most numerous kind (the first GPU's on a tie).
std::string KindFor(const v1::Probe& probe,
                    const std::vector<v1::GpuDevice>& gpus) {
  if (!probe.gpu().empty()) return probe.gpu();
  std::string best;
  int best_count = 0;
  for (const v1::GpuDevice& device : gpus) {
    const std::string kind = KindOf(device);
    int n = 0;
    for (const v1::GpuDevice& other : gpus) {
      if (KindOf(other) == kind) ++n;
    }
    if (n > best_count) {
      best = kind;
      best_count = n;
    }
  }
  return best;
}

}  // namespace

std::string NoWorkerFor(const v1::Probe& probe,
                        const std::vector<ConnectedWorker>& workers) {
  const v1::SubmitProbeRequest& request = probe.request();
  const std::string& executor = request.executor();
  const int needed = static_cast<int>(GpusNeeded(probe));
  int connected = 0;
  bool placed = false;
  bool runs_executor = false;
  int largest = 0;  // the most GPUs of the kind on one matching node
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
    if (!executor.empty() && std::find(executors.begin(), executors.end(),
                                       executor) == executors.end()) {
      continue;
    }
    runs_executor = true;
    const int gpus = std::max(
        request.has_worker() ? 1 : 0,
        GpusOfKind(worker.gpus, request.has_worker() ? "" : probe.gpu()));
    largest = std::max(largest, gpus);
    if (gpus >= needed) return "";
  }
  if (connected == 0) return "no worker is connected";
  if (runs_executor) {
    const std::string kind =
        request.has_worker() ? "GPU" : probe.gpu().substr(0, 32);
    return absl::StrCat("needs ", needed, " x ", kind, " on one ",
                        request.has_worker() ? "worker" : "node", "; the ",
                        request.has_worker() ? "worker" : "largest node",
                        " has ", largest);
  }
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

std::vector<uint32_t> AssignedGpuIndices(
    const v1::Probe& probe, const std::vector<v1::GpuDevice>& gpus) {
  const std::string kind = KindFor(probe, gpus);
  const uint32_t needed = GpusNeeded(probe);
  std::vector<uint32_t> indices;
  for (const v1::GpuDevice& gpu : gpus) {
    if (indices.size() < needed && KindOf(gpu) == kind) {
      indices.push_back(gpu.index());
    }
  }
  return indices;
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
  // The GPUs its ranks run on (an idle worker's GPUs are all free);
  // gpu_index is rank 0's. One GPU: no list.
  const std::vector<uint32_t> indices = AssignedGpuIndices(probe, gpus);
  if (!indices.empty()) assignment.set_gpu_index(indices.front());
  if (GpusNeeded(probe) > 1) {
    for (uint32_t index : indices) assignment.add_gpu_indices(index);
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

v1::PlannerMessage CancelMessage(const std::string& assignment_id,
                                 const std::string& reason) {
  v1::PlannerMessage cancel;
  cancel.mutable_cancel()->set_assignment_id(assignment_id);
  cancel.mutable_cancel()->set_reason(reason);
  return cancel;
}

absl::Status RenewOwnLease(Store* store, const std::string& worker,
                           const std::string& assignment_id,
                           int64_t lease_until_ms) {
  const size_t dot = assignment_id.rfind('.');
  if (dot == std::string::npos || dot == 0) {
    return absl::NotFoundError("not an assignment id");
  }
  ASSIGN_OR_RETURN(v1::Probe probe,
                   store->GetProbe(assignment_id.substr(0, dot)));
  RETURN_IF_ERROR(CheckLeased(probe, assignment_id, worker));
  return store->RenewLease(assignment_id, lease_until_ms);
}

absl::StatusOr<Learner::Worker> LearningWorker(
    const std::vector<ConnectedWorker>& workers, bool include_simulated) {
  std::optional<Learner::Worker> simulated;
  int connected = 0;
  for (const ConnectedWorker& worker : workers) {
    if (worker.draining) continue;
    ++connected;
    for (const v1::GpuDevice& device : worker.gpus) {
      const std::string kind = CatalogGpuForDriverName(device.name());
      absl::StatusOr<GpuInfo> card = FindGpu(kind);
      if (kind.empty() || !card.ok()) continue;
      const char* executor = device.simulated() ? "sim" : "torch";
      if (std::find(worker.executors.begin(), worker.executors.end(),
                    executor) == worker.executors.end()) {
        continue;
      }
      Learner::Worker found{worker.worker, card->name, card->memory_gb,
                            executor, device.simulated()};
      if (!device.simulated()) return found;
      if (!simulated.has_value()) simulated = found;
    }
  }
  if (simulated.has_value() && include_simulated) return *simulated;
  if (simulated.has_value()) {
    return absl::FailedPreconditionError(
        "only simulated workers are connected, and simulated runs anchor "
        "only questions that ask for them (set include_simulated)");
  }
  return absl::FailedPreconditionError(absl::StrCat(
      connected == 0 ? "no worker is connected"
                     : "no connected worker has a catalog GPU and an executor "
                       "that builds models (torch, or sim on a simulated "
                       "card)"));
}

std::vector<std::pair<std::string, int64_t>> NamedProbeCounts(
    const std::vector<std::pair<v1::Probe::State, int64_t>>& counts) {
  std::vector<std::pair<std::string, int64_t>> named;
  for (int state = v1::Probe::QUEUED; state <= v1::Probe::CANCELLED; ++state) {
    int64_t count = 0;
    for (const auto& [s, n] : counts) {
      if (s == state) count = n;
    }
    named.emplace_back(
        v1::Probe::State_Name(static_cast<v1::Probe::State>(state)), count);
  }
  return named;
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
