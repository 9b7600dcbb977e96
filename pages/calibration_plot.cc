#include "pages/calibration_plot.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/evidence/evidence.h"

namespace headroom {
namespace {

// Plot area in SVG units (also CSS pixels: the page draws it at this size).
constexpr double kLeft = 80, kTop = 60, kWidth = 680, kHeight = 620;
constexpr double kSvgWidth = 1060, kSvgHeight = 750;
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
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"calibration-plot\" "
      "width=\"%g\" height=\"%g\" viewBox=\"0 0 %g %g\" "
      "font-family=\"sans-serif\" font-size=\"14\">\n"
      "<rect width=\"%g\" height=\"%g\" fill=\"white\"/>\n"
      "<text x=\"%g\" y=\"30\" font-size=\"17\" "
      "font-weight=\"bold\">%s</text>\n",
      kSvgWidth, kSvgHeight, kSvgWidth, kSvgHeight, kSvgWidth, kSvgHeight,
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
        X(gb), kTop + kHeight + 20, gb, kLeft - 8, Y(gb) + 5, gb);
  }
  absl::StrAppendFormat(
      &svg,
      "<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" "
      "stroke=\"#333\"/>\n"
      "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">predicted peak (GB, log)"
      "</text>\n<text transform=\"translate(22,%g) rotate(-90)\" "
      "text-anchor=\"middle\">measured peak (GB, log)</text>\n",
      kLeft, kTop, kWidth, kHeight, kLeft + kWidth / 2, kTop + kHeight + 46,
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
  // Points: measured runs as circles, OOM runs as crosses on their card;
  // simulated runs hollow.
  int plotted = 0, oom = 0, simulated = 0;
  int excluded = 0, unpredicted = 0, no_outcome = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!IsUsable(run)) {
      ++excluded;
      continue;
    }
    if (i >= predictions.size() || !predictions[i].has_value()) {
      ++unpredicted;
      continue;
    }
    if (!run.has_measured_peak_gb() && !run.has_oom_on_gb()) {
      ++no_outcome;
      continue;
    }
    const double p = *predictions[i];
    const char* colour =
        Colour(families[run.family().empty() ? "other" : run.family()]);
    const std::string tip = Escape(absl::StrFormat(
        "%s %s batch %d%s: predicted %.3g GB, %s", run.template_(), run.gpu(),
        run.batch(), run.simulated() ? " (simulated)" : "", p,
        run.has_measured_peak_gb()
            ? absl::StrFormat("measured %.3g GB", run.measured_peak_gb())
            : absl::StrFormat("OOM on %g GB", run.oom_on_gb())));
    if (run.simulated()) ++simulated;
    if (run.has_measured_peak_gb()) {
      absl::StrAppendFormat(
          &svg,
          "<circle class=\"run\" cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" %s>"
          "<title>%s</title></circle>\n",
          X(p), Y(run.measured_peak_gb()),
          run.simulated()
              ? absl::StrFormat(
                    "fill=\"none\" stroke=\"%s\" stroke-width=\"2\"", colour)
              : absl::StrFormat("fill=\"%s\" fill-opacity=\"0.8\"", colour),
          tip);
      ++plotted;
    } else {
      const double x = X(p), y = Y(run.oom_on_gb());
      absl::StrAppendFormat(
          &svg,
          "<path class=\"run\" d=\"M%.1f %.1fL%.1f %.1fM%.1f %.1fL%.1f %.1f\" "
          "stroke=\"%s\" stroke-width=\"2\"%s><title>%s</title></path>\n",
          x - 5, y - 5, x + 5, y + 5, x - 5, y + 5, x + 5, y - 5, colour,
          run.simulated() ? " stroke-dasharray=\"2 2\"" : "", tip);
      ++oom;
    }
  }
  // Card lines the OOM crosses sit on.
  for (double card : {16.0, 24.0, 40.0, 80.0}) {
    absl::StrAppendFormat(&svg,
                          "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" "
                          "stroke=\"#b00\" stroke-opacity=\"0.25\"/>"
                          "<text x=\"%g\" y=\"%.1f\" fill=\"#b00\" "
                          "font-size=\"12\">%g GB card</text>\n",
                          kLeft, Y(card), kLeft + kWidth, Y(card), kLeft + 4,
                          Y(card) - 4, card);
  }
  // Legend: families, then what the marks are and which runs are not drawn.
  const double lx = kLeft + kWidth + 24;
  double y = kTop + 12;
  for (const auto& [name, index] : families) {
    absl::StrAppendFormat(&svg,
                          "<circle cx=\"%g\" cy=\"%.1f\" r=\"5\" fill=\"%s\"/>"
                          "<text x=\"%g\" y=\"%.1f\">%s</text>\n",
                          lx + 5, y, Colour(index), lx + 16, y + 5,
                          Escape(name));
    y += 20;
  }
  std::vector<std::string> lines = {
      absl::StrFormat("%d of %d runs drawn:", plotted + oom, runs.size()),
      absl::StrFormat("o measured peak (%d)", plotted),
      absl::StrFormat("x OOM, on its card's line (%d)", oom)};
  if (simulated > 0) {
    lines.push_back(
        absl::StrFormat("hollow, dotted: simulated (%d)", simulated));
  }
  lines.push_back("dashed: y = x; band: +/-25 %");
  if (excluded + unpredicted + no_outcome > 0) {
    lines.push_back(absl::StrFormat("not drawn (%d):",
                                    excluded + unpredicted + no_outcome));
    if (excluded > 0) {
      lines.push_back(
          absl::StrFormat("  %d excluded from calibration", excluded));
      lines.push_back("    (each says why: excluded)");
    }
    if (unpredicted > 0) {
      lines.push_back(
          absl::StrFormat("  %d without a prediction", unpredicted));
      lines.push_back("    (no spec to predict from)");
    }
    if (no_outcome > 0) {
      lines.push_back(absl::StrFormat("  %d with neither a peak", no_outcome));
      lines.push_back("    nor an OOM card");
    }
  }
  y += 10;
  for (const std::string& line : lines) {
    absl::StrAppendFormat(&svg,
                          "<text x=\"%g\" y=\"%.1f\" fill=\"#444\" "
                          "xml:space=\"preserve\">%s</text>\n",
                          lx, y, Escape(line));
    y += 19;
  }
  svg += "</svg>\n";
  return svg;
}

