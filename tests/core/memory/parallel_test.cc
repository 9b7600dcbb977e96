#include "core/memory/parallel.h"

#include <cmath>
#include <memory>
#include <random>

#include "core/memory/fit_verdict.h"
#include "core/memory/memory_profile.h"
#include "core/memory/model_spec.h"
#include "core/planner/fit_planner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using ::testing::HasSubstr;
using v1::TrainingSetup;

// A small decoder: an embedding, four copies of (attention, MLP), a logits
// head. Every figure below is derived from its states by hand.
v1::ModelSpec Decoder() {
  auto spec = ParseSpecJson(R"({"name": "dec", "positions": 16, "layers": [
      {"name": "embed", "embedding": {"num_embeddings": 1000, "dim": 64}},
      {"name": "blocks", "repeat": 4, "block": {"layers": [
        {"name": "attn", "attention": {"hidden": 64, "heads": 4}},
        {"name": "mlp", "mlp": {"hidden": 64, "ffn": 256}}]}},
      {"name": "head", "linear": {"in_features": 64, "out_features": 1000,
                                  "logits": true}}]})",
                            "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : v1::ModelSpec();
}

TrainingSetup Parallel(TrainingSetup::Parallel strategy, uint32_t gpus) {
  TrainingSetup setup;
  setup.set_gpus(gpus);
  setup.set_parallel(strategy);
  return setup;
}

// ZeRO (Rajbhandari et al. 2020), Table 1 / Figure 1: mixed-precision Adam
// keeps 2P of fp16 weights, 2P of fp16 gradients and K = 12 bytes per
// parameter of optimizer state (fp32 master weights, momentum, variance).
// With P = 7.5 B and N = 64: baseline 16P = 120 GB, ZeRO-1 4P + 12P/N =
// 31.4 GB, ZeRO-2 2P + 14P/N = 16.6 GB, ZeRO-3 16P/N = 1.9 GB.
TEST(ParallelTest, ZeroPaperModelStatesExact) {
  const double p = 7.5e9;
  const double n = 64;
  ModelStates states;
  states.weights = 2 * p;
  states.gradients = 2 * p;
  states.states = 12 * p;
  const auto total = [](const ModelStates& s) {
    return s.weights + s.gradients + s.states;
  };
  EXPECT_DOUBLE_EQ(total(ShardStates(states, 0, n)), 16 * p);
  EXPECT_DOUBLE_EQ(total(ShardStates(states, 1, n)), 4 * p + 12 * p / n);
  EXPECT_DOUBLE_EQ(total(ShardStates(states, 2, n)), 2 * p + 14 * p / n);
  EXPECT_DOUBLE_EQ(total(ShardStates(states, 3, n)), 16 * p / n);
  // The paper's printed figures.
  EXPECT_NEAR(total(ShardStates(states, 0, n)) / 1e9, 120, 0.05);
  EXPECT_NEAR(total(ShardStates(states, 1, n)) / 1e9, 31.4, 0.05);
  EXPECT_NEAR(total(ShardStates(states, 2, n)) / 1e9, 16.6, 0.05);
  EXPECT_NEAR(total(ShardStates(states, 3, n)) / 1e9, 1.88, 0.005);
  // The strategies' stages: FSDP full = ZeRO-3, grad-op = ZeRO-2.
  EXPECT_EQ(StrategyStage(TrainingSetup::FSDP_FULL), 3);
  EXPECT_EQ(StrategyStage(TrainingSetup::FSDP_GRAD_OP), 2);
  EXPECT_EQ(StrategyStage(TrainingSetup::FSDP_HYBRID), 3);
  EXPECT_EQ(StrategyStage(TrainingSetup::ZERO1), 1);
  EXPECT_EQ(StrategyStage(TrainingSetup::DDP), 0);
}

