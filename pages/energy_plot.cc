#include "pages/energy_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/energy/energy_curves.h"

namespace headroom {
namespace {

constexpr double kWidth = 800, kHeight = 500;
constexpr double kLeft = 70, kRight = 190, kTop = 56, kBottom = 56;
constexpr int kSamples = 240;

struct Series {
  Quant quant;
  const v1::EnergyCurve* curve;
  double s_cap;
  const char* color;
};

std::string Num(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.*f", decimals, value);
  return buffer;
}

std::string Escape(const std::string& text) {
  return absl::StrReplaceAll(
      text, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

// A tick step of 1, 2 or 5 x 10^k giving about `target` ticks over `span`.
double NiceStep(double span, int target) {
  const double raw = span / target;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * magnitude >= raw) return m * magnitude;
  }
  return 10 * magnitude;
}

bool Drawn(const v1::EnergyCurveSet& set, const std::string& arch,
           const MeasuredEnergyPoint& p) {
  if (p.arch != arch || !(p.params_b > 0) || !std::isfinite(p.de_pct)) {
    return false;
  }
  for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
    std::string source;
    if (QuantKey(quant) == p.quant &&
        FindCurve(set, arch, quant, &source).ok()) {
      return true;
    }
  }
  return false;
}

// "2026-12-01" (UTC).
std::string Date(int64_t unix_seconds) {
  const std::time_t t = static_cast<std::time_t>(unix_seconds);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d", &tm);
  return buffer;
}

// "0.1", "1", "10" for decade ticks.
std::string DecadeLabel(double value) {
  return value < 1
             ? Num(value, static_cast<int>(std::lround(-std::log10(value))))
             : Num(value, 0);
}

}  // namespace

std::string EscapeHtml(const std::string& text) { return Escape(text); }

int CountDrawnPoints(const v1::EnergyCurveSet& set, const std::string& arch_in,
                     const std::vector<MeasuredEnergyPoint>& points) {
  const std::string arch = absl::AsciiStrToLower(arch_in);
  int n = 0;
  for (const MeasuredEnergyPoint& p : points) n += Drawn(set, arch, p) ? 1 : 0;
  return n;
}

std::string BorrowedCurveNotice(
    const v1::EnergyCurveSet& set, const std::string& arch_in,
    const std::vector<MeasuredEnergyPoint>& points) {
  const std::string arch = absl::AsciiStrToLower(arch_in);
  if (set.curves().contains(arch) || !set.borrow().contains(arch)) return "";
  // "Hopper (H100/H200)": the name, then the cards.
  const std::string label =
      set.arch_label().contains(arch) ? set.arch_label().at(arch) : arch;
  const size_t cards = label.find(" (");
  const std::string name = label.substr(0, cards);
  const std::string card_list =
      cards == std::string::npos ? "" : label.substr(cards);
  int measured = 0;
  for (const MeasuredEnergyPoint& p : points) measured += p.arch == arch;
  const std::string borrowed = absl::StrCat(
      "its answers use ", set.borrow().at(arch), "'s curves (borrowed)");
  if (measured == 0) {
    return absl::StrCat("no ", name, " measurements yet", card_list, ": ",
                        borrowed);
  }
  return absl::StrCat(name, card_list, ": ", measured, " measured point",
                      measured == 1 ? "" : "s",
                      " but no curves of its own until a refit; ", borrowed);
}

