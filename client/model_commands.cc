#include "client/model_commands.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "server/core/common/json_io.h"
#include "server/core/frontends/hf_config.h"
#include "server/core/memory/model_spec.h"

namespace headroom::cli {
namespace {

int Fail(std::ostream& err, const std::string& message) {
  err << "headroom: " << message << "\n";
  return 2;
}

}  // namespace

int ModelConvert(const std::string& config_path, uint64_t seq_len,
                 const std::string& out_path, std::ostream& out,
                 std::ostream& err) {
  // Refuse an oversized file before reading it into memory.
  std::error_code size_error;
  const uintmax_t bytes = std::filesystem::file_size(config_path, size_error);
  if (size_error) return Fail(err, absl::StrCat("cannot open ", config_path));
  if (bytes > kMaxHfConfigBytes) {
    return Fail(err, absl::StrCat(config_path, " is ", bytes,
                                  " bytes; a config.json is allowed up to ",
                                  kMaxHfConfigBytes));
  }
  absl::StatusOr<std::string> text = ReadFile(config_path);
  if (!text.ok()) return Fail(err, std::string(text.status().message()));
  HfOptions options;
  options.seq_len = seq_len;
  absl::StatusOr<HfConversion> converted = SpecFromHfConfig(*text, options);
  if (!converted.ok()) {
    return Fail(err,
                absl::StrCat(config_path, ": ", converted.status().message()));
  }
  const std::string json = ToJson(converted->spec, /*pretty=*/true) + "\n";
  const bool to_stdout = out_path.empty() || out_path == "-";
  std::ostream& report = to_stdout ? err : out;
  if (to_stdout) {
    out << json;
  } else {
    std::ofstream file(out_path, std::ios::binary);
    file << json;
    file.close();
    if (!file) return Fail(err, absl::StrCat("cannot write ", out_path));
    report << "wrote " << out_path << "\n";
  }
  report << "spec " << converted->spec.name() << ": "
         << CountParams(converted->spec) << " parameters, "
         << converted->spec.positions() << " positions per sample\n";
  if (converted->assumed_defaults.empty()) {
    report << "assumed defaults: none\n";
  } else {
    report << "assumed defaults (keys the config leaves out):\n";
    for (const std::string& line : converted->assumed_defaults) {
      report << "  " << line << "\n";
    }
  }
  for (const std::string& note : converted->notes) {
    report << "note: " << note << "\n";
  }
  return 0;
}

}  // namespace headroom::cli
