#ifndef HEADROOM_CLIENT_MODEL_COMMANDS_H_
#define HEADROOM_CLIENT_MODEL_COMMANDS_H_

// `headroom model ...`: model front-ends run offline, without a server.

#include <cstdint>
#include <ostream>
#include <string>

namespace headroom::cli {

// headroom model convert CONFIG [--seq-len N] -o OUT: converts a Hugging Face
// config.json into a spec in the catalog's JSON format (models/*.json) and
// writes it to OUT, then prints the parameter count, each default assumed
// for a key the config left out, and the conversion notes. With OUT empty or
// "-" the spec goes to `out` and the rest to `err`, so stdout stays JSON.
// seq_len 0 takes the config's own length (see HfOptions::seq_len). Returns
// 0, or 2 for a missing, oversized or unconvertible config or an unwritable
// OUT (the reason goes to `err`).
int ModelConvert(const std::string& config_path, uint64_t seq_len,
                 const std::string& out_path, std::ostream& out,
                 std::ostream& err);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_MODEL_COMMANDS_H_
