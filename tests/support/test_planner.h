#ifndef HEADROOM_TESTS_SUPPORT_TEST_PLANNER_H_
#define HEADROOM_TESTS_SUPPORT_TEST_PLANNER_H_

// The configuration in-process test planners start from: loopback port 0,
// metrics on a free port, a throwaway store, the repo's catalog and data.

#include <string>

#include "server/service/planner_app.h"

namespace headroom::testing {

inline PlannerConfig TestPlannerConfig() {
  const std::string root = HEADROOM_SOURCE_DIR;
  PlannerConfig config;
  config.listen = "127.0.0.1:0";
  config.http_listen = "127.0.0.1:0";
  config.db_path = ":memory:";
  config.models_dir = root + "/models";
  config.runs_path = root + "/data/memory-runs.jsonl";
  config.energy_curves_path = root + "/data/energy-curves.json";
  return config;
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_TEST_PLANNER_H_
