#include "core/energy/train_energy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace headroom {
namespace {

using Layers = google::protobuf::RepeatedPtrField<v1::Layer>;

struct FlopContext {
  double position_scale = 1;  // setup positions / spec positions
};

double Count(uint64_t value, uint64_t if_zero) {
  return static_cast<double>(value == 0 ? if_zero : value);
}

double LayerForwardFlops(const v1::Layer& layer, double p,
                         const FlopContext& ctx);

double BlockForwardFlops(const Layers& layers, double inherited,
                         const FlopContext& ctx) {
  double total = 0;
  for (const v1::Layer& child : layers) {
    const double p = child.positions() != 0
                         ? static_cast<double>(child.positions())
                         : inherited;
    total += Count(child.repeat(), 1) * LayerForwardFlops(child, p, ctx);
  }
  return total;
}

double AttentionFlops(const v1::Layer& layer, double p,
                      const FlopContext& ctx) {
  const v1::Attention& a = layer.attention();
  const double hidden = static_cast<double>(a.hidden());
  const double heads = static_cast<double>(a.heads());
  const double kv_heads = Count(a.kv_heads(), a.heads());
  const double head_dim =
      a.head_dim() != 0 ? static_cast<double>(a.head_dim()) : hidden / heads;
  const double kv_in = Count(a.kv_input_dim(), a.hidden());
  // Key positions: kv_positions scaled as the memory model scales them
  // (with the setup's positions when the layer inherits its own), else the
  // query's.
  double kv_p = p;
  if (a.kv_positions() != 0) {
    kv_p = static_cast<double>(a.kv_positions()) *
           (layer.positions() == 0 ? ctx.position_scale : 1);
  }
  const double keys_seen =
      a.window() != 0 ? std::min(static_cast<double>(a.window()), kv_p) : kv_p;
  const double q_proj = 2 * p * hidden * heads * head_dim;
  const double kv_proj = 2 * 2 * kv_p * kv_in * kv_heads * head_dim;
  const double out_proj = 2 * p * heads * head_dim * hidden;
  // Q K^T and P V: each 2 x heads x head_dim per query-key pair.
  const double scores = 2 * 2 * p * keys_seen * heads * head_dim;
  return q_proj + kv_proj + out_proj + scores;
}

double MlpFlops(double hidden, double ffn, bool gated, double p) {
  return 2 * p * hidden * ffn * (gated ? 3 : 2);
}

double ConvFlops(const v1::Conv& c, double p) {
  const uint32_t dims = c.dims() == 0 ? 2 : c.dims();
  double kernel = 1;
  if (c.kernel_size() == 1) {
    kernel = std::pow(static_cast<double>(c.kernel(0)), dims);
  } else {
    for (uint64_t k : c.kernel()) kernel *= static_cast<double>(k);
  }
  const double groups = Count(c.groups(), 1);
  const double in_p =
      c.in_positions() != 0 ? static_cast<double>(c.in_positions()) : p;
  // A transposed convolution does its products per input position.
  const double positions = c.transposed() ? in_p : p;
  return 2 * positions * (static_cast<double>(c.in_channels()) / groups) *
         static_cast<double>(c.out_channels()) * kernel;
}

double RecurrentFlops(const v1::Recurrent& r, double p) {
  const double gates = r.cell() == v1::Recurrent::LSTM  ? 4
                       : r.cell() == v1::Recurrent::GRU ? 3
                                                        : 1;
  const double h = static_cast<double>(r.hidden());
  const double directions = r.bidirectional() ? 2 : 1;
  double total = 0;
  const uint32_t layers = r.num_layers() == 0 ? 1 : r.num_layers();
  for (uint32_t l = 0; l < layers; ++l) {
    const double input =
        l == 0 ? static_cast<double>(r.input_size()) : h * directions;
    total += directions * 2 * gates * h * (input + h) * p;
  }
  return total;
}

double LayerForwardFlops(const v1::Layer& layer, double p,
                         const FlopContext& ctx) {
  switch (layer.kind_case()) {
    case v1::Layer::kLinear:
      return 2 * p * static_cast<double>(layer.linear().in_features()) *
             static_cast<double>(layer.linear().out_features());
    case v1::Layer::kAttention:
      return AttentionFlops(layer, p, ctx);
    case v1::Layer::kMlp:
      return MlpFlops(static_cast<double>(layer.mlp().hidden()),
                      static_cast<double>(layer.mlp().ffn()),
                      layer.mlp().gated(), p);
    case v1::Layer::kMoe: {
      const v1::Moe& m = layer.moe();
      const double hidden = static_cast<double>(m.hidden());
      const double router = 2 * p * hidden * static_cast<double>(m.experts());
      const double active =
          Count(m.top_k(), 1) + static_cast<double>(m.shared_experts());
      return router + active * MlpFlops(hidden, static_cast<double>(m.ffn()),
                                        m.gated(), p);
    }
    case v1::Layer::kConv:
      return ConvFlops(layer.conv(), p);
    case v1::Layer::kRecurrent:
      return RecurrentFlops(layer.recurrent(), p);
    case v1::Layer::kBlock:
      return BlockForwardFlops(layer.block().layers(), p, ctx);
    default:
      // Embedding lookups, norms, elementwise ops, opaque parameters.
      return 0;
  }
}

std::string Fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

v1::TrainEnergyEstimate Estimate(double joules_per_step, uint64_t tokens,
                                 std::string basis) {
  v1::TrainEnergyEstimate e;
  e.set_joules_per_step(joules_per_step);
  e.set_joules_per_1k_tokens(
      tokens == 0 ? 0 : joules_per_step / static_cast<double>(tokens) * 1000);
  e.set_basis(std::move(basis));
  return e;
}

}  // namespace

