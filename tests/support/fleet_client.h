#ifndef HEADROOM_TESTS_SUPPORT_FLEET_CLIENT_H_
#define HEADROOM_TESTS_SUPPORT_FLEET_CLIENT_H_

// Client-side helpers the fleet tests and benchmarks share: a probe as the
// planner stores it now, which workers it counts as connected, and a bounded
// poll. Loopback planners only; every call carries a deadline.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "grpcpp/grpcpp.h"
#include "headroom/v1/fleet.grpc.pb.h"

namespace headroom::testing {

// The probe `id` read with WatchProbe without following; nullopt when the
// call fails (unknown id, planner down, past `timeout`).
inline std::optional<v1::Probe> ProbeSnapshot(
    v1::Fleet::Stub* fleet, const std::string& id,
    std::chrono::milliseconds timeout = std::chrono::seconds(2)) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + timeout);
  v1::WatchProbeRequest request;
  request.set_id(id);
  auto reader = fleet->WatchProbe(&context, request);
  v1::ProbeEvent event;
  std::optional<v1::Probe> probe;
  for (int i = 0; i < 100000 && reader->Read(&event); ++i) {
    if (event.has_probe()) probe = event.probe();
  }
  if (!reader->Finish().ok()) return std::nullopt;
  return probe;
}

// Worker id -> whether the planner counts it as connected (to it or, by a
// fresh last-seen, to another replica); empty when the call fails. Waits
// for the channel to connect (within the call's 2 s): a call that failed
// fast would leave a connect attempt nobody drives, and a planner just
// started would look down for seconds.
inline std::map<std::string, bool> WorkersConnected(v1::Fleet::Stub* fleet) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(2));
  context.set_wait_for_ready(true);
  v1::ListWorkersResponse response;
  std::map<std::string, bool> out;
  if (!fleet->ListWorkers(&context, {}, &response).ok()) return out;
  for (const auto& w : response.workers()) {
    out[w.hello().worker_id()] = w.connected();
  }
  return out;
}

// Polls `done` every 20 ms until it holds (true) or `seconds` pass (false).
template <typename Done>
bool WaitFor(Done done, int seconds) {
  const auto until =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  for (int i = 0; i < seconds * 50; ++i) {
    if (done()) return true;
    if (std::chrono::steady_clock::now() > until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace headroom::testing

#endif  // HEADROOM_TESTS_SUPPORT_FLEET_CLIENT_H_
