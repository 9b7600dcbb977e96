#ifndef HEADROOM_CLIENT_JOB_FLAGS_H_
#define HEADROOM_CLIENT_JOB_FLAGS_H_

// `headroom fit --job FILE [--deepspeed FILE] [--accelerate_config FILE]
// [--job_kind KIND]`: the job's own config files sent as CheckFitRequest.job
// (core/jobs/job_files.h derives the request from them on the planner),
// and what the planner made of them printed.

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/commands.h"
#include "headroom/v1/planner.pb.h"

namespace CLI {
class App;
}

namespace headroom::cli {

// Registers the job flags on `app`, writing into `options`.
void AddJobFlags(CLI::App* app, Options& options);

// With --job: reads the files into request->job (INVALID_ARGUMENT naming
// the flag and the file when one cannot be read or is over 1 MiB), with
// options.job_overrides as job.overrides. Without --job: OK, nothing set;
// --deepspeed, --accelerate_config or --job_kind alone is INVALID_ARGUMENT.
absl::Status FillJob(const Options& options, v1::CheckFitRequest* request);

// The derivation as text: the kind and model, then from_file, defaults,
// overridden and ignored, one line each.
void PrintJob(const v1::JobDerivation& job, std::ostream& out);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_JOB_FLAGS_H_
