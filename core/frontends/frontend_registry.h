#ifndef HEADROOM_CORE_FRONTENDS_FRONTEND_REGISTRY_H_
#define HEADROOM_CORE_FRONTENDS_FRONTEND_REGISTRY_H_

// The ways a model reaches the planner, in one place: a catalog template (or
// full model) by name, a spec, a Hugging Face config.json, an ONNX graph.
// Each is a ModelFrontend; the registry decides which one a ModelRef or a
// model file is for, so the planner, the fleet and the CLI never decide a
// model's kind themselves. Plain C++: bytes in, specs out, no I/O.

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/catalog/model_catalog.h"
#include "headroom/v1/model.pb.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

// A request's model made concrete: a catalog spec (not copied) or one the
// request carried or a front-end derived, with the defaults it assumed.
struct ResolvedModel {
  const v1::ModelSpec* catalog_spec = nullptr;
  v1::ModelSpec owned_spec;
  // The catalog name (template or full model); empty for inline specs,
  // configs and graphs.
  std::string template_name;
  std::vector<std::string> assumptions;
  // A converted config's learned position table (HfConversion): the longest
  // sequence the model takes and its config key; 0 and "" otherwise.
  uint64_t max_positions = 0;
  std::string max_positions_key;

  const v1::ModelSpec& spec() const {
    return catalog_spec != nullptr ? *catalog_spec : owned_spec;
  }
};

// Serialized size up to which an inline spec answers as fast as a catalog
// template: it is validated layer by layer, so its cost grows with its size
// (the 7B decoder of bench/ is 298 bytes and answers in microseconds).
inline constexpr size_t kSmallSpecBytes = 4096;

// Largest JSON model file (a spec or a config.json) the CLI reads; an ONNX
// file has its own bound (client/model_commands.h).
inline constexpr size_t kMaxModelTextBytes = size_t{4} << 20;

// One way a model reaches the planner: the ModelRef field it fills, how a
// file of its kind is recognized and read into that field, and how the field
// becomes a spec. Implementations are stateless singletons.
class ModelFrontend {
 public:
  virtual ~ModelFrontend() = default;

  // The ModelRef field this front-end reads.
  virtual v1::ModelRef::SourceCase source() const = 0;

  // The field's name in messages ("model.hf_config").
  virtual absl::string_view field() const = 0;

  // What a user gives for it, in messages ("a Hugging Face config.json").
  virtual absl::string_view description() const = 0;

  // Whether a model file named `path` holds this front-end's input.
  // `contents` is the file's text for JSON kinds; a binary kind decides on
  // its name and first bytes, so a prefix of a large file suffices.
  virtual bool ClaimsFile(absl::string_view path,
                          absl::string_view contents) const = 0;

  // Fills this front-end's field of `ref` from a claimed file's contents
  // (for ONNX: the graph without its weights, as the CLI strips it).
  // INVALID_ARGUMENT naming `path` when they do not parse.
  virtual absl::Status SetFromFile(absl::string_view path, std::string contents,
                                   v1::ModelRef* ref) const = 0;

  // The spec `model` describes at `setup`'s lengths; INVALID_ARGUMENT or
  // NOT_FOUND naming the field. `catalog` must outlive the result.
  virtual absl::StatusOr<ResolvedModel> Resolve(
      const v1::ModelRef& model, const v1::TrainingSetup& setup,
      const ModelCatalog& catalog) const = 0;

  // Whether resolving `model` imports it (parsing and conversion, up to
  // seconds for a large graph) rather than finding or validating it in
  // microseconds.
  virtual bool Imports(const v1::ModelRef& model) const = 0;

  // Whether the resolved spec already describes setup.positions (its
  // conversion bound the lengths), so the memory model must not rescale it
  // again.
  virtual bool BindsPositions() const = 0;
};

// Every front-end, in the order a model file is judged: ONNX, Hugging Face
// config, spec, then the catalog (which claims no file).
const std::vector<const ModelFrontend*>& ModelFrontends();

// The front-end of a ModelRef source; nullptr for SOURCE_NOT_SET.
const ModelFrontend* FrontendFor(v1::ModelRef::SourceCase source);

// The front-end whose input the model file `path` holds (see
// ModelFrontend::ClaimsFile); INVALID_ARGUMENT naming the file and what each
// kind looks like when none claims it.
absl::StatusOr<const ModelFrontend*> FrontendForFile(
    absl::string_view path, absl::string_view contents);

// Whether a --model value names a file rather than a catalog entry: catalog
// names have no path separator and no model-file extension.
bool NamesAFile(absl::string_view model);

// Resolves model.template / model.spec / model.hf_config / model.onnx with
// its front-end; INVALID_ARGUMENT for an empty ref.
absl::StatusOr<ResolvedModel> ResolveModelRef(const v1::ModelRef& model,
                                              const v1::TrainingSetup& setup,
                                              const ModelCatalog& catalog);

// Whether answering for `model` imports it (FrontendFor(...)->Imports). The
// service runs imports on their own bounded pool and answers the rest on the
// calling thread.
bool ImportsModel(const v1::ModelRef& model);

// The setup a resolved `model` is profiled at: `setup` without its positions
// when the front-end's conversion already bound them (BindsPositions).
v1::TrainingSetup ProfileSetup(const v1::ModelRef& model,
                               const v1::TrainingSetup& setup);

}  // namespace headroom

#endif  // HEADROOM_CORE_FRONTENDS_FRONTEND_REGISTRY_H_