// Our mixed-precision accounting (torch autocast: fp32 weights 4P and
// gradients 4P, AdamW's moments 8P, the 16-bit copies 2P) shards the same
// way: ZeRO-1 (4 + 4 + 2)P + 8P/N at backward start, ZeRO-3 18P/N.
// DeepSpeed's bf16 mode through the whole profile: the ZeRO paper's
// accounting (2P + 2P + 12P for Adam) sharded by stage, at backward start;
// at the update the fp32 gradient partition joins (4P / N).
TEST(ParallelTest, ZeroStrategiesKeepDeepSpeedsMixedPrecision) {
  const v1::ModelSpec spec = Decoder();
  const double n = 8;
  for (TrainingSetup::Parallel strategy :
       {TrainingSetup::ZERO1, TrainingSetup::ZERO2, TrainingSetup::ZERO3}) {
    TrainingSetup setup = Parallel(strategy, 8);
    setup.set_precision(TrainingSetup::BF16_MIXED);
    setup.set_optimizer(TrainingSetup::ADAMW_FUSED);
    auto profile = BuildProfile(spec, setup);
    ASSERT_TRUE(profile.ok()) << profile.status();
    const double p = static_cast<double>(profile->params);
    const double expected =
        strategy == TrainingSetup::ZERO1   ? 4 * p + 12 * p / n
        : strategy == TrainingSetup::ZERO2 ? 2 * p + 14 * p / n
                                           : 16 * p / n;
    EXPECT_DOUBLE_EQ(profile->parallel.states_backward, expected)
        << StrategyName(strategy);
    EXPECT_DOUBLE_EQ(profile->parallel.states_update, expected + 4 * p / n)
        << StrategyName(strategy);
    EXPECT_TRUE(profile->parallel.deepspeed_mixed);
  }
  // FSDP under the same precision keeps autocast's layout.
  TrainingSetup fsdp = Parallel(TrainingSetup::FSDP_FULL, 8);
  fsdp.set_precision(TrainingSetup::BF16_MIXED);
  auto profile = BuildProfile(spec, fsdp);
  ASSERT_TRUE(profile.ok());
  EXPECT_FALSE(profile->parallel.deepspeed_mixed);
}

TEST(ParallelTest, MixedPrecisionShardsByStage) {
  const v1::ModelSpec spec = Decoder();
  TrainingSetup one;
  one.set_precision(TrainingSetup::BF16_MIXED);
  auto single = BuildProfile(spec, one);
  ASSERT_TRUE(single.ok()) << single.status();
  const double p = static_cast<double>(single->params);
  EXPECT_DOUBLE_EQ(single->states.weights, 4 * p);
  EXPECT_DOUBLE_EQ(single->states.states, 8 * p);
  for (int stage = 1; stage <= 3; ++stage) {
    const double n = 8;
    const ModelStates s = ShardStates(single->states, stage, n);
    const double backward = s.weights + s.gradients + s.states + s.half_copies;
    const double expected = stage == 1   ? 10 * p + 8 * p / n
                            : stage == 2 ? 6 * p + 12 * p / n
                                         : 18 * p / n;
    EXPECT_DOUBLE_EQ(backward, expected) << "stage " << stage;
  }
}

TEST(ParallelTest, ProfilePerGpuByStrategy) {
  const v1::ModelSpec spec = Decoder();
  auto single = BuildProfile(spec, TrainingSetup());
  ASSERT_TRUE(single.ok());
  const ModelStates& st = single->states;
  const ParamSplit split = SplitParams(spec);
  EXPECT_EQ(split.total, single->params);
  EXPECT_EQ(split.root, 1000u * 64 + (64u * 1000));  // embedding + head
  EXPECT_EQ(split.root + 4 * split.largest_block, split.total);

  auto ddp = BuildProfile(spec, Parallel(TrainingSetup::DDP, 4));
  ASSERT_TRUE(ddp.ok());
  EXPECT_DOUBLE_EQ(ddp->fixed_bytes[kOptimizer],
                   single->fixed_bytes[kOptimizer] + 2 * 25.0 * 1024 * 1024);
  EXPECT_EQ(ddp->per_sample_bytes, single->per_sample_bytes);

  auto zero1 = BuildProfile(spec, Parallel(TrainingSetup::ZERO1, 4));
  ASSERT_TRUE(zero1.ok());
  EXPECT_DOUBLE_EQ(zero1->parallel.states_backward,
                   st.weights + st.gradients + st.states / 4);
  EXPECT_DOUBLE_EQ(zero1->update_bytes[kOptimizer],
                   st.weights + st.gradients + st.states / 4 +
                       st.update_temporaries / 4 + 2 * 25.0 * 1024 * 1024);

  auto zero3 = BuildProfile(spec, Parallel(TrainingSetup::ZERO3, 4));
  ASSERT_TRUE(zero3.ok());
  // fp32 compute: the root unit and two blocks gathered at 4 bytes.
  const double gathered =
      (static_cast<double>(split.root) + 2.0 * split.largest_block) * 4;
  EXPECT_DOUBLE_EQ(zero3->parallel.gathered_units, gathered);
  EXPECT_DOUBLE_EQ(zero3->parallel.reduce_scatter,
                   static_cast<double>(split.largest_block) * 4);
  EXPECT_DOUBLE_EQ(zero3->fixed_bytes[kOptimizer],
                   (st.weights + st.gradients + st.states) / 4 + gathered +
                       zero3->parallel.reduce_scatter);
  // FSDP full is ZeRO-3's accounting.
  auto fsdp = BuildProfile(spec, Parallel(TrainingSetup::FSDP_FULL, 4));
  ASSERT_TRUE(fsdp.ok());
  EXPECT_DOUBLE_EQ(fsdp->fixed_bytes[kOptimizer],
                   zero3->fixed_bytes[kOptimizer]);
}

