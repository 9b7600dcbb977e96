#include "client/density_commands.h"

#include <iomanip>
#include <set>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/json_io.h"
#include "client/cli_context.h"
#include "client/cli_json.h"
#include "client/commands.h"
#include "core/density/density_rank.h"
#include "io/files.h"

namespace headroom::cli {
namespace {

// The columns in words (density.proto's DensityRun), the header of the
// table and of `density rank --help`.
constexpr char kDensityColumns[] =
    "Columns: rel_acc, rel_thru, rel_avail: a run's accuracy, throughput "
    "and availability over the leaderboard's peaks (accuracy: the best of "
    "all runs; throughput, availability: the best of the learners; 1 = the "
    "peak); q: their geometric mean; ram_kib: the model's memory in KiB; "
    "lpd (learning per density): q x shrink (the most accurate run's memory "
    "over this run's), 0 unless rel_acc >= 0.7 (a learner); pillars: how "
    "many of rel_acc, rel_thru, rel_avail are >= 0.8; band: keep (rel_acc >= "
    "0.8 and 2+ pillars), acc (rel_acc >= 0.8 only), else a dash; gold: 3 "
    "pillars at a fifth of the most accurate run's memory or less. "
    "Champions: champ the highest score of all runs, acc_champ the best "
    "accuracy, soft_champ the best soft accuracy, live_champ the highest "
    "score of the learners.";

// True when the first line of `text` is a whole run with an id, which a
// leaderboard's first line never is.
bool LooksLikeJsonLines(absl::string_view text) {
  absl::string_view first = absl::StripAsciiWhitespace(text);
  first = first.substr(0, first.find('\n'));
  v1::DensityRawRun run;
  return ParseJson(first, "first line", /*ignore_unknown=*/true, &run).ok() &&
         !run.id().empty();
}

absl::StatusOr<std::vector<v1::DensityRawRun>> RunsOfLeaderboard(
    absl::string_view text, const std::string& path) {
  v1::DensityLeaderboard board;
  const absl::Status parsed =
      ParseJson(text, path, /*ignore_unknown=*/false, &board);
  if (!parsed.ok()) return parsed;
  std::vector<v1::DensityRawRun> runs;
  std::set<std::string> seen;
  for (const v1::DensityRawRun* champion :
       {&board.champ(), &board.acc_champ(), &board.soft_champ(),
        &board.live_champ()}) {
    if (champion->id().empty()) continue;
    if (seen.insert(champion->id()).second) runs.push_back(*champion);
  }
  for (const auto* list : {&board.top(), &board.top_speed(), &board.top_avail(),
                           &board.top_mix()}) {
    for (const v1::DensityRun& run : *list) {
      if (seen.insert(run.id()).second) runs.push_back(RawOf(run));
    }
  }
  if (board.has_gold_std() && seen.insert(board.gold_std().id()).second) {
    runs.push_back(RawOf(board.gold_std()));
  }
  return runs;
}

absl::StatusOr<std::vector<v1::DensityRawRun>> RunsOfJsonLines(
    absl::string_view text, const std::string& path) {
  std::vector<v1::DensityRawRun> runs;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    v1::DensityRawRun run;
    const absl::Status parsed =
        ParseJson(line, absl::StrCat(path, " line ", line_number),
                  /*ignore_unknown=*/true, &run);
    if (!parsed.ok()) return parsed;
    runs.push_back(std::move(run));
  }
  return runs;
}

void PrintList(const char* title,
               const google::protobuf::RepeatedPtrField<v1::DensityRun>& runs,
               std::ostream& out) {
  out << "\n" << title << "\n";
  out << std::left << std::setw(4) << "#" << std::setw(44) << "id" << std::right
      << std::setw(9) << "lpd" << std::setw(8) << "q" << std::setw(9)
      << "rel_acc" << std::setw(9) << "rel_thru" << std::setw(10) << "rel_avail"
      << std::setw(10) << "ram_kib" << std::setw(8) << "pillars"
      << "  band  gold\n";
  int rank = 0;
  for (const v1::DensityRun& run : runs) {
    out << std::left << std::setw(4) << ++rank << std::setw(44) << run.id()
        << std::right << std::fixed << std::setprecision(4) << std::setw(9)
        << run.lpd() << std::setw(8) << run.q() << std::setw(9) << run.rel_acc()
        << std::setw(9) << run.rel_thru() << std::setw(10) << run.rel_avail()
        << std::defaultfloat << std::setprecision(6) << std::setw(10)
        << run.ram_kib() << std::setw(8) << run.pillars() << "  " << run.band()
        << (run.gold() ? "  gold" : "") << "\n";
  }
}

void PrintTable(const v1::DensityLeaderboard& board, std::ostream& out) {
  out << kDensityColumns << "\n\n";
  out << "runs " << board.n() << "\n";
  out << "peak_acc " << board.peak_acc() << "  peak_thru " << board.peak_thru()
      << "  peak_avail " << board.peak_avail()
      << "  (learners: rel_acc >= " << kLearnerRelAcc << ")\n";
  out << "fast_thru " << board.fast_thru() << " (" << board.fast_id()
      << ")  best_avail " << board.best_avail() << " (" << board.avail_id()
      << ")\n";
  out << "champ " << board.champ().id() << "  acc_champ "
      << board.acc_champ().id() << " (ram_kib " << board.acc_champ().ram_kib()
      << ")  soft_champ " << board.soft_champ().id() << "  live_champ "
      << board.live_champ().id() << "\n";
  if (board.top_size() == 0) return;
  PrintList("top (by lpd)", board.top(), out);
  PrintList("top_speed (learners by rel_thru)", board.top_speed(), out);
  PrintList("top_avail (learners by rel_avail)", board.top_avail(), out);
  PrintList("top_mix (learners by q)", board.top_mix(), out);
  out << "\ngold_std "
      << (board.has_gold_std() ? board.gold_std().id() : "(no keep run)")
      << "\n";
  for (const v1::DensityModeGroup& group : board.gold_modes()) {
    out << "gold_mode " << group.mode() << " n " << group.n() << " best_acc "
        << group.best_acc() << " min_ram_kib " << group.min_ram_kib()
        << " max_thru " << group.max_thru() << " best_q " << group.best_q()
        << " smallest " << group.smallest() << " fastest " << group.fastest()
        << "\n";
  }
}

}  // namespace

