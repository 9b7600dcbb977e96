#include "core/frontends/frontend_registry.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "core/frontends/hf_config.h"
#include "core/frontends/onnx_import.h"
#include "core/memory/model_spec.h"

namespace headroom {
namespace {

// A front-end's error with the field it came from in front.
absl::Status InField(absl::string_view field, const absl::Status& status) {
  return absl::Status(status.code(),
                      absl::StrCat(field, ": ", status.message()));
}

// A learned position table has as many rows as the model takes positions:
// setup.positions past the one of the full model `spec` is (`full`), or
// that a cut-down template was cut from, is INVALID_ARGUMENT naming the
// value and the maximum. Rotary and relative positions have no such limit.
absl::Status CheckPositionTable(const v1::ModelSpec& spec,
                                const FullModelSource* full,
                                const v1::TrainingSetup& setup,
                                const ModelCatalog& catalog) {
  if (setup.positions() == 0) return absl::OkStatus();
  std::string cut_from;
  if (full == nullptr) {
    cut_from = catalog.FullModelOf(spec.name());
    if (cut_from.empty()) return absl::OkStatus();
    full = catalog.FullModelSourceOf(cut_from);
    if (full == nullptr) return absl::OkStatus();
  }
  if (full->max_positions == 0 || setup.positions() <= full->max_positions) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "setup.positions = ", setup.positions(), " is past ", spec.name(),
      "'s learned position table (",
      cut_from.empty() ? "" : absl::StrCat("cut from ", cut_from, ": "),
      "models/", full->file, " sets ", full->max_positions_key, " ",
      full->max_positions, "); allowed 1..", full->max_positions));
}

// "template" / "spec": a name or a spec message, never read from a file by
// this front-end (spec files are SpecFrontend's).
class CatalogFrontend final : public ModelFrontend {
 public:
  v1::ModelRef::SourceCase source() const override {
    return v1::ModelRef::kTemplate;
  }
  absl::string_view field() const override { return "model.template"; }
  absl::string_view description() const override {
    return "a catalog name (a template or a full model: headroom models)";
  }
  bool ClaimsFile(absl::string_view, absl::string_view) const override {
    return false;
  }
  absl::Status SetFromFile(absl::string_view path, std::string,
                           v1::ModelRef*) const override {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a catalog entry is named, not read from a file"));
  }

  absl::StatusOr<ResolvedModel> Resolve(
      const v1::ModelRef& model, const v1::TrainingSetup& setup,
      const ModelCatalog& catalog) const override {
    absl::StatusOr<const v1::ModelSpec*> found =
        catalog.Find(model.template_());
    std::string alias_notice;
    if (!found.ok()) {
      // A Hub id, a litgpt name or a torchtune builder of a full model.
      absl::StatusOr<std::string> name = catalog.ResolveId(model.template_());
      if (!name.ok()) return found.status();
      found = catalog.Find(*name);
      if (!found.ok()) return found.status();
      alias_notice = absl::StrCat("'", model.template_().substr(0, 128),
                                  "' is the catalog's ", *name);
    }
    const v1::ModelSpec* spec = *found;
    ResolvedModel resolved;
    resolved.template_name = spec->name();
    if (!alias_notice.empty()) {
      resolved.assumptions.push_back(std::move(alias_notice));
    }
    // A template named after a model may be a part of it, as measured; a
    // full model comes from a published file: every answer says which.
    if (std::string notice =
            catalog.OriginNotice(spec->name(), "the answer is");
        !notice.empty()) {
      resolved.assumptions.push_back(std::move(notice));
    }
    const FullModelSource* full = catalog.FullModelSourceOf(spec->name());
    RETURN_IF_ERROR(CheckPositionTable(*spec, full, setup, catalog));
    if (full == nullptr || setup.positions() == 0 ||
        setup.positions() == spec->positions()) {
      resolved.catalog_spec = spec;
      if (full != nullptr) {
        for (const std::string& a : full->assumed_defaults) {
          resolved.assumptions.push_back(a);
        }
      }
      return resolved;
    }
    // Another length: the config converts again, so a learned position
    // table refuses what it cannot hold, exactly as the config itself would.
    HfOptions options;
    options.seq_len = setup.positions();
    absl::StatusOr<HfConversion> converted =
        SpecFromHfConfig(full->hf_config, options);
    if (!converted.ok()) {
      return InField(absl::StrCat("model.template ", spec->name(), " (models/",
                                  full->file, ")"),
                     converted.status());
    }
    resolved.owned_spec = std::move(converted->spec);
    // The catalog's name, as the load gave it (HfOptions::name would
    // rewrite its dots).
    resolved.owned_spec.set_name(spec->name());
    for (std::string& a : converted->assumed_defaults) {
      resolved.assumptions.push_back(std::move(a));
    }
    return resolved;
  }

