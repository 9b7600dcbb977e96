#ifndef HEADROOM_CLIENT_MODEL_COMMANDS_H_
#define HEADROOM_CLIENT_MODEL_COMMANDS_H_

// `headroom model ...`: model front-ends run offline, without a server.

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/commands.h"
#include "headroom/v1/planner.pb.h"

namespace CLI {
class App;
}  // namespace CLI

namespace headroom::cli {

class CliContext;

// Reads the model file `path` into the ModelRef field its front-end fills,
// the kind decided by the front-end registry (frontend_registry.h): an ONNX
// model without its weight data (ReadOnnxGraph), a Hugging Face config.json
// or a spec (up to kMaxModelTextBytes). INVALID_ARGUMENT naming the file for
// a missing, oversized or unrecognized file or a spec that does not parse.
absl::StatusOr<v1::ModelRef> ReadModelFile(const std::string& path);

// Reads an ONNX model file (up to kMaxOnnxFileBytes) without its weight
// data, in one pass that holds only what it keeps (onnx_strip.h): the bytes
// to send as ModelRef.onnx or to convert. INVALID_ARGUMENT naming the file
// for a missing, oversized or non-ONNX file.
absl::StatusOr<std::string> ReadOnnxGraph(const std::string& path);

// headroom model convert FILE [--positions N] -o OUT: converts a Hugging
// Face config.json or an ONNX model (ReadModelFile) into a spec in the
// catalog's JSON format (models/*.json) and writes it to OUT, then prints the
// parameter count, each default assumed for a key the config left out (for
// ONNX: the batch axis and what the conversion decided), and the conversion
// notes. With OUT empty or "-" the spec goes to `out` and the rest to `err`, so
// stdout stays JSON. positions 0 takes the config's own length (see
// HfOptions::seq_len); for ONNX it binds the graph's symbolic lengths. Returns
// 0, or 2 for a missing, oversized or unconvertible file or an unwritable OUT
// (the reason goes to `err`).
int ModelConvert(const std::string& path, uint64_t positions,
                 const std::string& out_path, std::ostream& out,
                 std::ostream& err);

// headroom model inspect TEMPLATE|FILE [--batch N] [--positions N] [--json]:
// parameters, each top-level layer's bytes per component, the assumptions.
// FILE is a spec, a Hugging Face config.json or an ONNX model.
int ModelInspect(const Options& options, std::ostream& out, std::ostream& err);

// Registers `headroom model inspect` and `headroom model convert` on `app`.
void RegisterModelCommands(CLI::App& app, CliContext& ctx);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_MODEL_COMMANDS_H_