// Hybrid sharding shards within a node and replicates across nodes: 4
// nodes of 8 hold what one node of 8 fully sharded holds.
TEST(ParallelTest, HybridShardsWithinANode) {
  const v1::ModelSpec spec = Decoder();
  TrainingSetup hybrid = Parallel(TrainingSetup::FSDP_HYBRID, 32);
  hybrid.set_nodes(4);
  auto h = BuildProfile(spec, hybrid);
  auto full8 = BuildProfile(spec, Parallel(TrainingSetup::FSDP_FULL, 8));
  auto full32 = BuildProfile(spec, Parallel(TrainingSetup::FSDP_FULL, 32));
  ASSERT_TRUE(h.ok() && full8.ok() && full32.ok());
  EXPECT_EQ(h->parallel.layout.shard_degree, 8u);
  EXPECT_EQ(h->parallel.layout.nodes, 4u);
  EXPECT_DOUBLE_EQ(h->fixed_bytes[kOptimizer], full8->fixed_bytes[kOptimizer]);
  EXPECT_GT(h->fixed_bytes[kOptimizer], full32->fixed_bytes[kOptimizer]);
}

// Tensor parallelism splits the projections' parameters and the attention
// and MLP internals; the embedding, head and residual outputs stay whole.
TEST(ParallelTest, TensorParallelSplitsProjections) {
  const v1::ModelSpec spec = Decoder();
  auto single = BuildProfile(spec, TrainingSetup());
  TrainingSetup tp = Parallel(TrainingSetup::DDP, 2);
  tp.set_tensor_parallel(2);
  auto split = BuildProfile(spec, tp);
  ASSERT_TRUE(single.ok() && split.ok());
  const ParamSplit params = SplitParams(spec);
  const double f = static_cast<double>(params.split) / params.total;
  EXPECT_GT(f, 0.3);
  EXPECT_LT(f, 1.0);
  // One data-parallel rank: no buckets.
  EXPECT_NEAR(split->fixed_bytes[kOptimizer],
              single->fixed_bytes[kOptimizer] * ((1 - f) + f / 2), 1e-6);
  EXPECT_DOUBLE_EQ(split->per_sample_bytes[kInternal],
                   single->per_sample_bytes[kInternal] / 2);
  EXPECT_DOUBLE_EQ(split->per_sample_bytes[kOutputs],
                   single->per_sample_bytes[kOutputs]);
  EXPECT_DOUBLE_EQ(split->per_sample_bytes[kTransient],
                   single->per_sample_bytes[kTransient]);
}

TEST(ParallelTest, OffloadMovesStatesToHost) {
  const v1::ModelSpec spec = Decoder();
  auto single = BuildProfile(spec, TrainingSetup());
  TrainingSetup setup = Parallel(TrainingSetup::ZERO2, 4);
  setup.set_offload(TrainingSetup::OPTIMIZER);
  auto off = BuildProfile(spec, setup);
  ASSERT_TRUE(single.ok() && off.ok()) << off.status();
  const ModelStates& st = single->states;
  // ZeRO-Offload at stage 2: the state, the step and the gradient
  // partitions on the host; the weights stay.
  EXPECT_DOUBLE_EQ(off->parallel.host_bytes_per_gpu,
                   (st.states + st.update_temporaries + st.gradients) / 4);
  EXPECT_DOUBLE_EQ(off->parallel.host_bytes_per_node,
                   off->parallel.host_bytes_per_gpu * 4);
  EXPECT_DOUBLE_EQ(off->parallel.states_backward, st.weights);
  // Weights offload needs stage 3; with it, nothing of the states stays.
  setup.set_offload(TrainingSetup::BOTH);
  EXPECT_THAT(BuildProfile(spec, setup).status().message(),
              HasSubstr("setup.offload"));
  setup.set_parallel(TrainingSetup::ZERO3);
  auto both = BuildProfile(spec, setup);
  ASSERT_TRUE(both.ok());
  EXPECT_DOUBLE_EQ(both->parallel.states_backward, 0);
  // FSDP's CPU offload takes the gradient shards with the weights, so the
  // step runs on the host as well: only gathered units and the
  // reduce-scatter buffer stay on the GPU.
  TrainingSetup fsdp = Parallel(TrainingSetup::FSDP_FULL, 4);
  fsdp.set_offload(TrainingSetup::PARAMS);
  auto offloaded = BuildProfile(spec, fsdp);
  ASSERT_TRUE(offloaded.ok()) << offloaded.status();
  EXPECT_DOUBLE_EQ(offloaded->parallel.states_backward, 0);
  EXPECT_DOUBLE_EQ(offloaded->parallel.states_update, 0);
  EXPECT_NEAR(offloaded->parallel.host_bytes_per_gpu,
              (st.weights + st.gradients + st.states + st.update_temporaries +
               st.half_copies) /
                  4,
              1e-6);
  EXPECT_GT(offloaded->parallel.gathered_units, 0);
}

