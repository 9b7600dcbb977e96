#include "server/core/calibration/calibration_plot.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace headroom {
namespace {

// Plot area in SVG units.
constexpr double kLeft = 70, kTop = 50, kWidth = 560, kHeight = 460;
constexpr double kMinGb = 0.01, kMaxGb = 200;

double Axis(double gb) {
  const double t =
      (std::log10(std::clamp(gb, kMinGb, kMaxGb)) - std::log10(kMinGb)) /
      (std::log10(kMaxGb) - std::log10(kMinGb));
  return t;
}
double X(double gb) { return kLeft + Axis(gb) * kWidth; }
double Y(double gb) { return kTop + (1 - Axis(gb)) * kHeight; }

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

// A colour-blind-safe palette (Okabe-Ito), one per family.
const char* Colour(size_t index) {
  static const char* const kColours[] = {"#0072B2", "#D55E00", "#009E73",
                                         "#CC79A7", "#E69F00", "#56B4E9",
                                         "#000000", "#F0E442"};
  return kColours[index % 8];
}

}  // namespace

std::string CalibrationSvg(const std::vector<v1::MeasuredRun>& runs,
                           const Predictions& predictions,
                           const std::string& title) {
  std::map<std::string, size_t> families;
  for (const v1::MeasuredRun& run : runs) {
    families.emplace(run.family().empty() ? "other" : run.family(), 0);
  }
  size_t next = 0;
  for (auto& [name, index] : families) index = next++;

  std::string svg = absl::StrFormat(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"860\" height=\"580\" "
      "viewBox=\"0 0 860 580\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"860\" height=\"580\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"28\" font-size=\"16\" "
      "font-weight=\"bold\">%s</text>\n",
      kLeft, Escape(title));
  // Grid and axes: decades.
  for (double gb = kMinGb; gb <= kMaxGb * 1.001; gb *= 10) {
    absl::StrAppendFormat(
        &svg,
        "<line x1=\"%.1f\" y1=\"%g\" x2=\"%.1f\" y2=\"%g\" stroke=\"#ddd\"/>"
        "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>\n"
        "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%g</text>"
        "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
        X(gb), kTop, X(gb), kTop + kHeight, kLeft, Y(gb), kLeft + kWidth, Y(gb),
        X(gb), kTop + kHeight + 18, gb, kLeft - 6, Y(gb) + 4, gb);
  }
  absl::StrAppendFormat(
      &svg,
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
      "stroke=\"#333\"/>\n"
      "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">predicted peak (GB, log)"
      "</text>\n<text transform=\"translate(18,%g) rotate(-90)\" "
      "text-anchor=\"middle\">measured peak (GB, log)</text>\n",
      kLeft, kTop, kWidth, kHeight, kLeft + kWidth / 2, kTop + kHeight + 40,
      kTop + kHeight / 2);
  // The +/-25 % band around y = x (measured within 25 % of predicted).
  absl::StrAppendFormat(
      &svg,
      "<polygon points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f\" "
      "fill=\"#888\" fill-opacity=\"0.15\"/>\n"
      "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555\" "
      "stroke-dasharray=\"4 3\"/>\n",
      X(kMinGb), Y(kMinGb * 1.25), X(kMaxGb / 1.25), Y(kMaxGb), X(kMaxGb),
      Y(kMaxGb * 0.75), X(kMinGb / 0.75), Y(kMinGb), X(kMinGb), Y(kMinGb),
      X(kMaxGb), Y(kMaxGb));
  // Points: measured runs as circles, OOM runs as crosses on their card.
  int plotted = 0, oom = 0;
  for (size_t i = 0; i < runs.size() && i < predictions.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run) || !predictions[i].has_value()) continue;
    const double p = *predictions[i];
    const char* colour =
        Colour(families[run.family().empty() ? "other" : run.family()]);
    const std::string tip = Escape(absl::StrFormat(
        "%s %s batch %d: predicted %.3g GB, %s", run.template_(), run.gpu(),
        run.batch(), p,
        run.has_measured_peak_gb()
            ? absl::StrFormat("measured %.3g GB", run.measured_peak_gb())
            : absl::StrFormat("OOM on %g GB", run.oom_on_gb())));
    if (run.has_measured_peak_gb()) {
      absl::StrAppendFormat(&svg,
                            "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" "
                            "fill=\"%s\" fill-opacity=\"0.8\"><title>%s</title>"
                            "</circle>\n",
                            X(p), Y(run.measured_peak_gb()), colour, tip);
      ++plotted;
    } else if (run.has_oom_on_gb()) {
      const double x = X(p), y = Y(run.oom_on_gb());
      absl::StrAppendFormat(&svg,
                            "<path d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f "
                            "%.1f\" stroke=\"%s\" stroke-width=\"2\"><title>%s"
                            "</title></path>\n",
                            x - 4, y - 4, x + 4, y + 4, x - 4, y + 4, x + 4,
                            y - 4, colour, tip);
      ++oom;
    }
  }
  // Card lines the OOM crosses sit on.
  for (double card : {16.0, 24.0, 40.0, 80.0}) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" "
                          "stroke=\"#b00\" stroke-opacity=\"0.25\"/>"
                          "<text x=\"%g\" y=\"%.1f\" fill=\"#b00\" "
                          "font-size=\"10\">%g GB card</text>\n",
                          kLeft, Y(card), kLeft + kWidth, Y(card), kLeft + 4,
                          Y(card) - 3, card);
  }
  // Legend.
  double y = kTop + 10;
  for (const auto& [name, index] : families) {
    absl::StrAppendFormat(&svg,
                          "<circle cx=\"%g\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>"
                          "<text x=\"%g\" y=\"%.1f\">%s</text>\n",
                          kLeft + kWidth + 25, y, Colour(index),
                          kLeft + kWidth + 35, y + 4, Escape(name));
    y += 18;
  }
  absl::StrAppendFormat(
      &svg,
      "<text x=\"%g\" y=\"%.1f\" fill=\"#555\">o measured (%d)</text>\n"
      "<text x=\"%g\" y=\"%.1f\" fill=\"#555\">x OOM on card (%d)</text>\n"
      "<text x=\"%g\" y=\"%.1f\" fill=\"#555\">dashed: y = x</text>\n"
      "<text x=\"%g\" y=\"%.1f\" fill=\"#555\">band: +/-25 %%</text>\n</svg>\n",
      kLeft + kWidth + 20, y + 14, plotted, kLeft + kWidth + 20, y + 32, oom,
      kLeft + kWidth + 20, y + 50, kLeft + kWidth + 20, y + 68);
  return svg;
}