StepFlops FlopsPerStep(const v1::ModelSpec& spec,
                       const v1::TrainingSetup& setup, uint32_t batch) {
  FlopContext ctx;
  double positions = static_cast<double>(spec.positions());
  if (setup.positions() != 0) {
    if (spec.positions() != 0) {
      ctx.position_scale = static_cast<double>(setup.positions()) /
                           static_cast<double>(spec.positions());
    }
    positions = static_cast<double>(setup.positions());
  }
  StepFlops flops;
  flops.positions = static_cast<uint64_t>(std::max(1.0, positions));
  flops.tokens_per_step = flops.positions * batch;
  flops.forward_flops = static_cast<double>(batch) *
                        BlockForwardFlops(spec.layers(), positions, ctx);
  const double passes = setup.activation_checkpointing() ? 4 : 3;
  flops.step_flops = passes * flops.forward_flops;
  return flops;
}

absl::StatusOr<JoulesPerTflop> DatasheetJoulesPerTflop(const GpuInfo& gpu) {
  // The catalog's board power (gpu_catalog.h), as the datasheet prints it.
  const std::optional<double> tdp =
      gpu.tdp_w > 0 ? std::optional<double>(gpu.tdp_w) : std::nullopt;
  if (!tdp.has_value() || gpu.fp16_dense_tflops <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "no published TDP for ", gpu.name,
        ": the compute model needs a cuda probe's J/TFLOP on this card (run "
        "headroom probe submit --executor cuda --gpu ",
        gpu.name, ")"));
  }
  JoulesPerTflop j;
  j.value = *tdp / gpu.fp16_dense_tflops;
  j.source = absl::StrCat("the datasheet: TDP ", Fixed(*tdp, 0), " W / ",
                          Fixed(gpu.fp16_dense_tflops, 0),
                          " dense fp16 TFLOP/s (at peak: a lower bound)");
  return j;
}

std::optional<JoulesPerTflop> MeasuredJoulesPerTflop(
    const std::vector<CudaProbeEnergy>& probes, const std::string& gpu) {
  if (probes.empty()) return std::nullopt;
  std::vector<double> values;
  std::set<std::string> ids;
  for (const CudaProbeEnergy& p : probes) {
    values.push_back(p.j_per_tflop);
    ids.insert(p.probe_id);
  }
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  JoulesPerTflop j;
  j.value =
      n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  std::vector<std::string> shown(ids.begin(), ids.end());
  if (shown.size() > 5) {
    shown.resize(5);
    shown.push_back("...");
  }
  j.source = absl::StrCat("the cuda probe on ", gpu, ": median of ", n,
                          n == 1 ? " bf16 GEMM run" : " bf16 GEMM runs", " (",
                          absl::StrJoin(shown, ", "), ")");
  return j;
}