  bool Imports(const v1::ModelRef&) const override { return false; }
  bool BindsPositions() const override { return false; }
};

// A spec in the catalog's JSON format (models/*.json).
class SpecFrontend final : public ModelFrontend {
 public:
  v1::ModelRef::SourceCase source() const override {
    return v1::ModelRef::kSpec;
  }
  absl::string_view field() const override { return "model.spec"; }
  absl::string_view description() const override {
    return "a model spec (JSON with \"layers\", as models/*.json)";
  }
  bool ClaimsFile(absl::string_view,
                  absl::string_view contents) const override {
    return absl::StrContains(contents, "\"layers\"");
  }
  absl::Status SetFromFile(absl::string_view path, std::string contents,
                           v1::ModelRef* ref) const override {
    // Its errors name `path`.
    absl::StatusOr<v1::ModelSpec> spec = ParseSpecJson(contents, path);
    if (!spec.ok()) return spec.status();
    *ref->mutable_spec() = std::move(*spec);
    return absl::OkStatus();
  }
  absl::StatusOr<ResolvedModel> Resolve(const v1::ModelRef& model,
                                        const v1::TrainingSetup&,
                                        const ModelCatalog&) const override {
    RETURN_IF_ERROR(ValidateSpec(model.spec()));
    ResolvedModel resolved;
    resolved.owned_spec = model.spec();
    return resolved;
  }
  bool Imports(const v1::ModelRef& model) const override {
    return model.spec().ByteSizeLong() > kSmallSpecBytes;
  }
  bool BindsPositions() const override { return false; }
};

// A Hugging Face config.json: JSON that names its model_type.
class HfConfigFrontend final : public ModelFrontend {
 public:
  v1::ModelRef::SourceCase source() const override {
    return v1::ModelRef::kHfConfig;
  }
  absl::string_view field() const override { return "model.hf_config"; }
  absl::string_view description() const override {
    return "a Hugging Face config.json (JSON with \"model_type\")";
  }
  bool ClaimsFile(absl::string_view,
                  absl::string_view contents) const override {
    return absl::StrContains(contents, "\"model_type\"");
  }
  absl::Status SetFromFile(absl::string_view, std::string contents,
                           v1::ModelRef* ref) const override {
    // The planner converts it (and refuses what does not parse).
    ref->set_hf_config(std::move(contents));
    return absl::OkStatus();
  }
  absl::StatusOr<ResolvedModel> Resolve(const v1::ModelRef& model,
                                        const v1::TrainingSetup& setup,
                                        const ModelCatalog&) const override {
    HfOptions options;
    options.seq_len = setup.positions();
    absl::StatusOr<HfConversion> converted =
        SpecFromHfConfig(model.hf_config(), options);
    if (!converted.ok()) return InField(field(), converted.status());
    ResolvedModel resolved;
    resolved.owned_spec = std::move(converted->spec);
    resolved.assumptions = std::move(converted->assumed_defaults);
    resolved.max_positions = converted->max_positions;
    resolved.max_positions_key = std::move(converted->max_positions_key);
    return resolved;
  }
  bool Imports(const v1::ModelRef&) const override { return true; }
  bool BindsPositions() const override { return false; }
};

