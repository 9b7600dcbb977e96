#include "worker/daemon/gpu_setup.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/catalog/gpu_catalog.h"
#include "worker/daemon/gpu_executors.h"
#include "worker/daemon/subprocess.h"

namespace headroom::worker {
namespace {

// A simulated node's host memory at most (GB).
constexpr double kMaxSimHostGb = 65536;

// The first of `candidates` that exists, or empty.
std::string FirstExisting(
    const std::vector<std::filesystem::path>& candidates) {
  std::error_code ec;
  for (const auto& path : candidates) {
    if (std::filesystem::is_regular_file(path, ec)) return path.string();
  }
  return "";
}

// torch's version from `python`, or empty with `why` when it cannot import.
std::string TorchVersion(const std::string& python, std::string* why) {
  std::string version;
  const ProcessResult result = RunProcess(
      {python, "-c", "import torch; print(torch.__version__)"},
      std::chrono::seconds(120),
      [&](const std::string& line) { version = line; }, nullptr);
  if (result.exit_code != 0 || version.empty()) {
    *why = absl::StrCat(python, " cannot import torch: ",
                        result.error.empty() ? result.stderr_tail.substr(0, 300)
                                             : result.error);
    return "";
  }
  return version;
}

// The version of a Python package energy probes use (transformers,
// bitsandbytes), or "" when it does not import.
std::string PackageVersion(const std::string& python,
                           const std::string& package) {
  std::string version;
  const ProcessResult result = RunProcess(
      {python, "-c",
       absl::StrCat("import ", package, "; print(", package, ".__version__)")},
      std::chrono::seconds(120),
      [&](const std::string& line) { version = line; }, nullptr);
  return result.exit_code == 0 ? version : "";
}

}  // namespace

uint64_t HostMemoryBytes(const std::string& meminfo_path) {
  std::ifstream in(meminfo_path);
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "MemTotal:")) continue;
    std::vector<std::string> words =
        absl::StrSplit(line.substr(9), ' ', absl::SkipEmpty());
    uint64_t kib = 0;
    if (words.size() != 2 || words[1] != "kB" ||
        !absl::SimpleAtoi(words[0], &kib) || kib > (uint64_t{1} << 44)) {
      return 0;
    }
    return kib * 1024;
  }
  return 0;
}

