#include "client/fit_output.h"

#include <algorithm>
#include <iomanip>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "headroom/v1/model.pb.h"

namespace headroom::cli {
namespace {

// Rows of cells printed with each column as wide as its widest cell (a
// 1234.56 GB figure widens its column, never shifts the next), words
// left-aligned, numbers right-aligned, two spaces between columns.
class Table {
 public:
  // `left[c]`: column c holds words.
  Table(std::vector<std::string> header, std::vector<bool> left)
      : left_(std::move(left)) {
    rows_.push_back(std::move(header));
  }

  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void Print(const std::string& indent, std::ostream& out) const {
    std::vector<size_t> width(left_.size(), 0);
    for (const std::vector<std::string>& row : rows_) {
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        width[c] = std::max(width[c], row[c].size());
      }
    }
    for (const std::vector<std::string>& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size() && c < width.size(); ++c) {
        if (c > 0) line += "  ";
        const std::string pad(width[c] - row[c].size(), ' ');
        line += left_[c] ? row[c] + pad : pad + row[c];
      }
      // The last column may be words of any length: no trailing spaces.
      line.erase(line.find_last_not_of(' ') + 1);
      out << line << "\n";
    }
  }

 private:
  std::vector<bool> left_;
  std::vector<std::vector<std::string>> rows_;
};

// "2.33"; a figure that rounds to zero prints 0.00, never -0.00.
std::string Gb(double gb) {
  const std::string text = absl::StrFormat("%.2f", gb);
  return text == "-0.00" ? "0.00" : text;
}

// "anchored on 4 measured runs (batch 8-96; A10G, H100)" or "prior only".
std::string BasisLine(const v1::Basis& basis) {
  if (basis.kind() != v1::Basis::ANCHORED) {
    return absl::StrCat("prior only (", basis.source(), " factors; ",
                        basis.why(), ")");
  }
  return absl::StrCat(
      "anchored on ", basis.runs(), " measured runs (batch ", basis.min_batch(),
      basis.max_batch() != basis.min_batch()
          ? absl::StrCat("-", basis.max_batch())
          : "",
      "; ", absl::StrJoin(basis.gpus(), ", "), "; ", basis.source(),
      basis.oom_runs() > 0 ? absl::StrCat("; ", basis.oom_runs(), " OOM") : "",
      ")");
}

// "bound: kind 1gpu/qlora, k allocated 1.19, reserved 1.22, device 1.25
// (14 held-out measurements of this kind)", saying where k is the widest
// of all kinds or nothing of the kind was measured. A kind without k of
// its own (0) takes the answer's k, and its note says which.
std::string BoundLine(const v1::SetupKindBound& bound) {
  std::string line = absl::StrCat("bound: kind ", bound.kind());
  if (bound.k_allocated() > 0 || bound.k_reserved() > 0 ||
      bound.k_device() > 0) {
    absl::StrAppend(&line,
                    absl::StrFormat(", k allocated %.2f, reserved %.2f, "
                                    "device %.2f",
                                    bound.k_allocated(), bound.k_reserved(),
                                    bound.k_device()));
  }
  if (bound.untested()) {
    absl::StrAppend(&line,
                    " (untested: no measurement of this kind, so no answer "
                    "on it is FITS)");
  } else if (bound.widest()) {
    absl::StrAppend(&line, " (", bound.measurements(),
                    " held-out measurements of this kind, too few: the "
                    "widest k of all kinds)");
  } else if (bound.measurements() > 0) {
    absl::StrAppend(&line, " (", bound.measurements(),
                    " held-out measurements of this kind)");
  }
  if (!bound.note().empty()) absl::StrAppend(&line, "; ", bound.note());
  return line;
}

// The largest batches in words: "none fits" and the cap said as such.
std::string MaxBatchWords(const v1::TargetResult& t) {
  constexpr uint64_t kCap = 1u << 20;
  auto words = [&](uint64_t batch, const char* what) {
    if (batch == 0) return absl::StrCat("no batch is ", what);
    if (batch >= kCap) {
      return absl::StrCat("every batch up to ", kCap, " is ", what,
                          " (1048576 is the largest batch the planner "
                          "considers)");
    }
    return absl::StrCat("largest batch ", what, ": ", batch);
  };
  return absl::StrCat(
      words(t.max_batch_fits(), "FITS"), "; ",
      words(t.max_batch_not_does_not_fit(), "FITS or BORDERLINE"));
}

std::string VerdictOf(const v1::TargetResult& t, int i) {
  return i < t.verdicts_size() ? v1::Verdict_Name(t.verdicts(i)) : "";
}

