#ifndef HEADROOM_CLIENT_SETUP_FLAGS_H_
#define HEADROOM_CLIENT_SETUP_FLAGS_H_

// The training-setup flags every model command takes (--precision,
// --optimizer, --attention, --lora_rank, ...), turned into the API's
// TrainingSetup.

#include "absl/status/status.h"
#include "client/commands.h"
#include "headroom/v1/model.pb.h"

namespace CLI {
class App;
}

namespace headroom::cli {

// Registers the setup flags on `app`, writing into `options`; without
// `compile_flag` where the command's own --compile means something else.
void AddSetupFlags(CLI::App* app, Options& options, bool compile_flag = true);

// INVALID_ARGUMENT naming the flag and its allowed values for a value the
// setup has no word for; the planner checks the combinations.
absl::Status FillSetup(const Options& options, v1::TrainingSetup* setup);

// Whether --gpus auto asks for the smallest GPU count (CheckFitRequest's
// min_gpus).
bool MinGpusAsked(const Options& options);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_SETUP_FLAGS_H_
