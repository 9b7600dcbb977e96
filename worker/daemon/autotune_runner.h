#ifndef HEADROOM_WORKER_DAEMON_AUTOTUNE_RUNNER_H_
#define HEADROOM_WORKER_DAEMON_AUTOTUNE_RUNNER_H_

// The worker's side of microbatch autotuning (README.md, "Energy, microbatches
// and density"): the search over the planned candidates runs here, next to the
// GPU, with no round trip to the planner per candidate, and ends in an autotune
// record in microbatch-autotune.json's format.

#include <atomic>
#include <string>

#include "headroom/v1/fleet.pb.h"
#include "worker/daemon/executor.h"

namespace headroom::worker {

// Runs the autotune search of `assignment` (its `autotune` set) on
// `executor`, one candidate at a time, each as a one-run assignment whose
// samples and result go to `sink` (runs carry the mode; repetition 0):
//  - per mode, eager first, then compiled when the request compiles:
//    VerifyThenBisect over the plan's classes of that mode; a run fits when
//    it did not go OOM and its allocator peak is within the plan's budget;
//    a run that fails otherwise (an executor error) ends that mode's search;
//  - under max_throughput, every candidate up to the largest fit is then
//    measured too (throughput needs a measurement; smaller never OOMs);
//  - candidates in assignment.measured() are taken from there, not run
//    again (a re-queued assignment resumes).
// The record: the key AutotuneKeyFor(autotune, spec, gpu,
// framework_versions); one measurement per completed run (peaks and budget
// converted to the record's GiB; microbatch_seconds = the executor's step
// seconds); failures: "oom", "error: ..." for a failed run, and for a
// candidate not run "inferred_oom" (a smaller one in its mode did not fit),
// "predicted_oom" (the plan ruled it out) or "not_measured"; the selection
// by SelectMicrobatch under the policy. A stop (cancel or shutdown) ends
// the search like the executor's own Run does, without a record.
ExecutionOutcome RunAutotune(
    const v1::Assignment& assignment, const v1::GpuDevice& gpu,
    const google::protobuf::Map<std::string, std::string>& framework_versions,
    Executor* executor, ExecutionSink* sink,
    const std::atomic<StopReason>& stop);

}  // namespace headroom::worker

#endif  // HEADROOM_WORKER_DAEMON_AUTOTUNE_RUNNER_H_
