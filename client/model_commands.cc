#include "client/model_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "client/commands.h"
#include "core/frontends/frontend_registry.h"
#include "core/frontends/hf_config.h"
#include "core/frontends/onnx_import.h"
#include "core/frontends/onnx_strip.h"
#include "core/memory/model_spec.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "io/files.h"

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

int ConvertOnnx(const std::string& path, const std::string& graph,
                uint64_t positions, const std::string& out_path,
                std::ostream& out, std::ostream& err) {
  OnnxOptions options;
  options.positions = positions;
  absl::StatusOr<OnnxConversion> converted = SpecFromOnnx(graph, options);
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

absl::StatusOr<v1::ModelRef> ReadModelFile(const std::string& path) {
  std::error_code size_error;
  const uintmax_t bytes = std::filesystem::file_size(path, size_error);
  if (size_error || !std::filesystem::is_regular_file(path, size_error)) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open ", path));
  }
  // What the registry judges: the whole text of a JSON file, the first bytes
  // of a binary one (an ONNX file is read again below without its weights).
  std::ifstream file(path, std::ios::binary);
  std::string head(static_cast<size_t>(std::min<uintmax_t>(
                       bytes, static_cast<uintmax_t>(kMaxModelTextBytes))),
                   '\0');
  if (!file.read(head.data(), static_cast<std::streamsize>(head.size()))) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  }
  ASSIGN_OR_RETURN(const ModelFrontend* frontend, FrontendForFile(path, head));
  v1::ModelRef ref;
  if (frontend->source() == v1::ModelRef::kOnnx) {
    ASSIGN_OR_RETURN(std::string graph, ReadOnnxGraph(path));
    RETURN_IF_ERROR(frontend->SetFromFile(path, std::move(graph), &ref));
    return ref;
  }
  if (bytes > kMaxModelTextBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", bytes, " bytes; ", frontend->description(),
                     " is allowed up to ", kMaxModelTextBytes));
  }
  RETURN_IF_ERROR(frontend->SetFromFile(path, std::move(head), &ref));
  return ref;
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
  absl::StatusOr<v1::ModelRef> ref = ReadModelFile(path);
  if (!ref.ok()) return Fail(err, std::string(ref.status().message()));
  if (ref->has_onnx()) {
    return ConvertOnnx(path, ref->onnx(), positions, out_path, out, err);
  }
  if (!ref->has_hf_config()) {
    return Fail(err, absl::StrCat(path,
                                  " is already a spec; model convert takes a "
                                  "Hugging Face config.json or an ONNX model"));
  }
  HfOptions options;
  options.seq_len = positions;
  absl::StatusOr<HfConversion> converted =
      SpecFromHfConfig(ref->hf_config(), options);
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
