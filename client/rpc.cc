#include "client/rpc.h"

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "client/flag_errors.h"
#include "client/job_flags.h"
#include "client/model_commands.h"
#include "client/setup_flags.h"
#include "core/catalog/gpu_catalog.h"
#include "core/frontends/frontend_registry.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace headroom::cli {

grpc::ChannelArguments ChannelArgs() {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(16 << 20);
  return args;
}

std::shared_ptr<grpc::Channel> Connect(const Options& options) {
  if (options.channel != nullptr) return options.channel;
  // Options built without main (tests): plaintext.
  return grpc::CreateCustomChannel(
      options.server, grpc::InsecureChannelCredentials(), ChannelArgs());
}

void SetDeadline(grpc::ClientContext& context, const Options& options,
                 int deadline_factor) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(int64_t{deadline_factor} *
                                                 options.deadline_ms));
}

int FailRpc(std::ostream& err, const Options& options,
            const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    err << "headroom: cannot reach the planner at " << options.server << " ("
        << status.error_message() << "); start it or pass --server";
    const bool refused =
        status.error_message().find("Connection refused") != std::string::npos;
    if (refused) {
      // Nothing listens there: TLS is not the question.
    } else if (options.security.tls_ca.empty()) {
      err << " (if it serves TLS, pass --tls_ca)";
    } else if (options.security.tls_cert.empty()) {
      err << " (if it requires client certificates, pass --tls_cert and "
             "--tls_key)";
    }
    err << "\n";
    return kExitUnreachable;
  }
  // What the flags named is wrong or does not exist: a usage error, as when
  // the CLI finds it out itself.
  // The planner's field paths are named as the flags that set them.
  if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
      status.error_code() == grpc::StatusCode::NOT_FOUND) {
    return Fail(err, FlagsForFieldPaths(status.error_message(), options),
                kExitUsage);
  }
  return Fail(err, status.error_message(), kExitRefused);
}

absl::StatusOr<v1::CheckFitRequest> FitRequest(const Options& options,
                                               bool require_targets) {
  v1::CheckFitRequest request;
  // With --job the file names the model and the batch (job_flags.h).
  const bool job = !options.job.empty();
  if (options.model.empty() == options.onnx.empty() &&
      !(job && options.model.empty())) {
    return absl::InvalidArgumentError(
        "give one model: --model (a catalog template, a spec or config.json "
        "file) or --onnx (an ONNX model file)");
  }
  // The model's kind is the front-end registry's to decide
  // (frontend_registry.h); a bare name is a catalog entry.
  std::error_code ec;
  const std::string& path =
      !options.onnx.empty() ? options.onnx : options.model;
  if (path.empty()) {
    // --job without --model: the job file's model.
  } else if (!options.onnx.empty() ||
             std::filesystem::is_regular_file(path, ec)) {
    absl::StatusOr<v1::ModelRef> model = ReadModelFile(path);
    if (!model.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(!options.onnx.empty() ? "--onnx: " : "--model: ",
                       model.status().message()));
    }
    if (!options.onnx.empty() && !model->has_onnx()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--onnx ", path, " is not an ONNX model; pass it as --model"));
    }
    *request.mutable_model() = std::move(*model);
  } else if (NamesAFile(options.model)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model ", options.model,
        ": no such file (a catalog template or full model is a bare name: "
        "see headroom models)"));
  } else {
    request.mutable_model()->set_template_(options.model);
  }
  for (absl::string_view part :
       absl::StrSplit(options.batch, ',', absl::SkipEmpty())) {
    uint64_t batch = 0;
    if (!absl::SimpleAtoi(part, &batch)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch '", part,
          "' is not a number; give batch sizes 1..1048576, comma-separated, "
          "e.g. --batch 8,16"));
    }
    if (batch == 0 || batch > (1u << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--batch '", part, "' is out of range; allowed 1..1048576"));
    }
    request.add_batches(static_cast<uint32_t>(batch));
  }
  if (request.batches().empty() && !job) {
    return absl::InvalidArgumentError("--batch is required, e.g. --batch 8,16");
  }
  for (absl::string_view part :
       absl::StrSplit(options.gpu, ',', absl::SkipEmpty())) {
    // A catalog name first ("4090" is the RTX 4090, not 4090 GB), then a
    // size in GB ("24" or "24GB"), else a name the planner resolves or
    // answers NOT_FOUND for with the closest names.
    absl::string_view size = absl::StripAsciiWhitespace(part);
    if (absl::EndsWithIgnoreCase(size, "GB")) {
      size = absl::StripAsciiWhitespace(size.substr(0, size.size() - 2));
    }
    double gb = 0;
    absl::StatusOr<GpuInfo> gpu = FindGpu(part);
    if (gpu.ok()) {
      request.add_targets()->set_gpu(std::string(part));
    } else if (absl::IsInvalidArgument(gpu.status())) {
      // "A100": several cards; the user must say which.
      return absl::InvalidArgumentError(
          absl::StrCat("--gpu: ", gpu.status().message()));
    } else if (absl::SimpleAtod(size, &gb)) {
      if (!CheckCardGb(gb, "--gpu").ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--gpu ", part, ": a card size in GB must be in (0, ", kMaxCardGb,
            "]; or give a catalog name (see headroom gpus)"));
      }
      request.add_targets()->set_memory_gb(gb);
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--gpu: ", gpu.status().message(), "; see headroom gpus"));
    }
  }
  if (request.targets().empty() && require_targets) {
    return absl::InvalidArgumentError(
        "--gpu is required: catalog names or sizes in GB, e.g. --gpu "
        "L4,H100,48");
  }
  if (absl::Status status = FillSetup(options, request.mutable_setup());
      !status.ok()) {
    return status;
  }
  request.set_coverage(options.coverage);
  request.set_learn(options.learn);
  request.set_include_simulated(options.include_simulated);
  request.set_min_gpus(MinGpusAsked(options));
  if (absl::Status status = FillJob(options, &request); !status.ok()) {
    return status;
  }
  return request;
}

}  // namespace headroom::cli
