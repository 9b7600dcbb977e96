#ifndef HEADROOM_SERVER_SERVICE_SCHEDULER_EXTENDER_H_
#define HEADROOM_SERVER_SERVICE_SCHEDULER_EXTENDER_H_

// The Kubernetes scheduler extender over HTTP (POST /scheduler/filter and
// /scheduler/prioritize): parses the request, decides on a bounded pool of
// its own and answers within a time budget, or passes the nodes through
// (fail open) with the reason logged and counted, so placement never waits
// on Headroom. The protocol and the decisions are the core's
// (core/scheduling/extender.h).

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/scheduling/extender.h"
#include "server/service/background_worker.h"
#include "server/service/http_server.h"
#include "server/service/metrics.h"

namespace headroom {

class SchedulerExtender {
 public:
  // The value of `key` in ConfigMap `name` of namespace `ns` (the
  // headroom.dev/job annotation's file): NOT_FOUND or INVALID_ARGUMENT when
  // the pod named it wrongly, UNAVAILABLE when the API cannot answer.
  using JobFileReader = std::function<absl::StatusOr<std::string>(
      const std::string& ns, const std::string& name, const std::string& key)>;
  struct Options {
    ExtenderOptions decide;
    // Reads headroom.dev/job files; empty: such pods are told the planner
    // reads no ConfigMaps.
    JobFileReader read_job_file;
    // Longest a call may take before its nodes pass through.
    absl::Duration budget = absl::Milliseconds(50);
    // Decisions waiting beyond these fail open at once.
    size_t max_queued = 64;
  };
  // The cards of the nodes connected workers run on, by node name (shared:
  // it is read on every call that names nodes only); null knows none.
  using NodeInventory =
      std::function<std::shared_ptr<const std::map<std::string, v1::Target>>()>;

  // `metrics` must outlive the extender.
  SchedulerExtender(CheckFitFn check_fit, NodeInventory inventory,
                    PlannerMetrics* metrics, Options options);
  SchedulerExtender(const SchedulerExtender&) = delete;
  SchedulerExtender& operator=(const SchedulerExtender&) = delete;

  // The two verbs, as HTTP answers: 200 with the protocol's JSON, or 400
  // naming the field of a malformed body.
  HttpServer::Answer Filter(const std::string& body);
  HttpServer::Answer Prioritize(const std::string& body);

  // Serves both verbs on `http` under /scheduler/.
  void Register(HttpServer* http);

 private:
  HttpServer::Answer Handle(const std::string& verb, const std::string& body);
  // Fills job->request.job from its headroom.dev/job ConfigMap, if any.
  absl::Status ReadJobFile(const ExtenderArgs& args, PodJob* job) const;

  CheckFitFn check_fit_;
  NodeInventory inventory_;
  PlannerMetrics* metrics_;
  Options options_;
  // Two threads decide; a decision that outlives its budget finishes there
  // and is dropped.
  std::vector<std::unique_ptr<BackgroundWorker>> pool_;
  std::atomic<size_t> next_{0};
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_SCHEDULER_EXTENDER_H_