// Per requested batch on one card: the deciding phase's three figures and
// the device upper bound the verdict compares with the card.
void PrintFigures(const v1::TargetResult& t, std::ostream& out) {
  Table table({"batch", "allocated GB", "reserved GB", "device GB",
               "device upper GB", "phase", "verdict"},
              {false, false, false, false, false, true, true});
  for (int i = 0; i < t.batches_size(); ++i) {
    const v1::TargetBatch& b = t.batches(i);
    const v1::MemoryFigures& f = b.figures();
    table.Add({absl::StrCat(b.batch()), Gb(f.allocated_gb()),
               Gb(f.reserved_gb()), Gb(f.device_gb()), Gb(f.device_upper_gb()),
               b.phase(), VerdictOf(t, i)});
  }
  table.Print("  ", out);
}

// " (fitted on 12 torch-harness runs on H200)", or nothing.
std::string Basis(const std::string& basis) {
  return basis.empty() ? "" : absl::StrCat(" (", basis, ")");
}

// fit --explain, per card: what turns allocated bytes into the device's,
// and per batch every phase three ways with the verdict's arithmetic.
void PrintExplain(const v1::TargetResult& t, double headroom,
                  const v1::SetupKindBound& bound, std::ostream& out) {
  if (t.has_device()) {
    const v1::DeviceCosts& d = t.device();
    out << "  device costs: reserved = allocated x "
        << absl::StrFormat("%.3f", d.reserved_ratio())
        << Basis(d.reserved_basis()) << "; device = reserved + CUDA context "
        << Gb(d.context_gb()) << " GB" << Basis(d.context_basis()) << " + NCCL "
        << Gb(d.nccl_gb()) << " GB" << Basis(d.nccl_basis()) << "\n";
  }
  for (int i = 0; i < t.batches_size(); ++i) {
    const v1::TargetBatch& b = t.batches(i);
    const double upper = b.figures().device_upper_gb();
    out << "  batch " << b.batch() << ": device upper " << Gb(upper)
        << " GB x headroom " << Gb(headroom) << " = " << Gb(upper * headroom)
        << " GB on " << Gb(t.memory_gb()) << " GB: " << VerdictOf(t, i);
    if (bound.untested() && upper * headroom <= t.memory_gb() &&
        i < t.verdicts_size() && t.verdicts(i) != v1::FITS) {
      out << " (not FITS: nothing of the setup's kind has been measured)";
    }
    out << ", decided by phase " << b.phase() << "\n";
    Table table({"phase", "allocated", "upper", "reserved", "upper", "device",
                 "upper", "holds"},
                {true, false, false, false, false, false, false, true});
    for (const v1::PhaseFigures& p : b.phases()) {
      const v1::MemoryFigures& f = p.figures();
      table.Add({p.phase(), Gb(f.allocated_gb()), Gb(f.allocated_upper_gb()),
                 Gb(f.reserved_gb()), Gb(f.reserved_upper_gb()),
                 Gb(f.device_gb()), Gb(f.device_upper_gb()), p.holds()});
    }
    table.Print("    ", out);
  }
}

// --gpus auto: per GPU kind, the smallest count per strategy and the
// per-GPU breakdown there.
void PrintMinGpus(const v1::CheckFitResponse& r, std::ostream& out) {
  for (const v1::MinGpusTarget& t : r.min_gpus()) {
    out << "\n"
        << t.target() << " (" << t.memory_gb()
        << " GB): smallest GPU count at batch "
        << (r.estimates_size() > 0 ? r.estimates(0).batch() : 0) << " per GPU";
    if (!t.cheapest().empty()) out << "; cheapest " << t.cheapest();
    // A planner that gives the device figure: its columns.
    const bool device =
        std::any_of(t.strategies().begin(), t.strategies().end(),
                    [](const v1::MinGpusStrategy& s) {
                      return s.device_gb() > 0 || s.device_upper_gb() > 0;
                    });
    out << "\n";
    std::vector<std::string> header = {"strategy",  "fits",      "not-DNF",
                                       "nodes",     "peak/GPU",  "states",
                                       "gathered",  "buffers",   "activations",
                                       "host/node", "collective"};
    if (device) {
      header.push_back("device/GPU");
      header.push_back("device upper");
    }
    std::vector<bool> left(header.size(), false);
    left[0] = true;
    // Each column as wide as its widest figure (a 405B model's peaks).
    Table table(header, left);
    for (const v1::MinGpusStrategy& s : t.strategies()) {
      const auto count = [](uint32_t n) {
        return n == 0 ? std::string(">512") : absl::StrCat(n);
      };
      std::vector<std::string> row = {s.strategy(), count(s.gpus_fits()),
                                      count(s.gpus_not_does_not_fit())};
      if (s.gpus() != 0) {
        row.insert(row.end(),
                   {absl::StrCat(s.nodes()), Gb(s.peak_gb()),
                    Gb(s.sharded_states_gb()), Gb(s.gathered_units_gb()),
                    Gb(s.buffers_gb()), Gb(s.activations_gb()),
                    Gb(s.host_gb_per_node()),
                    s.collective_fitted() ? Gb(s.collective_gb())
                                          : std::string("unfitted")});
        if (device) {
          row.push_back(Gb(s.device_gb()));
          row.push_back(Gb(s.device_upper_gb()));
        }
      }
      table.Add(std::move(row));
    }
    table.Print("  ", out);
  }
  if (r.min_gpus_size() > 0) {
    out << "\nfits / not-DNF: the smallest N whose verdict is FITS / not "
           "DOES_NOT_FIT (>512: none). The breakdown is at that N and at the "
           "moment that peaks there: backward start (states, gathered units, "
           "buffers, activations) or the optimizer update (states and "
           "buckets; the activations are freed by then, so 0).\n";
  }
}