namespace {

// One table column: its heading and what it means.
struct Column {
  std::string heading;
  std::string meaning;
};

// The heading row of a table whose columns are defined in its legend: each
// heading links to its definition (ids `prefix`-0, -1, ...).
std::string HeadRow(const std::string& prefix,
                    const std::vector<Column>& columns) {
  std::string row = "<tr>";
  for (size_t i = 0; i < columns.size(); ++i) {
    absl::StrAppendFormat(&row, "<th><a href=\"#%s-%d\">%s</a></th>", prefix, i,
                          columns[i].heading);
  }
  return row + "</tr>";
}

// The legend under a table: every column's meaning, and where the terms are
// defined.
std::string Legend(const std::string& prefix,
                   const std::vector<Column>& columns,
                   const std::string& defined_in) {
  std::string legend = "<dl class=\"legend\">";
  for (size_t i = 0; i < columns.size(); ++i) {
    absl::StrAppendFormat(&legend, "<dt id=\"%s-%d\">%s</dt><dd>%s</dd>",
                          prefix, i, columns[i].heading, columns[i].meaning);
  }
  return absl::StrCat(legend, "</dl><p class=\"defined\">Defined in ",
                      defined_in, ".</p>");
}

const std::vector<Column>& SummaryColumns() {
  static const auto* const columns = new std::vector<Column>{
      {"column", "the prediction column (its rows are explained below)"},
      {"runs",
       "runs the error figures are over: usable, completed, measured at "
       "&ge; 1 GB, with a prediction in the column"},
      {"medianAbsErr",
       "median over those runs of |predicted &minus; measured| / measured"},
      {"within25", "how many of those runs have that error &le; 0.25"},
      {"under",
       "how many of those runs were predicted <em>below</em> what they "
       "measured (the dangerous side; an unbiased column has about half)"},
      {"saidFitsButOom",
       "card checks (usable run &times; 16, 24, 40, 80 GB card) where "
       "predicted &middot; 1.15 &le; card said fits but the run did not fit"},
      {"saidNoButFits",
       "card checks where that rule said does not fit but the run fitted"},
      {"agree",
       "card checks where the rule and the measurement agree; the three "
       "card-check columns add up to the number of checks"},
  };
  return *columns;
}

const std::vector<Column>& RowNames() {
  static const auto* const rows = new std::vector<Column>{
      {"ours", "our factors fitted on every run (in sample)"},
      {"ours_heldout",
       "our factors fitted with the run's whole template removed: the figure "
       "for a model never seen; k comes from it"},
      {"ours_anchored",
       "each run predicted from the other runs of its template (leave one "
       "run out): the figure for a model measured at other batches"},
      {"reference_shipped",
       "the reference planner's predictions, as the runs file carries them"},
      {"reference_heldout", "the reference planner's, held out"},
      {"accelerate_fp32", "accelerate estimate-memory's, fp32"},
      {"accelerate_bf16", "accelerate estimate-memory's, bf16"},
  };
  return *rows;
}

std::string SummaryRow(const std::string& name, const v1::ColumnSummary& s) {
  return absl::StrFormat(
      "<tr><td>%s</td><td>%d</td><td>%.4f</td><td>%d</td><td>%d</td>"
      "<td>%d</td><td>%d</td><td>%d</td></tr>",
      Escape(name), s.runs(), s.median_abs_err(), s.within25(), s.under(),
      s.said_fits_but_oom(), s.said_no_but_fits(), s.agree());
}

// The stored runs the page counts: real ones and simulated ones.
struct RunCounts {
  int real = 0;
  int simulated = 0;
};

RunCounts CountRuns(const std::vector<v1::MeasuredRun>& runs) {
  RunCounts counts;
  for (const v1::MeasuredRun& run : runs) {
    (run.simulated() ? counts.simulated : counts.real) += 1;
  }
  return counts;
}

std::string RegimeSection(const v1::FactorSet& set) {
  const Prior prior = ChoosePrior(PriorsOf(set));
  const bool global_prior = prior.source == v1::REFERENCE;
  std::string html = absl::StrFormat(
      "<h2 id=\"regimes\">Regimes: which factors answer for each GPU</h2>"
      "<p>An answer anchored on the model's own stored runs uses regime "
      "<code>anchored</code> on every GPU (the anchored bound above, and the "
      "GPU's constant). Any other answer uses the <code>%s</code> prior "
      "(k %.2f at 0.95)%s. A GPU below, adopted, answers with its own "
      "regime only under the global (<code>reference</code>) prior; every "
      "other GPU, and a bare size in GB, answers <code>global</code>.</p>",
      SourceName(prior.source), prior.k95,
      global_prior ? ""
                   : absl::StrFormat(", so every GPU answers <code>global"
                                     "</code> while the %s fit is the prior",
                                     SourceName(prior.source)));
  if (set.regimes().empty()) {
    return html +
           "<p>No GPU had enough runs to be considered (20 usable runs of 5 "
           "templates).</p>";
  }
  static const auto* const columns = new std::vector<Column>{
      {"GPU", "the catalog GPU whose runs the regime was fitted on alone"},
      {"runs", "usable runs of that GPU"},
      {"adopted",
       "whether the regime beat the global factors on that GPU's runs (all "
       "three rules of docs/regimes.md)"},
      {"answers with", "the regime answers for that GPU use now"},
      {"medianAbsErr regime",
       "the regime's held-out median abs error on the GPU's runs "
       "(<code>ours_heldout</code>)"},
      {"medianAbsErr global",
       "the global factors' held-out median abs error on the same runs "
       "(<code>global_heldout</code>)"},
      {"saidFitsButOom regime", "the regime's held-out saidFitsButOom"},
      {"saidFitsButOom global", "the global factors', on the same runs"},
      {"k at 0.95", "the regime's own k at coverage 0.95"},
      {"why", "which rules held and which did not, with the numbers"},
  };
  html += "<table id=\"regime-table\">" + HeadRow("regime", *columns);
  for (const v1::Regime& regime : set.regimes()) {
    const auto& summary = regime.page().summary();
    const auto figure = [&](const char* column, bool error) {
      auto it = summary.find(column);
      if (it == summary.end()) return std::string("&ndash;");
      return error ? absl::StrFormat("%.4f", it->second.median_abs_err())
                   : absl::StrFormat("%d", it->second.said_fits_but_oom());
    };
    const std::string answers =
        !regime.adopted() ? "global"
        : global_prior
            ? Escape(regime.gpu())
            : absl::StrCat("global (the ", SourceName(prior.source), " prior)");
    absl::StrAppendFormat(
        &html,
        "<tr><td>%s</td><td>%d</td><td>%s</td><td>%s</td><td>%s</td>"
        "<td>%s</td><td>%s</td><td>%s</td><td>%.2f</td><td class=\"text\">"
        "%s</td></tr>",
        Escape(regime.gpu()), regime.runs(), regime.adopted() ? "yes" : "no",
        answers, figure("ours_heldout", true), figure("global_heldout", true),
        figure("ours_heldout", false), figure("global_heldout", false),
        regime.k95(), Escape(regime.reason()));
  }
  return html + "</table>" +
         Legend("regime", *columns,
                "docs/regimes.md, &ldquo;Target regimes&rdquo; and "
                "&ldquo;Per-GPU regimes&rdquo;");
}

// The simulated runs, listed apart (at most kListed of them).
std::string SimulatedSection(const std::vector<v1::MeasuredRun>& runs,
                             const Predictions& predictions,
                             bool include_simulated, int count) {
  constexpr int kListed = 100;
  std::string html = absl::StrFormat(
      "<h2 id=\"simulated\">Simulated runs (%d)</h2><p>Runs measured on a "
      "simulated GPU (<code>simulated</code>, <code>measured_by: SIM</code>): "
      "they never enter a calibration unless a refit asks for them, and "
      "anchor only questions that ask for them. %s</p>",
      count,
      include_simulated
          ? "They are drawn in the plot above (hollow); <a "
            "href=\"?\">without <code>include_simulated</code></a> they are "
            "listed here alone."
          : "They are not in the plot or its counts; <a "
            "href=\"?include_simulated=1\"><code>?include_simulated=1"
            "</code></a> draws them.");
  if (count == 0) return html + "<p>None stored.</p>";
  static const auto* const columns = new std::vector<Column>{
      {"template", "the catalog template the run measured"},
      {"GPU", "the simulated GPU"},
      {"batch", "the batch size"},
      {"measured", "the peak it reported (GB), or the card it went OOM on"},
      {"predicted", "the current global factors' prediction (GB)"},
  };
  html += "<table id=\"simulated-table\">" + HeadRow("sim", *columns);
  int listed = 0;
  for (size_t i = 0; i < runs.size() && listed < kListed; ++i) {
    const v1::MeasuredRun& run = runs[i];
    if (!run.simulated()) continue;
    ++listed;
    absl::StrAppendFormat(
        &html,
        "<tr><td>%s</td><td>%s</td><td>%d</td><td>%s</td><td>%s</td></tr>",
        Escape(run.template_()), Escape(run.gpu()), run.batch(),
        run.has_measured_peak_gb()
            ? absl::StrFormat("%.3f", run.measured_peak_gb())
        : run.has_oom_on_gb() ? absl::StrFormat("OOM on %g GB", run.oom_on_gb())
                              : std::string("&ndash;"),
        i < predictions.size() && predictions[i].has_value()
            ? absl::StrFormat("%.3f", *predictions[i])
            : std::string("&ndash;"));
  }
  html += "</table>";
  if (count > listed) {
    absl::StrAppendFormat(&html, "<p>and %d more.</p>", count - listed);
  }
  return html + Legend("sim", *columns,
                       "docs/calibration-page.md, &ldquo;Simulated "
                       "runs&rdquo;");
}

// The bound per kind of setup (issue 30 item 5) and the device costs
// (item 2): what answers of each kind are bounded by, held out by
// publication.
std::string KindSection(const v1::FactorSet& set) {
  static const auto* const columns = new std::vector<Column>{
      {"kind", "one GPU or the strategy, full / LoRA / QLoRA, +offload"},
      {"k allocated", "k of the allocator figure"},
      {"k reserved", "k of the caching allocator's reserved figure"},
      {"k device", "k of the device figure the verdict compares"},
      {"measurements",
       "held-out measurements k came from (published rows predicted "
       "without their publication; OOM rows as card / predicted)"},
      {"publications", "the publications they came from"},
      {"covered",
       "rows whose figure the bound held out by publication covers (OOM "
       "rows: not called FITS)"},
      {"medianAbsErr", "the figure each row reports, held out"},
      {"OOM rows", "published OOMs of this kind"},
      {"saidFitsButOom", "of them, called FITS held out: must be 0"},
      {"note", "widest: too few of its own; 0: the prior's k"},
  };
  std::string html =
      "<h2 id=\"kinds\">Upper bound per kind of setup</h2><p>Answers of a "
      "kind take the larger of the prior's k and the kind's; a kind nothing "
      "measured takes the widest k and is never FITS.</p><table "
      "id=\"kind-table\">" +
      HeadRow("kind", *columns);
  for (const v1::SetupKindBound& k : set.kind_bounds()) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>%s</td><td>%.2f</td><td>%.2f</td><td>%.2f</td><td>%d</td>"
        "<td>%d</td><td>%d</td><td>%.1f %%</td><td>%d</td><td>%d</td><td "
        "class=\"text\">%s</td></tr>",
        Escape(k.kind()), k.k_allocated(), k.k_reserved(), k.k_device(),
        k.measurements(), k.publications(), k.covered(),
        100 * k.median_abs_err(), k.oom_rows(), k.said_fits_but_oom(),
        Escape(k.note()));
  }
  html += "</table>" + Legend("kind", *columns,
                              "docs/calibration-page.md, &ldquo;Kinds of "
                              "setup&rdquo;");
  static const auto* const cost_columns = new std::vector<Column>{
      {"quantity",
       "reserved_ratio (reserved / allocated), context_gb (CUDA context and "
       "workspaces), nccl_gb/&lt;strategy&gt;"},
      {"source", "measurement source; * is the prior over every source"},
      {"GPU", "GPU kind; * is the prior over every kind"},
      {"value", "the median over its runs"},
      {"runs", "runs carrying the figures"},
      {"held out", "median |error| of the figure it predicts, model left out"},
  };
  html +=
      "<h2 id=\"device-costs\">Device costs</h2><table "
      "id=\"device-cost-table\">" +
      HeadRow("cost", *cost_columns);
  for (const v1::DeviceCostFit& c : set.device_costs()) {
    absl::StrAppendFormat(&html,
                          "<tr><td>%s</td><td>%s</td><td>%s</td><td>%.4g</td>"
                          "<td>%d</td><td>%.1f %%</td></tr>",
                          Escape(c.quantity()), Escape(c.source()),
                          Escape(c.gpu()), c.value(), c.runs(),
                          100 * c.heldout_median_abs_err());
  }
  return html + "</table>" +
         Legend("cost", *cost_columns,
                "docs/calibration-page.md, &ldquo;Device costs&rdquo;");
}

}  // namespace

