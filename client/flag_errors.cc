#include "client/flag_errors.h"

#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace headroom::cli {
namespace {

// Request field path (indexes dropped) -> the flag that sets it. The
// longest entry that is the path or a prefix of it at a '.' wins; any other
// setup.NAME is --NAME (the setup flags are named after their fields).
struct FieldFlag {
  absl::string_view field;
  absl::string_view flag;
};
constexpr FieldFlag kFieldFlags[] = {
    {"setup.lora.targets", "--lora_targets"},
    {"setup.lora.rank", "--lora_rank"},
    {"setup.lora.dropout", "--lora_dropout"},
    {"setup.lora", "--lora_rank"},
    {"setup.freeze.layers", "--freeze"},
    {"setup.freeze.train_last_blocks", "--train_last_blocks"},
    {"setup.freeze", "--freeze"},
    {"setup.activation_checkpointing", "--checkpointing"},
    {"batches", "--batch"},
    {"targets", "--gpu"},
    {"coverage", "--coverage"},
    {"min_gpus", "--gpus auto"},
    // microbatch plan and autotune (PlanMicrobatchRequest).
    {"context", "--positions"},
    {"attention_backend", "--attention"},
    {"microbatch_candidates", "--candidates"},
    {"global_batch", "--global_batch"},
    {"vram_fraction", "--vram_fraction"},
    {"reserve_gb", "--reserve_gb"},
    {"cache_key", "--cache_key"},
    // probe submit (SubmitProbeRequest) and energy (EstimateEnergyRequest).
    {"gpu", "--gpu"},
    {"repetitions", "--repetitions"},
    {"expires_s", "--expires_s"},
    {"params_b", "--params_b"},
    {"quant", "--quant"},
    {"arch", "--arch"},
};

bool PathChar(char c) {
  return absl::ascii_isalnum(c) || c == '_' || c == '.' || c == '[' || c == ']';
}

// "setup.lora.targets[0]" -> "setup.lora.targets".
std::string WithoutIndexes(absl::string_view path) {
  std::string out;
  bool in_index = false;
  for (char c : path) {
    if (c == '[') in_index = true;
    if (!in_index) out += c;
    if (c == ']') in_index = false;
  }
  return out;
}

// The file a model flag named, as the user wrote its last component.
std::string FileName(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// The flag (with the file it named, for a model file) for `path`, or empty.
std::string FlagFor(const std::string& path, const Options& options) {
  if (path == "model.onnx" && !options.onnx.empty()) {
    return absl::StrCat("--onnx ", FileName(options.onnx));
  }
  if (path == "model.hf_config" || path == "model.spec" ||
      path == "model.onnx") {
    return options.model.empty()
               ? "--model"
               : absl::StrCat("--model ", FileName(options.model));
  }
  if (path == "model.template") return "--model";
  absl::string_view best_flag;
  size_t best = 0;
  for (const FieldFlag& entry : kFieldFlags) {
    const bool match =
        path == entry.field ||
        (absl::StartsWith(path, entry.field) &&
         path.size() > entry.field.size() && path[entry.field.size()] == '.');
    if (match && entry.field.size() > best) {
      best = entry.field.size();
      best_flag = entry.flag;
    }
  }
  if (best > 0) return std::string(best_flag);
  if (absl::StartsWith(path, "setup.")) {
    const std::string name = path.substr(6);
    if (!name.empty() && name.find('.') == std::string::npos) {
      return absl::StrCat("--", name);
    }
  }
  return "";
}

}  // namespace

std::string FlagsForFieldPaths(const std::string& message,
                               const Options& options) {
  size_t end = 0;
  while (end < message.size() && PathChar(message[end])) ++end;
  if (end == 0) return message;
  const std::string path = WithoutIndexes(message.substr(0, end));
  const std::string flag = FlagFor(path, options);
  if (flag.empty()) return message;
  std::string rest = message.substr(end);
  // "setup.positions = 7 is ..." -> "--positions 7 is ...".
  if (absl::StartsWith(rest, " = ")) rest = " " + rest.substr(3);
  // The planner calls any config file config.json; the user named theirs.
  constexpr absl::string_view kConfigJson = ": config.json: ";
  if (path == "model.hf_config" && absl::StartsWith(rest, kConfigJson)) {
    rest = ": " + rest.substr(kConfigJson.size());
  }
  return flag + rest;
}

}  // namespace headroom::cli
