#include "client/model_commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <system_error>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "base/json_io.h"
#include "base/status_macros.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/commands.h"
#include "client/flag_errors.h"
#include "client/setup_flags.h"
#include "core/catalog/model_catalog.h"
#include "core/frontends/frontend_registry.h"
#include "core/frontends/hf_config.h"
#include "core/frontends/onnx_import.h"
#include "core/frontends/onnx_strip.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/memory/training_setup.h"
#include "core/planner/fit_planner.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "io/catalog_files.h"
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

// The model states by kind and the parameter counts under the setup, as
// the README's model inspect section says: "model states (GB): weights
// 2.472, gradients 2.472, ...", then "parameters: 1235814400 trainable,
// ...". A kind the setup does not have (no adapters) is left out.
void PrintStatesByKind(const v1::ModelReport& report, std::ostream& out) {
  const v1::ModelStatesGb& s = report.states();
  out << absl::StrFormat(
      "model states (GB): weights %.3f, gradients %.3f, optimizer state "
      "%.3f, 16-bit copies %.3f, step temporaries %.3f",
      s.weights(), s.gradients(), s.optimizer_state(), s.half_copies(),
      s.update_temporaries());
  if (s.in_backward_buffers() > 0) {
    out << absl::StrFormat(", in-backward buffers %.3f",
                           s.in_backward_buffers());
  }
  if (s.dequantized() > 0) {
    out << absl::StrFormat(", dequantized %.3f", s.dequantized());
  }
  out << "\n"
      << absl::StrFormat("parameters: %.0f trainable",
                         report.trainable_params());
  if (report.adapter_params() > 0) {
    out << absl::StrFormat(" (of them %.0f adapters)", report.adapter_params());
  }
  out << absl::StrFormat(", %.0f frozen", report.frozen_params());
  if (report.quantized_params() > 0) {
    out << absl::StrFormat(", %.0f quantized", report.quantized_params());
  }
  out << "\n";
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

namespace {

// The spec named by --model, resolved by its front-end as the planner would
// (a catalog name, a spec file, a Hugging Face config.json, an ONNX model) at
// `setup`; `ref` is the model as read.
absl::StatusOr<ResolvedModel> ResolveSpec(const Options& options,
                                          const v1::TrainingSetup& setup,
                                          const ModelCatalog& catalog,
                                          v1::ModelRef* ref) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(options.model, ec)) {
    ASSIGN_OR_RETURN(*ref, ReadModelFile(options.model));
  } else {
    ref->set_template_(options.model);
  }
  return ResolveModelRef(*ref, setup, catalog);
}

}  // namespace