// The estimates' table: allocator peaks and their components, each column
// as wide as its widest figure (a 70B model's 1234.56 GB never runs into
// the next column).
void PrintEstimates(const v1::CheckFitResponse& r, std::ostream& out) {
  Table table(
      {"batch", "peak GB", "upper GB", "optimizer", "outputs", "attention",
       "internal", "recurrent", "transient", "peak at"},
      {false, false, false, false, false, false, false, false, false, true});
  for (const auto& e : r.estimates()) {
    const auto& c = e.components();
    std::string at = e.moment();
    // Another phase than the steady step holds the allocator's peak.
    if (!e.phase().empty() && e.phase() != "step") {
      absl::StrAppend(&at, " of the ", e.phase(), " phase");
    }
    if (e.basis().kind() == v1::Basis::ANCHORED) {
      absl::StrAppend(&at, absl::StrFormat(" (k %.2f, %.2fx the largest "
                                           "measured batch)",
                                           e.k(), e.basis().extrapolation()));
    }
    table.Add({absl::StrCat(e.batch()), Gb(e.peak_gb()), Gb(e.upper_gb()),
               Gb(c.optimizer()), Gb(c.outputs()), Gb(c.attention()),
               Gb(c.internal()), Gb(c.recurrent()), Gb(c.transient()), at});
  }
  table.Print("", out);
}

}  // namespace

std::string SignedGb(double gb) {
  const std::string text = Gb(gb);
  return text == "0.00" || text[0] == '-' ? text : "+" + text;
}

void PrintFit(const v1::CheckFitResponse& r, bool explain, std::ostream& out) {
  out << std::fixed << std::setprecision(2);
  for (const std::string& assumption : r.assumptions()) {
    out << "assumed " << assumption << "\n";
  }
  out << r.model() << ": " << r.params() << " parameters; factor set "
      << r.factor_set_version() << ", headroom " << r.headroom() << ", k "
      << r.k() << " at coverage " << r.coverage() << "\n";
  if (!r.framework().empty()) {
    out << "framework profile: " << r.framework()
        << (explain ? "" : " (--explain prints the plan)") << "\n";
  }
  if (explain && r.plan_size() > 0) {
    out << "plan:\n";
    for (const std::string& line : r.plan()) out << "  " << line << "\n";
  }
  if (r.estimates_size() > 0) {
    out << BasisLine(r.estimates(0).basis()) << "\n";
  }
  if (r.has_bound() && !r.bound().kind().empty()) {
    out << BoundLine(r.bound()) << "\n";
  }
  if (!r.learning().empty()) out << "learning: " << r.learning() << "\n";
  out << "\n";
  PrintEstimates(r, out);
  out << "\n";
  bool figures = false;
  for (const auto& t : r.targets()) {
    // The card the --gpu value was understood as ("RTX 4090 (24.00 GB)"); a
    // bare size names itself.
    if (absl::EndsWith(t.name(), " GB")) {
      out << t.name() << ":";
    } else {
      out << t.name() << " (" << t.memory_gb() << " GB):";
    }
    for (int i = 0; i < t.verdicts_size(); ++i) {
      out << " batch " << r.estimates(i).batch() << " "
          << v1::Verdict_Name(t.verdicts(i))
          << (i + 1 < t.verdicts_size() ? ";" : "");
    }
    out << "\n";
    if (t.batches_size() > 0) {
      figures = true;
      PrintFigures(t, out);
      if (explain) PrintExplain(t, r.headroom(), r.bound(), out);
    }
    if (t.regime() == "anchored") {
      out << "  anchored; card constant " << SignedGb(t.gpu_constant_gb())
          << " GB\n";
    } else if (t.regime() != "global") {
      out << "  regime " << t.regime() << ", k " << t.k() << "\n";
    }
    out << "  " << MaxBatchWords(t) << "\n";
  }
  if (figures) {
    out << "\nallocated: the allocator's peak (max_memory_allocated); "
           "reserved: the caching allocator's (max_memory_reserved); device: "
           "reserved plus the CUDA context and NCCL, what nvidia-smi shows. "
           "A verdict compares the device upper bound x headroom with the "
           "card, at the job's largest phase.\n";
  }
  PrintMinGpus(r, out);
}

}  // namespace headroom::cli
