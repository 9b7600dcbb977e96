#ifndef HEADROOM_CLIENT_FLAG_ERRORS_H_
#define HEADROOM_CLIENT_FLAG_ERRORS_H_

// The planner names what is wrong by the request's field path
// ("setup.lora.targets[0] = 'zz' is not allowed; ...", "model.hf_config:
// config.json: hidden_size = -1 ..."); the CLI's user gave flags and files.
// This maps the one to the other before an error is printed.

#include <string>

#include "client/commands.h"

namespace headroom::cli {

// `message` with a leading request field path replaced by the flag that
// sets it, from one table (setup.lora.targets -> --lora_targets, batches ->
// --batch, targets -> --gpu, context -> --positions, ...; any other
// setup.NAME -> --NAME): "--lora_targets 'zz' is not allowed; ...". A model
// file's errors name the flag and the file the user gave ("--model
// absurd.json: hidden_size = -1 ..." for model.hf_config: config.json:).
// A message that starts with no known path is returned unchanged.
std::string FlagsForFieldPaths(const std::string& message,
                               const Options& options);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_FLAG_ERRORS_H_