absl::StatusOr<std::vector<v1::DensityRawRun>> LoadDensityRuns(
    const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  if (LooksLikeJsonLines(*text)) return RunsOfJsonLines(*text, path);
  return RunsOfLeaderboard(*text, path);
}

int DensityRank(const std::string& runs_path, bool json, std::ostream& out,
                std::ostream& err) {
  if (runs_path.empty()) return Fail(err, "--runs FILE is required");
  absl::StatusOr<std::vector<v1::DensityRawRun>> runs =
      LoadDensityRuns(runs_path);
  if (!runs.ok()) return Fail(err, runs.status());
  v1::RankDensityRequest request;
  for (v1::DensityRawRun& run : *runs) *request.add_runs() = std::move(run);
  absl::StatusOr<v1::RankDensityResponse> response = RankDensity(request);
  if (!response.ok()) {
    return Fail(err,
                absl::StrCat(runs_path, ": ", response.status().message()));
  }
  if (!response->empty_reason().empty()) {
    err << "headroom: empty ranking: " << response->empty_reason() << "\n";
  }
  if (json) {
    out << CliJson(response->leaderboard()) << "\n";
  } else {
    PrintTable(response->leaderboard(), out);
  }
  return 0;
}

void RegisterDensityCommands(CLI::App& app, CliContext& ctx) {
  Options& o = ctx.options;
  CLI::App* density = ctx.Command(&app, "density", "density, offline");
  CLI::App* rank = ctx.Command(
      density, "rank",
      "the density leaderboard: which training runs learn most per byte");
  rank->footer(absl::StrCat(kDensityColumns, "\n", rank->get_footer()));
  rank->add_option("--runs", o.runs, "measured runs file (JSON lines)");
  AddJson(rank, o);
  ctx.Run(rank, [&ctx] {
    if (ctx.options.runs.empty()) {
      return Fail(ctx.err,
                  "--runs FILE is required (measured runs, JSON lines)");
    }
    return DensityRank(ctx.options.runs, ctx.options.json, ctx.out, ctx.err);
  });
}

}  // namespace headroom::cli