TEST(ParallelTest, RejectsBadParallelSetups) {
  const v1::ModelSpec spec = Decoder();
  TrainingSetup setup = Parallel(TrainingSetup::DDP, 513);
  EXPECT_THAT(BuildProfile(spec, setup).status().message(),
              HasSubstr("setup.gpus = 513"));
  setup = Parallel(TrainingSetup::DDP, 4);
  setup.set_offload(TrainingSetup::OPTIMIZER);
  EXPECT_THAT(BuildProfile(spec, setup).status().message(),
              HasSubstr("sharded strategy"));
  setup = Parallel(TrainingSetup::ZERO3, 6);
  setup.set_tensor_parallel(4);
  EXPECT_THAT(BuildProfile(spec, setup).status().message(),
              HasSubstr("setup.tensor_parallel = 4"));
  setup = Parallel(static_cast<TrainingSetup::Parallel>(99), 2);
  EXPECT_THAT(BuildProfile(spec, setup).status().message(),
              HasSubstr("setup.parallel = 99"));
  setup = Parallel(TrainingSetup::FSDP_HYBRID, 12);
  setup.set_nodes(5);
  EXPECT_THAT(BuildProfile(spec, setup).status().message(),
              HasSubstr("setup.nodes = 5"));
  TrainingSetup::Parallel parsed = TrainingSetup::DDP;
  EXPECT_TRUE(ParseStrategy("fsdp-grad-op", &parsed));
  EXPECT_EQ(parsed, TrainingSetup::FSDP_GRAD_OP);
  EXPECT_FALSE(ParseStrategy("zero4", &parsed));
}

// The solved smallest N equals the smallest N a scan finds, for every
// strategy and a range of cards, tensor parallel included.
TEST(ParallelTest, SolvedMinGpusMatchesScan) {
  const v1::ModelSpec spec = Decoder();
  ComponentArray ones;
  ones.fill(1.0);
  const VerdictRule rule{1.15, 1.1};
  for (uint32_t tp : {1u, 2u}) {
    for (TrainingSetup::Parallel strategy : AllStrategies()) {
      const auto peak = [&](uint32_t n) {
        TrainingSetup setup = Parallel(strategy, n);
        setup.set_tensor_parallel(tp);
        auto profile = BuildProfile(spec, setup);
        EXPECT_TRUE(profile.ok()) << profile.status();
        return profile.ok() ? PeakAt(*profile, ones, 64) : 1e30;
      };
      const double at1 = peak(tp);
      for (double fraction : {1.5, 1.0, 0.6, 0.3, 0.1, 0.02}) {
        const double card = at1 * fraction;
        const auto fits = [&](uint32_t n) {
          return Verdict(peak(n), card, rule) == FitVerdict::kFits;
        };
        uint32_t scanned = 0;
        for (uint32_t n = tp; n <= kMaxGpus; n += tp) {
          if (fits(n)) {
            scanned = n;
            break;
          }
        }
        EXPECT_EQ(
            SolveMinGpus(peak, fits, card / (rule.k * rule.headroom), tp, tp),
            scanned)
            << StrategyName(strategy) << " tp " << tp << " card x" << fraction;
      }
    }
  }
}

