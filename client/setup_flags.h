#ifndef HEADROOM_CLIENT_SETUP_FLAGS_H_
#define HEADROOM_CLIENT_SETUP_FLAGS_H_

// The training-setup flags every model command takes (--precision,
// --optimizer, --attention, --lora_rank, ...), one per key of the setup
// vocabulary (core/setup/setup_words.h), turned into the API's
// TrainingSetup. Only the flags given are sent: the planner assumes the
// rest and says so.

#include <ostream>
#include <string>
#include <vector>

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
// vocabulary has no word for, or a number out of its range; the planner
// checks the combinations.
absl::Status FillSetup(const Options& options, v1::TrainingSetup* setup);

// Whether --gpus auto asks for the smallest GPU count (CheckFitRequest's
// min_gpus).
bool MinGpusAsked(const Options& options);

// The TrainingSetup field paths the given setup flags set (lora.rank,
// activation_checkpointing for --checkpointing full): what a --job file's
// derivation calls overridden.
std::vector<std::string> GivenSetupFields(const Options& options);

// headroom setup-words [--json]: the vocabulary as a Markdown table, or as
// the JSON the Python client reads. Returns 0.
int ListSetupWords(const Options& options, std::ostream& out);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_SETUP_FLAGS_H_