std::optional<double> GemmJoulesPerTflopOf(const std::string& details_json) {
  if (details_json.empty() || details_json.size() > (1u << 20)) {
    return std::nullopt;
  }
  const nlohmann::json doc =
      nlohmann::json::parse(details_json, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return std::nullopt;
  auto gemm = doc.find("gemm");
  if (gemm == doc.end() || !gemm->is_object()) return std::nullopt;
  auto value = gemm->find("j_per_tflop");
  if (value == gemm->end() || !value->is_number()) return std::nullopt;
  const double j = value->get<double>();
  if (!std::isfinite(j) || j <= 0 || j > 1e6) return std::nullopt;
  return j;
}

v1::TrainEnergyResponse AnswerTrainEnergy(const TrainEnergyQuestion& q) {
  v1::TrainEnergyResponse out;
  out.set_model_key(q.model_key);
  out.set_gpu(q.gpu);
  out.set_batch(q.batch);
  out.set_positions(q.flops.positions);
  out.set_tokens_per_step(q.flops.tokens_per_step);
  out.set_forward_tflop(q.flops.forward_flops / 1e12);
  out.set_step_tflop(q.flops.step_flops / 1e12);
  out.set_j_per_tflop(q.j_per_tflop.value);
  out.set_j_per_tflop_source(q.j_per_tflop.source);
  const uint64_t tokens = q.flops.tokens_per_step;
  if (q.j_per_tflop.value > 0) {
    *out.mutable_compute_model() = Estimate(
        q.flops.step_flops / 1e12 * q.j_per_tflop.value, tokens,
        absl::StrCat("compute model: ", Fixed(q.flops.step_flops / 1e12, 3),
                     " TFLOP per step x ", Fixed(q.j_per_tflop.value, 3),
                     " J/TFLOP from ", q.j_per_tflop.source));
  } else {
    // No J/TFLOP for this card: only measured runs can answer.
    out.mutable_compute_model()->set_basis(
        absl::StrCat("compute model unavailable: ", q.j_per_tflop.source));
  }
  if (q.runs.empty()) {
    *out.mutable_answer() = out.compute_model();
    return out;
  }

  std::map<uint32_t, std::vector<double>> by_batch;
  std::set<std::string> workers;
  bool simulated = false;
  for (const TrainEnergyRun& run : q.runs) {
    by_batch[run.batch].push_back(run.joules_per_step);
    workers.insert(run.worker);
    simulated = simulated || run.simulated;
  }
  v1::TrainEnergyEvidence* evidence = out.mutable_evidence();
  evidence->set_model_key(q.model_key);
  evidence->set_runs(static_cast<int32_t>(q.runs.size()));
  for (const auto& [batch, values] : by_batch) evidence->add_batches(batch);
  for (const std::string& w : workers) evidence->add_workers(w);
  evidence->set_simulated(simulated);
  evidence->set_steps_source(q.steps_source);
  const uint32_t lo = by_batch.begin()->first;
  const uint32_t hi = by_batch.rbegin()->first;
  evidence->set_extrapolated(q.batch < lo || q.batch > hi);

  const auto mean = [](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return sum / static_cast<double>(v.size());
  };
  double joules = 0;
  auto at = by_batch.find(q.batch);
  if (at != by_batch.end()) {
    joules = mean(at->second);
    evidence->set_method("mean at the batch");
  } else if (by_batch.size() >= 2) {
    // Least squares over every run: J/step = a + b x batch.
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const TrainEnergyRun& run : q.runs) {
      const double x = run.batch;
      n += 1;
      sx += x;
      sy += run.joules_per_step;
      sxx += x * x;
      sxy += x * run.joules_per_step;
    }
    const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double a = (sy - b * sx) / n;
    joules = std::max(0.0, a + b * q.batch);
    evidence->set_method("line through the batches");
  } else {
    joules = mean(by_batch.begin()->second) * q.batch / lo;
    evidence->set_method("proportional to tokens");
  }
  std::string basis = absl::StrCat(
      "measured: ", q.runs.size(), q.runs.size() == 1 ? " run" : " runs",
      " of key ", q.model_key, " on ", q.gpu, simulated ? " (simulated)" : "",
      ", ", evidence->method());
  if (evidence->extrapolated()) {
    absl::StrAppend(&basis, ", batch ", q.batch, " outside the measured ", lo,
                    "..", hi);
  }
  *out.mutable_measured() = Estimate(joules, tokens, std::move(basis));
  *out.mutable_answer() = out.measured();
  return out;
}

}  // namespace headroom
