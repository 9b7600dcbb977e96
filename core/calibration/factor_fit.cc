#include "core/calibration/factor_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace headroom {
namespace {

using Matrix = std::array<ComponentArray, kNumComponents>;

double Dot(const ComponentArray& a, const ComponentArray& b) {
  double s = 0;
  for (int c = 0; c < kNumComponents; ++c) s += a[c] * b[c];
  return s;
}

// Least-squares rows of the loss: weight * (a.f - 1)^2, where a is the
// sample's larger moment at the current factors.
struct Row {
  ComponentArray a{};
  double weight = 1;
  bool hinge = false;   // OOM row: counts only while a.f < 1
  bool update = false;  // which moment a is
};

bool Fits(const FitSample& s, const FitOptions& options) {
  if (!s.fit) return false;
  if (s.measured_gb.has_value()) {
    return *s.measured_gb > 0 && *s.measured_gb >= options.min_fit_gb;
  }
  return s.oom_gb.has_value() && *s.oom_gb > 0;
}

// The rows of the fitted samples with each one's peak moment chosen at `f`.
std::vector<Row> RowsAt(const std::vector<FitSample>& samples,
                        const ComponentArray& f, const FitOptions& options) {
  std::vector<Row> rows;
  rows.reserve(samples.size());
  for (const FitSample& s : samples) {
    if (!Fits(s, options)) continue;
    Row row;
    row.update = PeakMoment(s.component_gb, s.update_gb, f) == Moment::kUpdate;
    const ComponentArray& x = row.update ? s.update_gb : s.component_gb;
    if (s.measured_gb.has_value() && *s.measured_gb > 0) {
      for (int c = 0; c < kNumComponents; ++c) {
        row.a[c] = x[c] / *s.measured_gb;
      }
      // Huber by reweighting: beyond delta a residual weighs delta/|r|.
      const double r = std::abs(Dot(row.a, f) - 1.0);
      if (options.huber_delta > 0 && r > options.huber_delta) {
        row.weight = options.huber_delta / r;
      }
    } else {
      for (int c = 0; c < kNumComponents; ++c) {
        row.a[c] = options.headroom * x[c] / *s.oom_gb;
      }
      row.weight = options.oom_penalty;
      row.hinge = true;
    }
    rows.push_back(row);
  }
  return rows;
}

double RowsLoss(const std::vector<Row>& rows, const ComponentArray& f,
                const FitOptions& options) {
  double loss = 0;
  for (int c = 0; c < kNumComponents; ++c) {
    loss += options.prior_weight * options.prior_scale[c] * (f[c] - 1.0) *
            (f[c] - 1.0);
  }
  for (const Row& row : rows) {
    const double r = Dot(row.a, f) - 1.0;
    if (row.hinge && r >= 0) continue;
    if (!row.hinge && options.huber_delta > 0 &&
        std::abs(r) > options.huber_delta) {
      loss += 2 * options.huber_delta * std::abs(r) -
              options.huber_delta * options.huber_delta;
      continue;
    }
    loss += (row.hinge ? row.weight : 1.0) * r * r;
  }
  return loss;
}

// Non-negative least squares on normal equations by projected coordinate
// descent, warm-started from `f`. Bounded sweeps.
void SolveNonNegative(const Matrix& g, const ComponentArray& h,
                      ComponentArray& f) {
  for (int sweep = 0; sweep < 5000; ++sweep) {
    double change = 0;
    for (int j = 0; j < kNumComponents; ++j) {
      if (g[j][j] <= 0) {
        f[j] = 0;
        continue;
      }
      double grad = -h[j];
      for (int k = 0; k < kNumComponents; ++k) grad += g[j][k] * f[k];
      const double next = std::max(0.0, f[j] - grad / g[j][j]);
      change = std::max(change, std::abs(next - f[j]) / (1.0 + std::abs(f[j])));
      f[j] = next;
    }
    if (change < 1e-13) return;
  }
}

}  // namespace

double PredictGb(const FitSample& sample, const ComponentArray& factors) {
  return std::max(Dot(sample.component_gb, factors),
                  Dot(sample.update_gb, factors));
}