int ModelInspect(const Options& options, std::ostream& out, std::ostream& err) {
  if (options.model.empty()) {
    return Fail(err,
                "a model is required: headroom model inspect TEMPLATE|FILE");
  }
  uint64_t batch = 1;
  if (!options.batch.empty() && (!absl::SimpleAtoi(options.batch, &batch) ||
                                 batch == 0 || batch > (1u << 20))) {
    return Fail(err, "--batch '" + options.batch +
                         "' is out of range; allowed 1..1048576 (one value)");
  }
  // A file needs no catalog: inspecting one works without --models_dir.
  absl::StatusOr<ModelCatalog> catalog = LoadModelCatalog(options.models_dir);
  std::error_code ec;
  if (!catalog.ok() && std::filesystem::is_regular_file(options.model, ec)) {
    catalog = ModelCatalog();
  }
  if (!catalog.ok()) return Fail(err, catalog.status());
  v1::TrainingSetup asked;
  if (absl::Status status = FillSetup(options, &asked); !status.ok()) {
    return Fail(err, status);
  }
  v1::ModelRef ref;
  absl::StatusOr<ResolvedModel> resolved =
      ResolveSpec(options, asked, *catalog, &ref);
  if (!resolved.ok()) return Fail(err, resolved.status());
  const v1::ModelSpec* spec = &resolved->spec();
  // A conversion that bound the lengths (ONNX) is not rescaled again.
  const v1::TrainingSetup setup = ProfileSetup(ref, asked);
  absl::StatusOr<MemoryProfile> profile = BuildProfile(*spec, setup);
  // Computed here, not by the planner: its field paths named as flags too.
  if (!profile.ok()) {
    return Fail(err, FlagsForFieldPaths(std::string(profile.status().message()),
                                        options));
  }
  absl::StatusOr<std::vector<LayerShare>> shares = LayerBreakdown(*spec, setup);
  if (!shares.ok()) {
    return Fail(err, FlagsForFieldPaths(std::string(shares.status().message()),
                                        options));
  }

  v1::ModelReport report;
  report.set_model(spec->name());
  report.set_params(static_cast<double>(profile->params));
  const ModelStates& states = profile->states;
  report.set_trainable_params(static_cast<double>(states.trainable));
  report.set_adapter_params(static_cast<double>(states.adapter_params));
  report.set_frozen_params(static_cast<double>(
      states.params - (states.trainable - states.adapter_params)));
  report.set_quantized_params(static_cast<double>(states.quantized_params));
  v1::ModelStatesGb* gb = report.mutable_states();
  gb->set_weights(states.weights / 1e9);
  gb->set_gradients(states.gradients / 1e9);
  gb->set_optimizer_state(states.states / 1e9);
  gb->set_half_copies(states.half_copies / 1e9);
  gb->set_update_temporaries(states.update_temporaries / 1e9);
  gb->set_in_backward_buffers(states.in_backward_buffers / 1e9);
  gb->set_dequantized(states.dequantized / 1e9);
  report.set_batch(static_cast<uint32_t>(batch));
  SetComponentsGb(profile->BytesAt(batch), report.mutable_components());
  SetComponentsGb(profile->update_bytes, report.mutable_update_components());
  for (const LayerShare& share : *shares) {
    v1::LayerReport* layer = report.add_layers();
    layer->set_name(share.name);
    layer->set_repeat(share.repeat);
    layer->set_params(static_cast<double>(share.params));
    ComponentArray bytes = share.per_sample_bytes;
    for (double& b : bytes) b *= static_cast<double>(batch);
    SetComponentsGb(bytes, layer->mutable_components());
  }
  if (!spec->input_source().empty()) {
    report.add_assumptions("input shapes: " + spec->input_source());
  }
  if (!spec->notes().empty()) report.add_assumptions("notes: " + spec->notes());
  // The front-end's lines (where a catalog model came from, a config's
  // assumed defaults), less those the spec's notes already hold.
  const bool from_config =
      ref.has_hf_config() ||
      catalog->FullModelSourceOf(resolved->template_name) != nullptr;
  const std::string origin =
      catalog->OriginNotice(resolved->template_name, "the answer is");
  for (const std::string& a : resolved->assumptions) {
    if (absl::StrContains(spec->notes(), a)) continue;
    if (!origin.empty() && a == origin) {
      report.add_assumptions(
          catalog->OriginNotice(resolved->template_name, "these figures are"));
    } else {
      report.add_assumptions(from_config ? "default " + a : a);
    }
  }
  for (std::string& a : SetupAssumptions(*spec, setup, states)) {
    report.add_assumptions(std::move(a));
  }
  if (options.json) {
    out << CliJson(report) << "\n";
    return 0;
  }
  out << std::fixed << std::setprecision(3);
  out << report.model() << ": " << profile->params << " parameters ("
      << states.trainable << " trained"
      << (states.adapter_params != 0
              ? absl::StrCat(", of them ", states.adapter_params, " adapters")
              : "")
      << "), batch " << batch << "; GB before factors\n";
  out << std::left << std::setw(28) << "layer" << std::right << std::setw(7)
      << "repeat" << std::setw(14) << "params" << std::setw(10) << "outputs"
      << std::setw(10) << "attention" << std::setw(10) << "internal"
      << std::setw(11) << "recurrent" << std::setw(11) << "transient"
      << "\n";
  for (const v1::LayerReport& layer : report.layers()) {
    const v1::ComponentsGb& c = layer.components();
    out << std::left << std::setw(28) << layer.name().substr(0, 27)
        << std::right << std::setw(7) << layer.repeat() << std::setw(14)
        << std::setprecision(0) << layer.params() << std::setprecision(3)
        << std::setw(10) << c.outputs() << std::setw(10) << c.attention()
        << std::setw(10) << c.internal() << std::setw(11) << c.recurrent()
        << std::setw(11) << c.transient() << "\n";
  }
  const v1::ComponentsGb& t = report.components();
  out << "backward start: optimizer " << t.optimizer() << ", outputs "
      << t.outputs() << ", attention " << t.attention() << ", internal "
      << t.internal() << ", recurrent " << t.recurrent() << ", transient "
      << t.transient() << "\n";
  out << "optimizer update: optimizer "
      << report.update_components().optimizer()
      << " (weights, state, gradients, the update's temporaries)\n";
  PrintStatesByKind(report, out);
  for (const std::string& a : report.assumptions()) {
    // The conversion's words name its own option; the CLI's is --positions.
    out << "- "
        << absl::StrReplaceAll(
               a, {{"pass seq_len to change", "set --positions to change"}})
        << "\n";
  }
  return 0;
}

void RegisterModelCommands(CLI::App& app, CliContext& ctx) {
  Options& o = ctx.options;
  CLI::App* model = ctx.Command(&app, "model", "one model's memory, offline");
  CLI::App* inspect =
      ctx.Command(model, "inspect",
                  "where memory comes from (TEMPLATE, or FILE: a spec, "
                  "config.json or .onnx)");
  inspect->add_option("model", o.model, "TEMPLATE|FILE")->required();
  inspect->add_option("--batch", o.batch, "batch");
  AddSetupFlags(inspect, o);
  AddJson(inspect, o);
  ctx.Run(inspect,
          [&ctx] { return ModelInspect(ctx.options, ctx.out, ctx.err); });
  struct ConvertFlags {
    std::string file;
    std::string output;
  };
  ConvertFlags& c = ctx.Keep<ConvertFlags>();
  CLI::App* convert = ctx.Command(model, "convert",
                                  "a HF config.json or an ONNX file -> a spec");
  convert->add_option("file", c.file, "CONFIG.json|FILE.onnx")->required();
  convert->add_option("-o", c.output, "write the spec here (- = stdout)");
  convert->add_option("--positions", o.positions,
                      "sequence length / tokens per sample");
  ctx.Run(convert, [&ctx, &c] {
    return ModelConvert(c.file, ctx.options.positions, c.output, ctx.out,
                        ctx.err);
  });
}

}  // namespace headroom::cli