std::string CalibrationHtml(const v1::FactorSet& set,
                            const std::vector<v1::MeasuredRun>& runs,
                            const Predictions& predictions,
                            bool include_simulated) {
  const RunCounts counts = CountRuns(runs);
  bool simulated_in_fit = false;
  for (const v1::SourceFit& source : set.page().sources()) {
    if (source.source() == SourceName(v1::SIM)) simulated_in_fit = true;
  }
  std::string html = absl::StrFormat(
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>Headroom "
      "calibration %s</title><link rel=\"icon\" href=\"data:,\"><style>"
      // At most 80em wide and never wider than the window: a table wider
      // than the page scrolls inside its own box, the plot shrinks.
      "*{box-sizing:border-box}body{font-family:sans-serif;margin:2em auto;"
      "padding:0 2em;max-width:80em;overflow-wrap:anywhere}"
      "table{border-collapse:collapse;display:block;max-width:100%%;"
      "overflow-x:auto}td,th{padding:4px 10px;border-bottom:"
      "1px solid #ddd;text-align:right}th:first-child,td:first-child,"
      "td.text{text-align:left}td.text{min-width:24em}th a{color:inherit}"
      "dl.legend{display:grid;grid-template-columns:max-content auto;gap:"
      "2px 1em;font-size:90%%;color:#333}dl.legend dt{font-weight:bold}"
      "dl.legend dd{margin:0}p.defined{font-size:90%%;color:#555}"
      "#calibration-plot{width:%gpx;max-width:100%%;height:auto}</style>"
      "</head><body><h1>Calibration of factor set %s</h1>"
      "<p>Trained on %s. Factors: optimizer %.4g, outputs %.4g, attention "
      "%.4g, internal %.4g, recurrent %.4g, transient %.4g; headroom %.2f; "
      "k %.2f at coverage 0.9, %.2f at 0.95. Fitted on relative squared "
      "error, an OOM penalty of weight %.4g and a prior of weight %.4g that "
      "each factor is 1.</p>",
      Escape(set.version()), kSvgWidth, Escape(set.version()),
      Escape(set.trained_on()), set.factors().optimizer(),
      set.factors().outputs(), set.factors().attention(),
      set.factors().internal(), set.factors().recurrent(),
      set.factors().transient(), set.headroom(), set.k90(), set.k95(),
      set.oom_penalty(), set.prior_weight());
  absl::StrAppendFormat(
      &html,
      "<p id=\"stored-runs\">The store holds %d runs: %d measured on real "
      "GPUs and %d simulated (<a href=\"#simulated\">listed apart</a>; %s). "
      "The tables below are the factor set's, over the runs it was fitted "
      "on (%s).</p>",
      counts.real + counts.simulated, counts.real, counts.simulated,
      include_simulated ? "drawn in the plot, as asked"
                        : "not in the plot unless asked",
      simulated_in_fit ? "simulated runs included: its refit asked for them"
                       : "no simulated run among them");
  html += "<h2>Prediction columns</h2><table id=\"column-table\">" +
          HeadRow("col", SummaryColumns());
  for (const Column& row : RowNames()) {
    auto it = set.page().summary().find(row.heading);
    if (it == set.page().summary().end()) continue;
    html += SummaryRow(row.heading, it->second);
  }
  html += "</table>" +
          Legend("col", SummaryColumns(),
                 "docs/calibration-page.md, &ldquo;Which runs count&rdquo; "
                 "and &ldquo;The fields of a column&rdquo;");
  html += "<p>The rows:</p>" + Legend("row", RowNames(),
                                      "docs/calibration-page.md, &ldquo;The "
                                      "columns&rdquo;");

  static const auto* const bound_columns = new std::vector<Column>{
      {"coverage", "the share of runs k is to cover"},
      {"k",
       "the sorted held-out ratios measured / predicted at that coverage, "
       "rounded up to 0.01: the upper bound is k &middot; predicted"},
      {"OOM called FITS",
       "card checks where the run did not fit and the verdict was FITS "
       "(<code>noFitFits</code>): must be 0"},
      {"OOM BORDERLINE", "did not fit, verdict BORDERLINE"},
      {"OOM DOES_NOT_FIT", "did not fit, verdict DOES_NOT_FIT"},
      {"fits FITS", "the run fitted, verdict FITS"},
      {"fits BORDERLINE", "fitted, verdict BORDERLINE"},
      {"fits DOES_NOT_FIT", "fitted, verdict DOES_NOT_FIT"},
  };
  html += "<h2>Three-way verdict (held out)</h2><table id=\"bound-table\">" +
          HeadRow("bound", *bound_columns);
  for (const v1::UpperBound& b : set.page().upper_bound().bounds()) {
    absl::StrAppendFormat(
        &html,
        "<tr><td>%.2f</td><td>%.2f</td><td>%d</td><td>%d</td><td>%d</td>"
        "<td>%d</td><td>%d</td><td>%d</td></tr>",
        b.coverage(), b.k(), b.no_fit_fits(), b.no_fit_borderline(),
        b.no_fit_does_not(), b.fit_fits(), b.fit_borderline(),
        b.fit_does_not());
  }
  html += "</table>" + Legend("bound", *bound_columns,
                              "docs/calibration-page.md, &ldquo;The upper "
                              "bound&rdquo;, and docs/verdicts.md");
  const v1::AnchoredBound& anchored = set.page().anchored();
  if (!anchored.buckets().empty()) {
    static const auto* const anchored_columns = new std::vector<Column>{
        {"batch / largest measured",
         "the bucket: the asked batch over the largest batch measured of "
         "the model"},
        {"k at 0.9", "the bucket's k at coverage 0.9"},
        {"k at 0.95", "the bucket's k at coverage 0.95"},
        {"runs", "leave-one-out ratios of at least 1 GB in the bucket"},
        {"from",
         "where the k comes from: the bucket's own runs, pooled with every "
         "further bucket's, or the prior's k when too few"},
    };
    absl::StrAppendFormat(
        &html,
        "<h2>Anchored answers</h2><p>ours_anchored: each run predicted from "
        "the other runs of its template (leave one run out within %d "
        "models, %d runs), with the global factors held out too. Shrinkage "
        "toward the prior: weight %.4g, x%.4g on the batch-independent "
        "bytes, chosen by held-out error. k by how far the asked batch lies "
        "beyond the largest measured one:</p><table id=\"anchored-table\">",
        anchored.models(), anchored.runs(), anchored.prior_weight(),
        anchored.fixed_hold());
    html += HeadRow("anchored", *anchored_columns);
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
    html += "</table>" + Legend("anchored", *anchored_columns,
                                "docs/calibration-page.md, &ldquo;The "
                                "anchored bound&rdquo;");
    html += "<p>GPU constants (GB, added to anchored peaks):";
    for (const auto& [gpu, gb] : anchored.gpu_constant_gb()) {
      absl::StrAppendFormat(&html, " %s %+.3f;", Escape(gpu), gb);
    }
    html += "</p>";
  }
  html += KindSection(set);
  html += RegimeSection(set);
  if (!set.page().sources().empty()) {
    static const auto* const source_columns = new std::vector<Column>{
        {"source", "how the runs were measured"},
        {"runs", "usable runs of the source its fit used"},
        {"held out medianAbsErr",
         "the source's runs held out by template within the source"},
        {"under", "of those runs, how many were predicted below the measured"},
        {"saidFitsButOom", "held-out card checks said fits that did not fit"},
        {"k at 0.95", "the source's own held-out k at coverage 0.95"},
        {"constant GB",
         "GB added to every peak of the source, chosen held out"},
        {"prior",
         "usable as the prior of answers (&ge; 30 usable runs of &ge; 1 GB "
         "and a k at both coverages)"},
        {"predicting the other source",
         "this source's factors predicting another source's runs: median abs "
         "error, under of runs"},
    };
    html += "<h2>Measurement sources</h2><table id=\"source-table\">" +
            HeadRow("source", *source_columns);
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
          "</td><td>%.2f</td><td>%.3f</td><td>%s</td><td class=\"text\">%s</td>"
          "</tr>",
          Escape(source.source()), source.runs(),
          source.heldout().median_abs_err(), source.heldout().under(),
          source.heldout().runs(), source.heldout().said_fits_but_oom(),
          source.k95(), source.constant_gb(),
          source.usable_as_prior() ? "yes" : "no", predicts);
    }
    html += "</table>" + Legend("source", *source_columns,
                                "docs/calibration-page.md, &ldquo;Measurement "
                                "sources&rdquo;");
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

  // The plot: the stored runs (real ones, and simulated ones if asked) under
  // the current global factors.
  std::vector<v1::MeasuredRun> drawn;
  Predictions drawn_predictions;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].simulated() && !include_simulated) continue;
    drawn.push_back(runs[i]);
    drawn_predictions.push_back(i < predictions.size() ? predictions[i]
                                                       : std::nullopt);
  }
  const std::string title = absl::StrFormat(
      "Factor set %s, global factors: predicted vs measured, %d stored runs%s",
      set.version(), drawn.size(),
      include_simulated ? absl::StrFormat(" (%d simulated)", counts.simulated)
                        : std::string(" (simulated ones apart)"));
  absl::StrAppendFormat(
      &html,
      "<h2 id=\"plot\">Predicted (global factors, in sample) vs measured</h2>"
      "<p>Each stored run%s predicted by the factor set's global factors: "
      "in sample for the runs they were fitted on, so the plot shows the "
      "fit, not how it does on a model it has not seen (that is the "
      "<code>ours_heldout</code> row above; <code>headroom calib page "
      "--svg</code> plots it). The legend counts the runs drawn and says "
      "why the others are not.</p>",
      include_simulated ? ", simulated ones included," : "");
  html += CalibrationSvg(drawn, drawn_predictions, title);
  html +=
      SimulatedSection(runs, predictions, include_simulated, counts.simulated);
  return html + "</body></html>\n";
}

}  // namespace headroom
