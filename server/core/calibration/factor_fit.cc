#include "server/core/calibration/factor_fit.h"

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

// Least-squares rows of the loss: weight * (a.f - 1)^2.
struct Row {
  ComponentArray a{};
  double weight = 1;
  bool hinge = false;  // OOM row: counts only while a.f < 1
};

std::vector<Row> RowsOf(const std::vector<FitSample>& samples,
                        const FitOptions& options) {
  std::vector<Row> rows;
  rows.reserve(samples.size());
  for (const FitSample& s : samples) {
    Row row;
    if (s.measured_gb.has_value() && *s.measured_gb > 0) {
      for (int c = 0; c < kNumComponents; ++c) {
        row.a[c] = s.component_gb[c] / *s.measured_gb;
      }
    } else if (s.oom_gb.has_value() && *s.oom_gb > 0) {
      for (int c = 0; c < kNumComponents; ++c) {
        row.a[c] = options.headroom * s.component_gb[c] / *s.oom_gb;
      }
      row.weight = options.oom_penalty;
      row.hinge = true;
    } else {
      continue;
    }
    rows.push_back(row);
  }
  return rows;
}

double RowsLoss(const std::vector<Row>& rows, const ComponentArray& f) {
  double loss = 0;
  for (const Row& row : rows) {
    const double r = Dot(row.a, f) - 1.0;
    if (row.hinge && r >= 0) continue;
    loss += row.weight * r * r;
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

double FitLoss(const std::vector<FitSample>& samples,
               const ComponentArray& factors, const FitOptions& options) {
  return RowsLoss(RowsOf(samples, options), factors);
}

FitResult FitFactors(const std::vector<FitSample>& samples,
                     const FitOptions& options) {
  const std::vector<Row> rows = RowsOf(samples, options);
  FitResult best;
  best.factors.fill(0);
  best.loss = RowsLoss(rows, best.factors);
  ComponentArray f{};
  f.fill(1.0);
  // The OOM hinge makes the loss piecewise quadratic: solve the quadratic of
  // the rows active at the current point, re-derive the active set, repeat.
  // Convex, so this settles; it is bounded and keeps the best point seen.
  std::vector<bool> active(rows.size(), true);
  for (int iteration = 1; iteration <= 100; ++iteration) {
    Matrix g{};
    ComponentArray h{};
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
    const double loss = RowsLoss(rows, f);
    if (loss < best.loss || iteration == 1) {
      best.factors = f;
      best.loss = loss;
      best.iterations = iteration;
    }
    bool changed = false;
    for (size_t i = 0; i < rows.size(); ++i) {
      const bool now = !rows[i].hinge || Dot(rows[i].a, f) < 1.0;
      if (now != active[i]) changed = true;
      active[i] = now;
    }
    if (!changed) break;
  }
  return best;
}

std::vector<double> HeldOutPredictions(const std::vector<FitSample>& samples,
                                       const FitOptions& options) {
  std::map<std::string, ComponentArray> factors_without;
  for (const FitSample& s : samples) {
    if (factors_without.count(s.template_name) != 0) continue;
    std::vector<FitSample> others;
    others.reserve(samples.size());
    for (const FitSample& o : samples) {
      if (o.template_name != s.template_name) others.push_back(o);
    }
    factors_without[s.template_name] = FitFactors(others, options).factors;
  }
  std::vector<double> predictions;
  predictions.reserve(samples.size());
  for (const FitSample& s : samples) {
    predictions.push_back(
        Dot(s.component_gb, factors_without[s.template_name]));
  }
  return predictions;
}

}  // namespace headroom