absl::StatusOr<GpuSetup> SetUpExecutors(const GpuSetupOptions& options) {
  GpuSetup setup;
  bool want_sim = false;
  bool want_auto = false;
  for (const std::string& name : options.executors) {
    if (name == "sim") {
      want_sim = true;
    } else if (name == "auto") {
      want_auto = true;
    } else if (name == "torch" || name == "cuda") {
      // Set up below, once the GPUs are known.
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "executors: unknown \"", name, "\"; allowed torch, cuda, sim, auto"));
    }
  }
  bool want_torch = false;
  bool want_cuda = false;
  for (const std::string& name : options.executors) {
    want_torch = want_torch || name == "torch";
    want_cuda = want_cuda || name == "cuda";
  }
  if (want_torch || want_cuda || want_auto) {
    std::string why;
    std::vector<gpu::GpuInfo> found = gpu::DiscoverGpus(&why);
    if (found.empty()) {
      if (want_torch || want_cuda) {
        return absl::FailedPreconditionError(
            absl::StrCat("no GPU for the torch/cuda executors: ", why));
      }
      setup.notes.push_back(absl::StrCat(
          "no GPU found (", why,
          "): running a simulated GPU, its results labelled simulated"));
      want_sim = true;
    } else {
      if (!why.empty()) setup.notes.push_back(why);
      std::string nvml_why;
      std::shared_ptr<const gpu::Nvml> nvml =
          gpu::Nvml::Load(gpu::Nvml::DefaultLibrary(), &nvml_why);
      if (nvml == nullptr) {
        setup.notes.push_back(
            absl::StrCat("NVML unavailable (", nvml_why,
                         "): no device memory, power or energy figures"));
      }
      for (const gpu::GpuInfo& info : found) {
        v1::GpuDevice device;
        device.set_index(static_cast<uint32_t>(info.index));
        device.set_name(info.name);
        device.set_uuid(info.uuid);
        device.set_memory_bytes(info.total_memory_bytes);
        device.set_compute_capability(
            absl::StrCat(info.cc_major, ".", info.cc_minor));
        device.set_driver_version(info.driver_version);
        device.set_cuda_version(info.cuda_version);
        if (nvml != nullptr && info.nvml_index >= 0) {
          const unsigned index = static_cast<unsigned>(info.nvml_index);
          device.set_power_supported(nvml->PowerMw(index).kind ==
                                     gpu::CounterRead::Kind::kValue);
          device.set_energy_supported(nvml->TotalEnergyMj(index).kind ==
                                      gpu::CounterRead::Kind::kValue);
        }
        setup.gpus.push_back(std::move(device));
      }
      setup.host_memory_bytes = HostMemoryBytes();
      if (setup.host_memory_bytes == 0) {
        setup.notes.push_back(
            "host memory unknown (no MemTotal in /proc/meminfo): offload "
            "probes cannot be checked against the node");
      }
      const std::filesystem::path dir =
          std::filesystem::path(options.argv0).parent_path();
      GpuExecutorOptions gpu_options;
      gpu_options.nvml = nvml;
      gpu_options.gpus = found;
      gpu_options.sample_ms = options.sample_ms;
      gpu_options.python = options.python;
      gpu_options.harness =
          !options.harness.empty()
              ? options.harness
              : FirstExisting({dir / "headroom_torch_probe.py",
                               dir / "../../worker/harness/"
                                     "headroom_torch_probe.py",
                               "worker/harness/headroom_torch_probe.py"});
      gpu_options.cuda_probe =
          !options.cuda_probe.empty()
              ? options.cuda_probe
              : FirstExisting({dir / "headroom-cuda-probe",
                               dir / "cuda/headroom-cuda-probe"});
      if (want_torch || want_auto) {
        std::string torch_why;
        const std::string torch =
            gpu_options.harness.empty()
                ? ""
                : TorchVersion(options.python, &torch_why);
        if (gpu_options.harness.empty()) {
          torch_why = "headroom_torch_probe.py not found (pass --harness)";
        }
        if (!torch.empty()) {
          setup.framework_versions["torch"] = torch;
          // What energy probes build and quantize with: reported with every
          // result, and said once where missing.
          for (const char* package : {"transformers", "bitsandbytes"}) {
            const std::string version = PackageVersion(options.python, package);
            if (!version.empty()) {
              setup.framework_versions[package] = version;
            } else {
              setup.notes.push_back(absl::StrCat(
                  "no ", package, ": energy probes record ",
                  std::string(package) == "transformers" ? "every quantization"
                                                         : "NF4 and INT8",
                  " as failures saying so"));
            }
          }
          setup.executors.push_back(
              std::make_unique<TorchExecutor>(gpu_options));
        } else if (want_torch) {
          return absl::FailedPreconditionError(torch_why);
        } else {
          setup.notes.push_back(absl::StrCat("no torch executor: ", torch_why));
        }
      }
      if (want_cuda || want_auto) {
        if (!gpu_options.cuda_probe.empty()) {
          setup.executors.push_back(
              std::make_unique<CudaExecutor>(gpu_options));
        } else if (want_cuda) {
          return absl::FailedPreconditionError(
              "headroom-cuda-probe not found (pass --cuda_probe)");
        } else {
          setup.notes.push_back(
              "no cuda executor: headroom-cuda-probe not found");
        }
      }
      if (!found.empty()) {
        setup.framework_versions["cuda_driver"] = found[0].cuda_version;
      }
    }
  }
  if (want_sim) {
    SimGpuConfig sim = options.sim;
    absl::StatusOr<GpuInfo> kind = FindGpu(sim.kind);
    if (!kind.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("sim_gpu: ", kind.status().message()));
    }
    sim.kind = kind->name;
    if (sim.memory_gb == 0) sim.memory_gb = kind->memory_gb;
    if (!(sim.memory_gb > 0 && sim.memory_gb <= kMaxCardGb)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sim_memory_gb = ", sim.memory_gb,
                       " is out of range; allowed (0, ", kMaxCardGb, "]"));
    }
    // The planner refuses a hello whose card is not the size of its kind.
    if (!MemoryAgrees(*kind, sim.memory_gb)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sim_memory_gb = ", sim.memory_gb, " is not a ", kind->name,
          ": the catalog's has ", kind->memory_gb, " GB; allowed within ",
          kCardMemoryTolerance * 100, " % of it, or 0 for the catalog's"));
    }
    if (sim.step_ms < 1 || sim.step_ms > 60000 || sim.sample_ms < 1 ||
        sim.sample_ms > 10000) {
      return absl::InvalidArgumentError(
          "sim_step_ms must be 1..60000 and sample_ms 1..10000");
    }
    if (sim.gpus < 1 || sim.gpus > kMaxSimGpus) {
      return absl::InvalidArgumentError(
          absl::StrCat("sim_gpus = ", sim.gpus, " is out of range; allowed 1..",
                       kMaxSimGpus, " cards on the simulated node"));
    }
    if (!(sim.host_memory_gb > 0 && sim.host_memory_gb <= kMaxSimHostGb)) {
      return absl::InvalidArgumentError(
          absl::StrCat("sim_host_memory_gb = ", sim.host_memory_gb,
                       " is out of range; allowed (0, ", kMaxSimHostGb, "]"));
    }
    auto executor = std::make_unique<SimExecutor>(sim);
    for (const v1::GpuDevice& gpu : executor->Devices()) {
      setup.gpus.push_back(gpu);
    }
    // The simulated node's memory, unless real GPUs report the host's.
    if (setup.host_memory_bytes == 0) {
      setup.host_memory_bytes = static_cast<uint64_t>(sim.host_memory_gb * 1e9);
    }
    setup.framework_versions["simulator"] = "headroom-sim 1";
    setup.executors.push_back(std::move(executor));
  }
  return setup;
}

std::string DefaultWorkerId(const std::string& hostname,
                            const std::vector<v1::GpuDevice>& gpus) {
  if (gpus.empty()) return hostname;
  const v1::GpuDevice& first = gpus.front();
  std::string kind = CatalogGpuForDriverName(first.name());
  if (kind.empty()) kind = first.name();
  std::string id = absl::StrCat(hostname, first.simulated() ? "-sim-" : "-");
  bool dash = true;  // after the dash just added: no second one
  for (char c : kind) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '.' || c == '_') {
      id.push_back(static_cast<char>(std::tolower(u)));
      dash = false;
    } else if (!dash) {
      id.push_back('-');
      dash = true;
    }
  }
  while (!id.empty() && id.back() == '-') id.pop_back();
  return id;
}

}  // namespace headroom::worker