// An ONNX ModelProto: a ".onnx" name, or ir_version (field 1, a varint) as
// its first byte, as exporters write it; JSON starts with '{'.
class OnnxFrontend final : public ModelFrontend {
 public:
  v1::ModelRef::SourceCase source() const override {
    return v1::ModelRef::kOnnx;
  }
  absl::string_view field() const override { return "model.onnx"; }
  absl::string_view description() const override {
    return "an ONNX model (a .onnx file)";
  }
  bool ClaimsFile(absl::string_view path,
                  absl::string_view contents) const override {
    return absl::EndsWithIgnoreCase(path, ".onnx") ||
           (!contents.empty() && contents[0] == '\x08');
  }
  absl::Status SetFromFile(absl::string_view, std::string contents,
                           v1::ModelRef* ref) const override {
    ref->set_onnx(std::move(contents));
    return absl::OkStatus();
  }
  absl::StatusOr<ResolvedModel> Resolve(const v1::ModelRef& model,
                                        const v1::TrainingSetup& setup,
                                        const ModelCatalog&) const override {
    OnnxOptions options;
    options.positions = setup.positions();
    absl::StatusOr<OnnxConversion> converted =
        SpecFromOnnx(model.onnx(), options);
    if (!converted.ok()) return InField(field(), converted.status());
    ResolvedModel resolved;
    resolved.owned_spec = std::move(converted->spec);
    resolved.assumptions = std::move(converted->notes);
    return resolved;
  }
  bool Imports(const v1::ModelRef&) const override { return true; }
  // The graph's symbolic lengths were bound to setup.positions.
  bool BindsPositions() const override { return true; }
};

}  // namespace

const std::vector<const ModelFrontend*>& ModelFrontends() {
  static const OnnxFrontend kOnnx;
  static const HfConfigFrontend kHfConfig;
  static const SpecFrontend kSpec;
  static const CatalogFrontend kCatalog;
  static const std::vector<const ModelFrontend*> kAll = {&kOnnx, &kHfConfig,
                                                         &kSpec, &kCatalog};
  return kAll;
}

const ModelFrontend* FrontendFor(v1::ModelRef::SourceCase source) {
  for (const ModelFrontend* frontend : ModelFrontends()) {
    if (frontend->source() == source) return frontend;
  }
  return nullptr;
}

absl::StatusOr<const ModelFrontend*> FrontendForFile(
    absl::string_view path, absl::string_view contents) {
  std::string kinds;
  for (const ModelFrontend* frontend : ModelFrontends()) {
    if (frontend->ClaimsFile(path, contents)) return frontend;
    if (frontend->source() == v1::ModelRef::kTemplate) continue;
    absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", frontend->description());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path.substr(0, 256), " is not a model file: it is none of ", kinds,
      "; add model_type to a config.json, or convert the model with "
      "headroom model convert"));
}

bool NamesAFile(absl::string_view model) {
  return absl::StrContains(model, '/') || absl::EndsWith(model, ".json") ||
         absl::EndsWithIgnoreCase(model, ".onnx");
}

absl::StatusOr<ResolvedModel> ResolveModelRef(const v1::ModelRef& model,
                                              const v1::TrainingSetup& setup,
                                              const ModelCatalog& catalog) {
  const ModelFrontend* frontend = FrontendFor(model.source_case());
  if (frontend == nullptr) {
    return absl::InvalidArgumentError(
        "model is empty; set model.template (a catalog name), model.spec, "
        "model.hf_config or model.onnx");
  }
  return frontend->Resolve(model, setup, catalog);
}

bool ImportsModel(const v1::ModelRef& model) {
  const ModelFrontend* frontend = FrontendFor(model.source_case());
  // An empty ref is refused at once: nothing to import.
  return frontend != nullptr && frontend->Imports(model);
}

v1::TrainingSetup ProfileSetup(const v1::ModelRef& model,
                               const v1::TrainingSetup& setup) {
  v1::TrainingSetup profiled = setup;
  const ModelFrontend* frontend = FrontendFor(model.source_case());
  if (frontend != nullptr && frontend->BindsPositions()) {
    profiled.clear_positions();
  }
  return profiled;
}

}  // namespace headroom
