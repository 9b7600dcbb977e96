#ifndef HEADROOM_SERVER_SERVICE_LEARNER_H_
#define HEADROOM_SERVER_SERVICE_LEARNER_H_

// The seam through which the planner asks the fleet for a probe to learn a
// model it knows only by prior (CheckFitRequest.learn, --auto_probe=on).

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

class Learner {
 public:
  virtual ~Learner() = default;

  // A connected worker a learning probe can go to.
  struct Worker {
    std::string id;
    std::string gpu;  // catalog name
    double memory_gb = 0;
    std::string executor;  // "torch" on a real card, "sim" on a simulated
    bool simulated = false;
  };

  // A connected, idle-or-busy worker with a catalog GPU and an executor
  // that builds models: a real one first, a simulated one only when
  // `include_simulated`. FAILED_PRECONDITION says why there is none.
  virtual absl::StatusOr<Worker> WorkerFor(bool include_simulated) = 0;

  // The id of the queued or running learning probe for `key_id`, if any.
  virtual absl::StatusOr<std::optional<std::string>> Outstanding(
      const std::string& key_id) = 0;

  // Queues a learning probe of the request's model and setup at `batches`
  // on `worker` (few steps, after every operator probe); returns its id.
  virtual absl::StatusOr<std::string> QueueLearning(
      const v1::CheckFitRequest& request, const std::vector<uint32_t>& batches,
      const Worker& worker, const std::string& key_id) = 0;
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_LEARNER_H_