std::string CalibrationHtml(const v1::FactorSet& set, const std::string& svg) {
  std::string html = absl::StrFormat(
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>Headroom "
      "calibration %s</title><style>body{font-family:sans-serif;margin:2em}"
      "table{border-collapse:collapse}td,th{padding:4px 10px;border-bottom:"
      "1px solid #ddd;text-align:right}th:first-child,td:first-child{text-"
      "align:left}</style></head><body><h1>Calibration of factor set %s</h1>"
      "<p>Trained on %s. Factors: optimizer %.4g, outputs %.4g, attention "
      "%.4g, internal %.4g, recurrent %.4g, transient %.4g; headroom %.2f; "
      "k %.2f at coverage 0.9, %.2f at 0.95. Fitted on relative squared "
      "error, an OOM penalty of weight %.4g and a prior of weight %.4g that "
      "each factor is 1.</p>",
      Escape(set.version()), Escape(set.version()), Escape(set.trained_on()),
      set.factors().optimizer(), set.factors().outputs(),
      set.factors().attention(), set.factors().internal(),
      set.factors().recurrent(), set.factors().transient(), set.headroom(),
      set.k90(), set.k95(), set.oom_penalty(), set.prior_weight());
  html +=
      "<table><tr><th>column</th><th>runs</th><th>medianAbsErr</th>"
      "<th>within25</th><th>under</th><th>saidFitsButOom</th>"
      "<th>saidNoButFits</th><th>agree</th></tr>";
  for (const char* column :
       {"ours", "ours_heldout", "ours_anchored", "reference_shipped",
        "reference_heldout", "accelerate_fp32", "accelerate_bf16"}) {
    auto it = set.page().summary().find(column);
    if (it == set.page().summary().end()) continue;
    const v1::ColumnSummary& s = it->second;
    absl::StrAppendFormat(&html,
                          "<tr><td>%s</td><td>%d</td><td>%.4f</td><td>%d</td>"
                          "<td>%d</td><td>%d</td><td>%d</td><td>%d</td></tr>",
                          column, s.runs(), s.median_abs_err(), s.within25(),
                          s.under(), s.said_fits_but_oom(),
                          s.said_no_but_fits(), s.agree());
  }
  html +=
      "</table><h2>Three-way verdict (held out)</h2><table><tr><th>"
      "coverage</th><th>k</th><th>OOM called FITS</th><th>OOM BORDERLINE"
      "</th><th>OOM DOES_NOT_FIT</th><th>fits FITS</th><th>fits "
      "BORDERLINE</th><th>fits DOES_NOT_FIT</th></tr>";
  for (const v1::UpperBound& b : set.page().upper_bound().bounds()) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>%.2f</td><td>%.2f</td><td>%d</td><td>%d</td><td>%d</td>"
        "<td>%d</td><td>%d</td><td>%d</td></tr>",
        b.coverage(), b.k(), b.no_fit_fits(), b.no_fit_borderline(),
        b.no_fit_does_not(), b.fit_fits(), b.fit_borderline(),
        b.fit_does_not());
  }
  html += "</table>";
  const v1::AnchoredBound& anchored = set.page().anchored();
  if (!anchored.buckets().empty()) {
    absl::StrAppendFormat(
        &html,
        "<h2>Anchored answers</h2><p>ours_anchored: each run predicted from "
        "the other runs of its template (leave one run out within %d "
        "models, %d runs), with the global factors held out too. Shrinkage "
        "toward the prior: weight %.4g, x%.4g on the batch-independent "
        "bytes, chosen by held-out error. k by how far the asked batch lies "
        "beyond the largest measured one:</p><table><tr><th>batch / largest "
        "measured</th><th>k at 0.9</th><th>k at 0.95</th><th>runs</th>"
        "<th>from</th></tr>",
        anchored.models(), anchored.runs(), anchored.prior_weight(),
        anchored.fixed_hold());
    double lo = 0;
    for (const v1::ExtrapolationBucket& b : anchored.buckets()) {
      const std::string range =
          b.max_ratio() == 0 ? absl::StrFormat("&gt; %.4g", lo)
                             : absl::StrFormat("&le; %.4g", b.max_ratio());
      absl::StrAppendFormat(
          &html,
          "<tr><td>%s</td><td>%.2f</td><td>%.2f</td><td>%d</td><td>%s</td>"
          "</tr>",
          range, b.k90(), b.k95(), b.runs(),
          b.own()               ? "its runs"
          : b.pooled_runs() > 0 ? "pooled with further buckets"
                                : "the prior (too few runs)");
      lo = b.max_ratio();
    }
    html += "</table><p>GPU constants (GB, added to anchored peaks):";
    for (const auto& [gpu, gb] : anchored.gpu_constant_gb()) {
      absl::StrAppendFormat(&html, " %s %+.3f;", Escape(gpu), gb);
    }
    html += "</p>";
  }
  if (!set.page().sources().empty()) {
    html +=
        "<h2>Measurement sources</h2><table><tr><th>source</th><th>runs</th>"
        "<th>held out medianAbsErr</th><th>under</th><th>saidFitsButOom</th>"
        "<th>k at 0.95</th><th>constant GB</th><th>prior</th><th>predicting "
        "the other source</th></tr>";
    for (const v1::SourceFit& source : set.page().sources()) {
      std::string predicts;
      for (const auto& [other, summary] : source.predicts()) {
        absl::StrAppendFormat(&predicts, "%s: %.4f, under %d of %d; ",
                              Escape(other), summary.median_abs_err(),
                              summary.under(), summary.runs());
      }
      absl::StrAppendFormat(
          &html,
          "<tr><td>%s</td><td>%d</td><td>%.4f</td><td>%d of %d</td><td>%d"
          "</td><td>%.2f</td><td>%.3f</td><td>%s</td><td>%s</td></tr>",
          Escape(source.source()), source.runs(),
          source.heldout().median_abs_err(), source.heldout().under(),
          source.heldout().runs(), source.heldout().said_fits_but_oom(),
          source.k95(), source.constant_gb(),
          source.usable_as_prior() ? "yes" : "no", predicts);
    }
    html += "</table>";
  }
  if (!set.page().left_out_of_fit().empty()) {
    html +=
        "<h2>On the page, left out of the fit</h2><p>The spec is not the "
        "measured model:</p><ul>";
    for (const std::string& line : set.page().left_out_of_fit()) {
      html += "<li>" + Escape(line) + "</li>";
    }
    html += "</ul>";
  }
  html +=
      "<h2>Predicted (held out) vs measured</h2>" + svg + "</body></html>\n";
  return html;
}

}  // namespace headroom