// The collective constant is fitted, not typed: runs generated as the
// prediction plus a known constant (and symmetric noise) give it back.
TEST(ParallelTest, FitsCollectiveConstantFromMultiGpuRuns) {
  const v1::ModelSpec spec = Decoder();
  ComponentArray ones;
  ones.fill(1.0);
  const double known_gb = 0.37;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(-0.01, 0.01);
  std::vector<double> measured, predicted;
  for (uint32_t n : {2u, 4u, 8u}) {
    for (uint64_t batch : {1u, 8u, 32u}) {
      auto profile = BuildProfile(spec, Parallel(TrainingSetup::FSDP_FULL, n));
      ASSERT_TRUE(profile.ok());
      const double p = PeakAt(*profile, ones, batch);
      // Every rank's peak: the largest is the run's measured_peak_gb.
      std::vector<double> ranks;
      for (uint32_t r = 0; r < n; ++r)
        ranks.push_back(p + known_gb + noise(rng));
      predicted.push_back(p);
      measured.push_back(*std::max_element(ranks.begin(), ranks.end()));
    }
  }
  const CollectiveFit fit = FitCollectiveConstant(measured, predicted);
  EXPECT_EQ(fit.runs, 9);
  EXPECT_NEAR(fit.constant_gb, known_gb, 0.011);
  EXPECT_EQ(FitCollectiveConstant({}, {}).runs, 0);
  // Leave one out: each entry is the fit of the other runs, for odd and
  // even counts of the rest, with ties.
  for (size_t n : {1u, 2u, 3u, 8u, 9u}) {
    std::vector<double> m(measured.begin(), measured.begin() + n);
    std::vector<double> p(predicted.begin(), predicted.begin() + n);
    if (n == 8) m[1] = m[0] - p[0] + p[1];  // a tie with run 0
    const std::vector<double> loo = LeaveOneOutCollectiveConstants(m, p);
    ASSERT_EQ(loo.size(), n);
    for (size_t i = 0; i < n; ++i) {
      std::vector<double> om, op;
      for (size_t o = 0; o < n; ++o) {
        if (o == i) continue;
        om.push_back(m[o]);
        op.push_back(p[o]);
      }
      EXPECT_DOUBLE_EQ(loo[i], FitCollectiveConstant(om, op).constant_gb)
          << "n " << n << " left out " << i;
    }
  }
}

// CheckFit with min_gpus: per target and strategy the smallest count, the
// cheapest named, the verdict at that count FITS and one less does not.
TEST(ParallelTest, CheckFitAnswersMinGpus) {
  auto catalog = std::make_shared<ModelCatalog>();
  ASSERT_TRUE(catalog->Add(Decoder()).ok());
  v1::FactorSet set;
  set.set_version("fs-test");
  set.set_headroom(1.15);
  set.set_k90(1.1);
  set.set_k95(1.2);
  v1::Factors* f = set.mutable_factors();
  f->set_optimizer(1);
  f->set_outputs(1);
  f->set_attention(1);
  f->set_internal(1);
  f->set_recurrent(1);
  f->set_transient(1);
  FitPlanner planner(catalog, set, 0.95);
  v1::CheckFitRequest request;
  request.mutable_model()->set_template_("dec");
  request.add_batches(1);
  auto single = BuildProfile(Decoder(), TrainingSetup());
  ASSERT_TRUE(single.ok());
  // A card half of one GPU's states: DDP can never fit, sharding can.
  const double card = single->fixed_bytes[kOptimizer] / 2e9;
  request.add_targets()->set_memory_gb(card);
  request.set_min_gpus(true);
  auto response = planner.CheckFit(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->min_gpus_size(), 1);
  const v1::MinGpusTarget& t = response->min_gpus(0);
  EXPECT_EQ(t.strategies_size(), static_cast<int>(AllStrategies().size()));
  for (const v1::MinGpusStrategy& s : t.strategies()) {
    if (s.strategy() == "ddp") {
      EXPECT_EQ(s.gpus_fits(), 0u);
      continue;
    }
    TrainingSetup::Parallel strategy = TrainingSetup::DDP;
    ASSERT_TRUE(ParseStrategy(s.strategy(), &strategy));
    if (s.gpus_fits() == 0) continue;
    const auto verdict = [&](uint32_t n) {
      v1::CheckFitRequest at = request;
      at.set_min_gpus(false);
      *at.mutable_setup() = Parallel(strategy, n);
      auto r = planner.CheckFit(at);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? r->targets(0).verdicts(0) : v1::Verdict();
    };
    EXPECT_EQ(verdict(s.gpus_fits()), v1::FITS) << s.strategy();
    if (s.gpus_fits() > 1) {
      EXPECT_NE(verdict(s.gpus_fits() - 1), v1::FITS) << s.strategy();
    }
    EXPECT_LE(s.gpus_not_does_not_fit(), s.gpus_fits());
    EXPECT_GT(s.peak_gb(), 0);
    EXPECT_NEAR(s.sharded_states_gb() + s.gathered_units_gb() + s.buffers_gb() +
                    s.activations_gb(),
                s.peak_gb(), 1e-9 + 1e-6 * s.peak_gb());
  }
  EXPECT_FALSE(t.cheapest().empty());
  EXPECT_NE(t.cheapest(), "ddp");
}

}  // namespace
}  // namespace headroom