absl::StatusOr<std::string> EnergyPlotSvg(
    const v1::EnergyCurveSet& set, const std::string& arch_in,
    const std::vector<MeasuredEnergyPoint>& all_points) {
  const std::string arch = absl::AsciiStrToLower(arch_in);
  const std::vector<std::string> known = KnownArchs(set);
  if (std::find(known.begin(), known.end(), arch) == known.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("arch '", arch_in.substr(0, 32),
                     "' is not known; allowed: ", absl::StrJoin(known, ", ")));
  }
  std::vector<Series> series;
  std::string borrowed_from;
  const char* colors[] = {"#1f77b4", "#d62728"};
  int color = 0;
  for (Quant quant : {Quant::kNf4, Quant::kInt8}) {
    std::string source;
    absl::StatusOr<const v1::EnergyCurve*> curve =
        FindCurve(set, arch, quant, &source);
    if (!curve.ok()) continue;
    if (!source.empty()) borrowed_from = source;
    series.push_back(
        {quant, *curve, set.s_cap().at(QuantKey(quant)), colors[color++]});
  }

  // The measured points of this architecture, for a quantization drawn.
  std::vector<const MeasuredEnergyPoint*> points;
  std::vector<std::string> workers;
  for (const MeasuredEnergyPoint& p : all_points) {
    if (!Drawn(set, arch, p)) continue;
    points.push_back(&p);
    if (std::find(workers.begin(), workers.end(), p.worker) == workers.end()) {
      workers.push_back(p.worker);
    }
  }

  // x: whole decades covering a factor of 3 around every measured range and
  // every crossover.
  double lo_n = 1e300, hi_n = 0;
  for (const Series& s : series) {
    lo_n = std::min(lo_n, s.curve->n_min() / 3);
    hi_n = std::max(hi_n, s.curve->n_max() * 3);
    if (std::optional<double> c = CrossoverB(*s.curve)) {
      lo_n = std::min(lo_n, *c / 3);
      hi_n = std::max(hi_n, *c * 3);
    }
  }
  for (const MeasuredEnergyPoint* p : points) {
    lo_n = std::min(lo_n, p->params_b / 3);
    hi_n = std::max(hi_n, p->params_b * 3);
  }
  const double x_lo = std::floor(std::log10(lo_n));
  const double x_hi = std::max(std::ceil(std::log10(hi_n)), x_lo + 1);
  const double plot_w = kWidth - kLeft - kRight;
  const double plot_h = kHeight - kTop - kBottom;
  auto px = [&](double n_b) {
    return kLeft + (std::log10(n_b) - x_lo) / (x_hi - x_lo) * plot_w;
  };
  auto n_at = [&](int i) {
    return std::pow(10.0, x_lo + (x_hi - x_lo) * i / kSamples);
  };

  // y: every curve with its band, every anchor, and zero.
  double y_min = 0, y_max = 0;
  for (const Series& s : series) {
    for (int i = 0; i <= kSamples; ++i) {
      const double de = DePct(*s.curve, n_at(i));
      y_min = std::min(y_min, de - s.curve->resid_std());
      y_max = std::max(y_max, de + s.curve->resid_std());
    }
    for (const v1::EnergyAnchor& a : s.curve->anchors()) {
      y_min = std::min(y_min, a.de());
      y_max = std::max(y_max, a.de());
    }
  }
  for (const MeasuredEnergyPoint* p : points) {
    y_min = std::min(y_min, p->de_pct);
    y_max = std::max(y_max, p->de_pct);
  }
  const double step = NiceStep(std::max(y_max - y_min, 1.0), 8);
  y_min = std::floor(y_min / step) * step;
  y_max = std::ceil(y_max / step) * step;
  auto py = [&](double de) {
    return kTop + (y_max - de) / (y_max - y_min) * plot_h;
  };

  std::string svg =
      absl::StrCat("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"", kWidth,
                   "\" height=\"", kHeight, "\" viewBox=\"0 0 ", kWidth, " ",
                   kHeight, "\" font-family=\"sans-serif\" font-size=\"12\">\n",
                   "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
  std::string label =
      set.arch_label().contains(arch) ? set.arch_label().at(arch) : arch;
  absl::StrAppend(&svg, "<text x=\"", kLeft, "\" y=\"24\" font-size=\"15\" ",
                  "font-weight=\"bold\">", Escape(label),
                  ": energy per token vs fp16</text>\n");
  absl::StrAppend(
      &svg, "<text x=\"", kLeft, "\" y=\"42\" fill=\"#555\">",
      borrowed_from.empty()
          ? std::string("dE% = A - S x/(1+x), x = N/N*; band: +/- resid_std")
          : Escape(absl::StrCat("no curves of its own: borrowed from ",
                                borrowed_from, "; band: +/- resid_std")),
      "</text>\n");

  // Grid and axes.
  const int y_ticks = static_cast<int>(std::lround((y_max - y_min) / step));
  for (int tick = 0; tick <= y_ticks; ++tick) {
    const double y = y_min + tick * step;
    const double yy = py(y);
    absl::StrAppend(&svg, "<line x1=\"", kLeft, "\" x2=\"", kLeft + plot_w,
                    "\" y1=\"", Num(yy, 1), "\" y2=\"", Num(yy, 1),
                    "\" stroke=\"#eee\"/>\n", "<text x=\"", kLeft - 6,
                    "\" y=\"", Num(yy + 4, 1), "\" text-anchor=\"end\">",
                    Num(y, step < 1 ? 1 : 0), "</text>\n");
  }
  for (int decade = static_cast<int>(x_lo); decade <= x_hi; ++decade) {
    const double n_b = std::pow(10.0, decade);
    absl::StrAppend(
        &svg, "<line x1=\"", Num(px(n_b), 1), "\" x2=\"", Num(px(n_b), 1),
        "\" y1=\"", kTop, "\" y2=\"", kTop + plot_h, "\" stroke=\"#ddd\"/>\n",
        "<text x=\"", Num(px(n_b), 1), "\" y=\"", kTop + plot_h + 18,
        "\" text-anchor=\"middle\">", DecadeLabel(n_b), "</text>\n");
    for (int m = 2; m <= 9 && decade < x_hi; ++m) {
      const double x = px(m * n_b);
      absl::StrAppend(&svg, "<line x1=\"", Num(x, 1), "\" x2=\"", Num(x, 1),
                      "\" y1=\"", kTop + plot_h, "\" y2=\"", kTop + plot_h - 5,
                      "\" stroke=\"#999\"/>\n");
    }
  }
  absl::StrAppend(
      &svg, "<rect x=\"", kLeft, "\" y=\"", kTop, "\" width=\"", plot_w,
      "\" height=\"", plot_h, "\" fill=\"none\" stroke=\"#333\"/>\n",
      "<line x1=\"", kLeft, "\" x2=\"", kLeft + plot_w, "\" y1=\"",
      Num(py(0), 1), "\" y2=\"", Num(py(0), 1),
      "\" stroke=\"#333\" stroke-width=\"1.2\"/>\n", "<text x=\"",
      kLeft + plot_w / 2, "\" y=\"", kHeight - 14,
      "\" text-anchor=\"middle\">N (billions of parameters, log "
      "scale)</text>\n",
      "<text transform=\"translate(18,", kTop + plot_h / 2,
      ") rotate(-90)\" text-anchor=\"middle\">dE% vs fp16 (energy per ",
      "generated token; below 0 saves)</text>\n");

  double legend_y = kTop + 10;
  for (const Series& s : series) {
    const v1::EnergyCurve& curve = *s.curve;
    // Band.
    std::vector<std::string> upper, lower;
    for (int i = 0; i <= kSamples; ++i) {
      const double n_b = n_at(i);
      const double de = DePct(curve, n_b);
      upper.push_back(absl::StrCat(Num(px(n_b), 1), ",",
                                   Num(py(de + curve.resid_std()), 1)));
      lower.push_back(absl::StrCat(Num(px(n_b), 1), ",",
                                   Num(py(de - curve.resid_std()), 1)));
    }
    std::reverse(lower.begin(), lower.end());
    absl::StrAppend(&svg, "<polygon points=\"", absl::StrJoin(upper, " "), " ",
                    absl::StrJoin(lower, " "), "\" fill=\"", s.color,
                    "\" fill-opacity=\"0.15\" stroke=\"none\"/>\n");
    // Curve: dashed outside the measured range, solid inside.
    std::vector<std::string> all, inside;
    for (int i = 0; i <= kSamples; ++i) {
      const double n_b = n_at(i);
      all.push_back(
          absl::StrCat(Num(px(n_b), 1), ",", Num(py(DePct(curve, n_b)), 1)));
    }
    for (int i = 0; i <= kSamples; ++i) {
      const double n_b =
          curve.n_min() * std::pow(curve.n_max() / curve.n_min(),
                                   static_cast<double>(i) / kSamples);
      inside.push_back(
          absl::StrCat(Num(px(n_b), 1), ",", Num(py(DePct(curve, n_b)), 1)));
    }
    absl::StrAppend(&svg, "<polyline points=\"", absl::StrJoin(all, " "),
                    "\" fill=\"none\" stroke=\"", s.color,
                    "\" stroke-width=\"1.5\" stroke-dasharray=\"5,4\"/>\n",
                    "<polyline points=\"", absl::StrJoin(inside, " "),
                    "\" fill=\"none\" stroke=\"", s.color,
                    "\" stroke-width=\"2.5\"/>\n");
    // Anchors.
    for (const v1::EnergyAnchor& a : curve.anchors()) {
      absl::StrAppend(&svg, "<circle cx=\"", Num(px(a.n()), 1), "\" cy=\"",
                      Num(py(a.de()), 1), "\" r=\"4\" fill=\"white\" stroke=\"",
                      s.color, "\" stroke-width=\"2\"><title>",
                      Escape(absl::StrCat(a.model(), " on ", a.gpu(), ": ",
                                          Num(a.de(), 2), "%")),
                      "</title></circle>\n");
    }
    // Crossover.
    std::string crossover_text = "no crossover";
    if (std::optional<double> c = CrossoverB(curve)) {
      crossover_text = absl::StrCat("crossover ", Num(*c, 2), " B");
      absl::StrAppend(
          &svg, "<line x1=\"", Num(px(*c), 1), "\" x2=\"", Num(px(*c), 1),
          "\" y1=\"", kTop, "\" y2=\"", kTop + plot_h, "\" stroke=\"", s.color,
          "\" stroke-dasharray=\"2,3\"/>\n", "<path d=\"M", Num(px(*c), 1), ",",
          Num(py(0) - 7, 1), " l6,7 l-6,7 l-6,-7 z\" ", "fill=\"", s.color,
          "\"/>\n", "<text x=\"", Num(px(*c) + 6, 1), "\" y=\"",
          Num(py(0) - 10, 1), "\" fill=\"", s.color, "\">", Num(*c, 2),
          " B</text>\n");
    }
    // Legend.
    const double lx = kLeft + plot_w + 14;
    absl::StrAppend(&svg, "<line x1=\"", lx, "\" x2=\"", lx + 24, "\" y1=\"",
                    legend_y, "\" y2=\"", legend_y, "\" stroke=\"", s.color,
                    "\" stroke-width=\"2.5\"/>\n", "<text x=\"", lx + 30,
                    "\" y=\"", legend_y + 4, "\" font-weight=\"bold\">",
                    QuantKey(s.quant), "</text>\n", "<text x=\"", lx, "\" y=\"",
                    legend_y + 20, "\">", "measured ", Num(curve.n_min(), 1),
                    "-", Num(curve.n_max(), 1), " B</text>\n", "<text x=\"", lx,
                    "\" y=\"", legend_y + 36, "\">", "resid_std ",
                    Num(curve.resid_std(), 2), " pp</text>\n", "<text x=\"", lx,
                    "\" y=\"", legend_y + 52, "\">", crossover_text,
                    "</text>\n", "<text x=\"", lx, "\" y=\"", legend_y + 68,
                    "\">saving cap ", Num(s.s_cap, 0), "%</text>\n");
    legend_y += 96;
  }
  // Measured points: filled, in their quantization's color, a shape per
  // worker.
  const auto marker = [&](size_t shape, double x, double y,
                          const std::string& color) {
    switch (shape % 4) {
      case 0:
        return absl::StrCat("<rect x=\"", Num(x - 4, 1), "\" y=\"",
                            Num(y - 4, 1),
                            "\" width=\"8\" height=\"8\" fill=\"", color, "\"");
      case 1:
        return absl::StrCat("<path d=\"M", Num(x, 1), ",", Num(y - 5, 1),
                            " l5,9 l-10,0 z\" fill=\"", color, "\"");
      case 2:
        return absl::StrCat("<path d=\"M", Num(x, 1), ",", Num(y - 5, 1),
                            " l5,5 l-5,5 l-5,-5 z\" fill=\"", color, "\"");
      default:
        return absl::StrCat("<circle cx=\"", Num(x, 1), "\" cy=\"", Num(y, 1),
                            "\" r=\"4\" fill=\"", color, "\"");
    }
  };
  const auto closing = [](size_t shape) {
    return shape % 4 == 0   ? "</rect>"
           : shape % 4 == 3 ? "</circle>"
                            : "</path>";
  };
  const auto shape_of = [&](const std::string& worker) {
    return static_cast<size_t>(
        std::find(workers.begin(), workers.end(), worker) - workers.begin());
  };
  for (const MeasuredEnergyPoint* p : points) {
    std::string color = "#333";
    for (const Series& s : series) {
      if (QuantKey(s.quant) == p->quant) color = s.color;
    }
    absl::StrAppend(
        &svg,
        marker(shape_of(p->worker), px(p->params_b), py(p->de_pct), color),
        " class=\"measured\"><title>",
        Escape(absl::StrCat(p->model, " on ", p->gpu, " (", p->quant, ") by ",
                            p->worker.empty() ? "?" : p->worker, ", ",
                            p->date_unix > 0 ? Date(p->date_unix) : "undated",
                            p->simulated ? ", simulated" : "", ": ",
                            Num(p->de_pct, 2), "%")),
        "</title>", closing(shape_of(p->worker)), "\n");
  }
  const double lx = kLeft + plot_w + 14;
  if (!points.empty()) {
    absl::StrAppend(&svg, "<text x=\"", lx, "\" y=\"", legend_y,
                    "\" font-weight=\"bold\">measured (", points.size(),
                    ")</text>\n");
    legend_y += 16;
    for (size_t w = 0; w < workers.size() && w < 8; ++w) {
      int64_t first = 0, last = 0;
      for (const MeasuredEnergyPoint* p : points) {
        if (p->worker != workers[w] || p->date_unix <= 0) continue;
        first = first == 0 ? p->date_unix : std::min(first, p->date_unix);
        last = std::max(last, p->date_unix);
      }
      std::string dates = first == 0 ? "undated" : Date(first);
      if (last > 0 && Date(last) != dates) dates += ".." + Date(last);
      absl::StrAppend(&svg, marker(w, lx + 4, legend_y - 4, "#333"),
                      "/>\n<text x=\"", lx + 14, "\" y=\"", legend_y,
                      "\" font-size=\"10\">",
                      Escape(absl::StrCat(
                          (workers[w].empty() ? "?" : workers[w]).substr(0, 18),
                          " ", dates)),
                      "</text>\n");
      legend_y += 14;
    }
    legend_y += 8;
  }
  absl::StrAppend(&svg, "<text x=\"", lx, "\" y=\"", legend_y,
                  "\" fill=\"#555\">solid: measured range</text>\n",
                  "<text x=\"", lx, "\" y=\"", legend_y + 16,
                  "\" fill=\"#555\">dashed: extrapolation</text>\n",
                  "<text x=\"", lx, "\" y=\"", legend_y + 32,
                  "\" fill=\"#555\">circles: anchors</text>\n</svg>\n");
  return svg;
}

}  // namespace headroom
