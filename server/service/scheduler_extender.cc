#include "server/service/scheduler_extender.h"

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "spdlog/spdlog.h"

namespace headroom {
namespace {

constexpr int kPoolThreads = 2;

HttpServer::Answer BadRequest(const absl::Status& status) {
  return {400, HttpServer::ErrorBody(std::string(status.message()))};
}

}  // namespace

absl::Status SchedulerExtender::ReadJobFile(const ExtenderArgs& args,
                                            PodJob* job) const {
  if (job->job_configmap.empty()) return absl::OkStatus();
  if (!options_.read_job_file) {
    return absl::FailedPreconditionError(
        "annotation headroom.dev/job: this planner reads no ConfigMaps (start "
        "it with --extender_kube_api); give headroom.dev/model and the setup "
        "annotations instead");
  }
  absl::StatusOr<std::string> content = options_.read_job_file(
      args.pod_namespace.empty() ? "default" : args.pod_namespace,
      job->job_configmap, job->job_key);
  if (!content.ok()) {
    return absl::Status(content.status().code(),
                        absl::StrCat("annotation headroom.dev/job: ConfigMap ",
                                     job->job_configmap, " key ", job->job_key,
                                     ": ", content.status().message()));
  }
  v1::JobFile* file = job->request.mutable_job()->mutable_job();
  file->set_name(absl::StrCat(job->job_configmap, "/", job->job_key));
  file->set_content(*std::move(content));
  return absl::OkStatus();
}

SchedulerExtender::SchedulerExtender(CheckFitFn check_fit,
                                     NodeInventory inventory,
                                     PlannerMetrics* metrics, Options options)
    : check_fit_(std::move(check_fit)),
      inventory_(std::move(inventory)),
      metrics_(metrics),
      options_(options) {
  for (int i = 0; i < kPoolThreads; ++i) {
    pool_.push_back(std::make_unique<BackgroundWorker>());
  }
}

HttpServer::Answer SchedulerExtender::Filter(const std::string& body) {
  return Handle("filter", body);
}

HttpServer::Answer SchedulerExtender::Prioritize(const std::string& body) {
  return Handle("prioritize", body);
}

void SchedulerExtender::Register(HttpServer* http) {
  http->HandlePost("/scheduler/filter",
                   [this](const std::string& body) { return Filter(body); });
  http->HandlePost("/scheduler/prioritize", [this](const std::string& body) {
    return Prioritize(body);
  });
}

HttpServer::Answer SchedulerExtender::Handle(const std::string& verb,
                                             const std::string& body) {
  const bool filter = verb == "filter";
  absl::StatusOr<ExtenderArgs> parsed = ParseExtenderArgs(body);
  if (!parsed.ok()) {
    metrics_->ExtenderCall(verb, "bad_request");
    spdlog::info("event=extender_bad_request verb={} error=\"{}\"", verb,
                 std::string(parsed.status().message()));
    return BadRequest(parsed.status());
  }
  auto args = std::make_shared<const ExtenderArgs>(*std::move(parsed));
  const auto untouched = [&] {
    return HttpServer::Answer{200, filter ? PassThroughFilterJson(*args)
                                          : ZeroPriorityListJson(*args)};
  };
  absl::StatusOr<std::optional<PodJob>> job =
      JobFromAnnotations(args->annotations, args->gpus);
  if (!job.ok()) {
    // The pod asks Headroom but says it wrongly: it fails every node with
    // the reason, which kube-scheduler shows in the pod's events.
    metrics_->ExtenderCall(verb, "bad_annotation");
    spdlog::info("event=extender_bad_annotation pod={} error=\"{}\"", args->pod,
                 std::string(job.status().message()));
    return {200, filter ? FailAllFilterJson(
                              *args, absl::StrCat("headroom: ",
                                                  job.status().message()))
                        : ZeroPriorityListJson(*args)};
  }
  if (!job->has_value()) {
    metrics_->ExtenderCall(verb, "untouched");
    return untouched();
  }

  // The decision runs on the pool; this thread waits at most the budget.
  struct Shared {
    absl::Notification done;
    std::string body;
    absl::Status status;
    // The job file could not be read for want of the API: fail open.
    bool api_down = false;
    int64_t filtered_out = 0;
  };
  auto shared = std::make_shared<Shared>();
  auto request = std::make_shared<PodJob>(**std::move(job));
  const bool posted = pool_[next_++ % pool_.size()]->Post(
      [this, filter, args, request, shared] {
        std::vector<std::optional<v1::Target>> targets;
        targets.reserve(args->nodes.size());
        std::shared_ptr<const std::map<std::string, v1::Target>> inventory;
        // Nodes of one kind share their labels: each pair read once.
        std::map<std::pair<std::string_view, double>, std::optional<v1::Target>>
            by_labels;
        for (const ExtenderNode& node : args->nodes) {
          auto [cached, inserted] = by_labels.try_emplace(std::make_pair(
              std::string_view(node.gpu_product), node.gpu_memory_mib));
          if (inserted) cached->second = TargetFromLabels(node);
          if (cached->second.has_value()) {
            targets.push_back(cached->second);
            continue;
          }
          if (inventory == nullptr) {
            inventory = inventory_();
            if (inventory == nullptr) {
              inventory =
                  std::make_shared<const std::map<std::string, v1::Target>>();
            }
          }
          auto it = inventory->find(node.name);
          targets.push_back(it != inventory->end()
                                ? std::optional<v1::Target>(it->second)
                                : std::nullopt);
        }
        if (absl::Status read = ReadJobFile(*args, request.get()); !read.ok()) {
          shared->status = read;
          shared->api_down = read.code() == absl::StatusCode::kUnavailable;
          shared->done.Notify();
          return;
        }
        absl::StatusOr<std::vector<NodeDecision>> decisions =
            DecideNodes(*request, *args, targets, check_fit_, options_.decide);
        if (!decisions.ok()) {
          shared->status = decisions.status();
        } else if (filter) {
          for (const NodeDecision& d : *decisions) {
            if (!d.passes) ++shared->filtered_out;
          }
          shared->body = FilterResultJson(*args, *decisions);
        } else {
          shared->body = PriorityListJson(*args, *decisions, options_.decide);
        }
        shared->done.Notify();
      },
      options_.max_queued);
  const char* fail_open_why = nullptr;
  if (!posted) {
    fail_open_why = "too many decisions queued";
  } else if (!shared->done.WaitForNotificationWithTimeout(options_.budget)) {
    fail_open_why = "over its time budget";
  } else if (shared->api_down) {
    fail_open_why = "the Kubernetes API did not answer for headroom.dev/job";
  }
  if (fail_open_why != nullptr) {
    metrics_->ExtenderCall(verb, "fail_open");
    spdlog::warn(
        "event=extender_fail_open verb={} pod={} nodes={} budget_ms={} "
        "why=\"{}\"",
        verb, args->pod, args->nodes.size(),
        absl::ToInt64Milliseconds(options_.budget), fail_open_why);
    return untouched();
  }
  if (!shared->status.ok()) {
    // A model the catalog lacks is the pod's mistake, said on every node.
    metrics_->ExtenderCall(verb, "bad_annotation");
    return {200, filter ? FailAllFilterJson(
                              *args, absl::StrCat("headroom: ",
                                                  shared->status.message()))
                        : ZeroPriorityListJson(*args)};
  }
  metrics_->ExtenderCall(verb, "answered");
  if (shared->filtered_out > 0) {
    metrics_->ExtenderNodesFilteredOut(shared->filtered_out);
  }
  return {200, std::move(shared->body)};
}

}  // namespace headroom