double FitLoss(const std::vector<FitSample>& samples,
               const ComponentArray& factors, const FitOptions& options) {
  return RowsLoss(RowsAt(samples, factors, options), factors, options);
}

namespace {
FitResult FitFactorsOnly(const std::vector<FitSample>& samples,
                         const FitOptions& options);
}  // namespace

FitResult FitFactors(const std::vector<FitSample>& samples,
                     const FitOptions& options) {
  if (options.constant_gb == 0) return FitFactorsOnly(samples, options);
  // The factors fit what is left of each peak after the constant.
  std::vector<FitSample> shifted = samples;
  for (FitSample& s : shifted) {
    if (s.measured_gb.has_value()) *s.measured_gb -= options.constant_gb;
    if (s.oom_gb.has_value()) *s.oom_gb -= options.constant_gb;
  }
  FitResult result = FitFactorsOnly(shifted, options);
  result.constant_gb = options.constant_gb;
  return result;
}

namespace {
FitResult FitFactorsOnly(const std::vector<FitSample>& samples,
                         const FitOptions& options) {
  FitResult best;
  best.factors.fill(0);
  best.loss = FitLoss(samples, best.factors, options);
  ComponentArray f{};
  f.fill(1.0);
  // The loss is piecewise quadratic twice over: an OOM row counts only while
  // its prediction is under the card, and each run's peak is whichever
  // moment is larger. Fix both choices at the current point, solve that
  // quadratic, re-derive the choices, repeat. Bounded; keeps the best point.
  std::vector<Row> rows = RowsAt(samples, f, options);
  std::vector<bool> active(rows.size(), true);
  for (int iteration = 1; iteration <= 100; ++iteration) {
    // The prior's rows: sqrt(w) * (f_c - 1) for each component.
    Matrix g{};
    ComponentArray h{};
    for (int c = 0; c < kNumComponents; ++c) {
      g[c][c] = options.prior_weight * options.prior_scale[c];
      h[c] = options.prior_weight * options.prior_scale[c];
    }
    for (size_t i = 0; i < rows.size(); ++i) {
      if (!active[i]) continue;
      const Row& row = rows[i];
      for (int j = 0; j < kNumComponents; ++j) {
        h[j] += row.weight * row.a[j];
        for (int k = 0; k < kNumComponents; ++k) {
          g[j][k] += row.weight * row.a[j] * row.a[k];
        }
      }
    }
    SolveNonNegative(g, h, f);
    const std::vector<Row> next = RowsAt(samples, f, options);
    const double loss = RowsLoss(next, f, options);
    if (loss < best.loss || iteration == 1) {
      best.factors = f;
      best.loss = loss;
      best.iterations = iteration;
    }
    bool changed = false;
    for (size_t i = 0; i < next.size(); ++i) {
      const bool now = !next[i].hinge || Dot(next[i].a, f) < 1.0;
      if (now != active[i] || next[i].update != rows[i].update ||
          std::abs(next[i].weight - rows[i].weight) > 1e-6) {
        changed = true;
      }
      active[i] = now;
    }
    rows = next;
    if (!changed) break;
  }
  return best;
}
}  // namespace

std::map<std::string, FitResult> HeldOutFactors(
    const std::vector<FitSample>& samples, const FitOptions& options) {
  std::map<std::string, FitResult> factors_without;
  for (const FitSample& s : samples) {
    if (factors_without.count(s.template_name) != 0) continue;
    std::vector<FitSample> others;
    others.reserve(samples.size());
    for (const FitSample& o : samples) {
      if (o.template_name != s.template_name) others.push_back(o);
    }
    factors_without[s.template_name] = FitFactors(others, options);
  }
  return factors_without;
}

std::vector<double> HeldOutPredictions(const std::vector<FitSample>& samples,
                                       const FitOptions& options) {
  std::map<std::string, FitResult> factors_without =
      HeldOutFactors(samples, options);
  std::vector<double> predictions;
  predictions.reserve(samples.size());
  for (const FitSample& s : samples) {
    const FitResult& fit = factors_without[s.template_name];
    predictions.push_back(PredictGb(s, fit.factors) + fit.constant_gb);
  }
  return predictions;
}

}  // namespace headroom
