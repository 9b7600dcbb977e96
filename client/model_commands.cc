#include "client/model_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/commands.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "server/core/common/json_io.h"
#include "server/core/common/status_macros.h"
#include "server/core/frontends/hf_config.h"
#include "server/core/frontends/onnx_import.h"
#include "server/core/frontends/onnx_strip.h"
#include "server/core/memory/model_spec.h"
#include "server/io/files.h"

namespace headroom::cli {
namespace {

// Writes the spec to OUT (or `out` for "-") and returns the stream the
// report goes to; nullptr after a failure written to `err`.
std::ostream* WriteSpec(const v1::ModelSpec& spec, const std::string& out_path,
                        std::ostream& out, std::ostream& err) {
  const std::string json = ToJson(spec, /*pretty=*/true) + "\n";
  if (out_path.empty() || out_path == "-") {
    out << json;
    return &err;
  }
  std::ofstream file(out_path, std::ios::binary);
  file << json;
  file.close();
  if (!file) {
    Fail(err, absl::StrCat("cannot write ", out_path));
    return nullptr;
  }
  out << "wrote " << out_path << "\n";
  return &out;
}

int ConvertOnnx(const std::string& path, uint64_t positions,
                const std::string& out_path, std::ostream& out,
                std::ostream& err) {
  absl::StatusOr<std::string> graph = ReadOnnxGraph(path);
  if (!graph.ok()) return Fail(err, std::string(graph.status().message()));
  OnnxOptions options;
  options.positions = positions;
  absl::StatusOr<OnnxConversion> converted = SpecFromOnnx(*graph, options);
  if (!converted.ok()) {
    return Fail(err, absl::StrCat(path, ": ", converted.status().message()));
  }
  std::ostream* report = WriteSpec(converted->spec, out_path, out, err);
  if (report == nullptr) return 2;
  *report << "spec " << converted->spec.name() << ": "
          << CountParams(converted->spec) << " parameters, "
          << converted->spec.positions() << " positions per sample, "
          << converted->spec.layers_size() << " top-level layers\n";
  for (const std::string& note : converted->notes) {
    *report << "note: " << note << "\n";
  }
  return 0;
}

}  // namespace

bool IsOnnxFile(const std::string& path) {
  if (absl::EndsWithIgnoreCase(path, ".onnx")) return true;
  std::ifstream file(path, std::ios::binary);
  char first = 0;
  // ModelProto.ir_version: field 1, varint.
  return file.get(first) && first == '\x08';
}

absl::StatusOr<std::string> ReadOnnxGraph(const std::string& path) {
  std::error_code size_error;
  const uintmax_t bytes = std::filesystem::file_size(path, size_error);
  if (size_error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", path));
  }
  if (bytes > kMaxOnnxFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", bytes, " bytes; an ONNX file holds at most ",
                     kMaxOnnxFileBytes,
                     " (larger models keep their weights in external "
                     "data files: pass the .onnx file alone)"));
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", path));
  }
  google::protobuf::io::FileInputStream input(fd);
  input.SetCloseOnDelete(true);
  absl::StatusOr<std::string> graph = StripOnnxWeights(&input, kMaxOnnxBytes);
  if (!graph.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", graph.status().message()));
  }
  return graph;
}

int ModelConvert(const std::string& path, uint64_t positions,
                 const std::string& out_path, std::ostream& out,
                 std::ostream& err) {
  if (IsOnnxFile(path)) {
    return ConvertOnnx(path, positions, out_path, out, err);
  }
  // Refuse an oversized file before reading it into memory.
  std::error_code size_error;
  const uintmax_t bytes = std::filesystem::file_size(path, size_error);
  if (size_error) return Fail(err, absl::StrCat("cannot open ", path));
  if (bytes > kMaxHfConfigBytes) {
    return Fail(err, absl::StrCat(path, " is ", bytes,
                                  " bytes; a config.json is allowed up to ",
                                  kMaxHfConfigBytes));
  }
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return Fail(err, std::string(text.status().message()));
  HfOptions options;
  options.seq_len = positions;
  absl::StatusOr<HfConversion> converted = SpecFromHfConfig(*text, options);
  if (!converted.ok()) {
    return Fail(err, absl::StrCat(path, ": ", converted.status().message()));
  }
  std::ostream* written = WriteSpec(converted->spec, out_path, out, err);
  if (written == nullptr) return 2;
  std::ostream& report = *written;
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
