#include "core/density/density_rank.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/input_limits.h"
#include "base/status_macros.h"

namespace headroom {
namespace {

constexpr char kFormula[] =
    "Density: can the net train and serve at the same time in a small box. "
    "rel_x = x / peak_x; learners have rel_acc >= 0.7 and alone set peak_thru "
    "and peak_avail (a fast run that does not learn is a trap). q = mix = "
    "geomean(rel_acc, rel_thru, rel_avail). shrink = acc_champ RAM / RAM; lpd "
    "= q x shrink, 0 unless rel_acc >= 0.7. Pillars: rel_acc, rel_thru, "
    "rel_avail >= 0.8. Band: keep = rel_acc >= 0.8 with 2+ pillars. Gold = 3 "
    "pillars at <= 20% of acc_champ RAM. Gold-std = the smallest, then "
    "fastest, keep run.";

// The band of a run whose rel_acc is under kPillarRel: an em dash, as the
// leaderboard file writes it.
constexpr char kBandNone[] = "\xE2\x80\x94";
constexpr char kBandKeep[] = "keep";
constexpr char kBandAcc[] = "acc";

double Ratio(double x, double peak) { return peak > 0 ? x / peak : 0; }

std::string RunName(size_t index, const std::string& id) {
  if (id.empty()) return absl::StrCat("run ", index);
  return absl::StrCat("run ", index, " (", id, ")");
}

absl::Status CheckText(size_t index, const v1::DensityRawRun& run,
                       const char* field, const std::string& value) {
  // The id is cut before it is echoed in any message.
  RETURN_IF_ERROR(CheckLength(value, absl::StrCat("run ", index, ".", field),
                              kMaxNameChars));
  if (value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(RunName(index, run.id()), ": missing field ", field));
  }
  return absl::OkStatus();
}

absl::Status CheckPercent(size_t index, const v1::DensityRawRun& run,
                          const char* field, double value) {
  if (value <= 100) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(RunName(index, run.id()), ": ", field, " = ", value,
                   " is out of range; allowed 0..100 (percent)"));
}

absl::Status CheckNumber(size_t index, const v1::DensityRawRun& run,
                         const char* field, bool has, double value) {
  const std::string name = RunName(index, run.id());
  if (!has) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": missing field ", field));
  }
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": ", field, " must be a finite number, got ", value));
  }
  if (value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": ", field, " must be >= 0, got ", value));
  }
  return absl::OkStatus();
}

absl::Status ValidateRun(size_t index, const v1::DensityRawRun& run) {
  RETURN_IF_ERROR(CheckText(index, run, "id", run.id()));
  if (run.has_format()) {
    RETURN_IF_ERROR(CheckLength(
        run.format(), absl::StrCat("run ", index, ".format"), kMaxNameChars));
  }
  RETURN_IF_ERROR(CheckText(index, run, "mode", run.mode()));
  RETURN_IF_ERROR(CheckText(index, run, "dtype", run.dtype()));
  RETURN_IF_ERROR(CheckText(index, run, "arch", run.arch()));
  RETURN_IF_ERROR(CheckNumber(index, run, "throughput", run.has_throughput(),
                              run.throughput()));
  RETURN_IF_ERROR(CheckNumber(index, run, "availability",
                              run.has_availability(), run.availability()));
  RETURN_IF_ERROR(CheckNumber(index, run, "avg_accuracy",
                              run.has_avg_accuracy(), run.avg_accuracy()));
  RETURN_IF_ERROR(
      CheckNumber(index, run, "soft_acc", run.has_soft_acc(), run.soft_acc()));
  RETURN_IF_ERROR(
      CheckNumber(index, run, "ram_kib", run.has_ram_kib(), run.ram_kib()));
  if (run.ram_kib() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(RunName(index, run.id()),
                     ": ram_kib must be positive (shrink divides by it)"));
  }
  RETURN_IF_ERROR(
      CheckNumber(index, run, "score", run.has_score(), run.score()));
  RETURN_IF_ERROR(CheckPercent(index, run, "availability", run.availability()));
  RETURN_IF_ERROR(CheckPercent(index, run, "avg_accuracy", run.avg_accuracy()));
  RETURN_IF_ERROR(CheckPercent(index, run, "soft_acc", run.soft_acc()));
  return absl::OkStatus();
}

// The run of `runs` (among those `eligible` accepts) that `better` puts
// first; nullptr when none is eligible.
template <typename Eligible, typename Better>
const v1::DensityRawRun* BestOf(const std::vector<v1::DensityRawRun>& runs,
                                Eligible eligible, Better better) {
  const v1::DensityRawRun* best = nullptr;
  for (const v1::DensityRawRun& run : runs) {
    if (!eligible(run)) continue;
    if (best == nullptr || better(run, *best)) best = &run;
  }
  return best;
}

// At an equal ranking key: the smaller run, then the faster, then by id.
bool TieBefore(const v1::DensityRun& a, const v1::DensityRun& b) {
  if (a.ram_kib() != b.ram_kib()) return a.ram_kib() < b.ram_kib();
  if (a.throughput() != b.throughput()) return a.throughput() > b.throughput();
  return a.id() < b.id();
}

// Smallest, then fastest: gold_std's order, and each mode's `smallest`.
bool SmallerThenFaster(const v1::DensityRun& a, const v1::DensityRun& b) {
  return TieBefore(a, b);
}

bool FasterThenSmaller(const v1::DensityRun& a, const v1::DensityRun& b) {
  if (a.throughput() != b.throughput()) return a.throughput() > b.throughput();
  if (a.ram_kib() != b.ram_kib()) return a.ram_kib() < b.ram_kib();
  return a.id() < b.id();
}

// Copies the first `n` of `pool` by `key` descending into `out`.
template <typename Key>
void AppendTop(std::vector<const v1::DensityRun*> pool, Key key, int n,
               google::protobuf::RepeatedPtrField<v1::DensityRun>* out) {
  std::sort(pool.begin(), pool.end(),
            [&key](const v1::DensityRun* a, const v1::DensityRun* b) {
              const double ka = key(*a);
              const double kb = key(*b);
              if (ka != kb) return ka > kb;
              return TieBefore(*a, *b);
            });
  const size_t count = std::min(pool.size(), static_cast<size_t>(n));
  for (size_t i = 0; i < count; ++i) *out->Add() = *pool[i];
}

absl::Status CheckLength(const char* field, bool has, int value) {
  if (has && value < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be >= 0, got ", value));
  }
  return absl::OkStatus();
}

bool Matches(const v1::RankDensityRequest& request,
             const v1::DensityRawRun& run) {
  return (request.arch().empty() || run.arch() == request.arch()) &&
         (request.dtype().empty() || run.dtype() == request.dtype()) &&
         (request.mode().empty() || run.mode() == request.mode());
}

std::string FilterText(const v1::RankDensityRequest& request) {
  std::vector<std::string> parts;
  if (!request.arch().empty()) parts.push_back("arch=" + request.arch());
  if (!request.dtype().empty()) parts.push_back("dtype=" + request.dtype());
  if (!request.mode().empty()) parts.push_back("mode=" + request.mode());
  return absl::StrJoin(parts, " ");
}

}  // namespace

absl::Status ValidateDensityRuns(const std::vector<v1::DensityRawRun>& runs) {
  std::unordered_map<std::string, size_t> first_index;
  for (size_t i = 0; i < runs.size(); ++i) {
    RETURN_IF_ERROR(ValidateRun(i, runs[i]));
    const auto [it, inserted] = first_index.emplace(runs[i].id(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrCat(RunName(i, runs[i].id()),
                       ": duplicate id, first at run ", it->second));
    }
  }
  return absl::OkStatus();
}

DensityPeaks PeaksOf(const v1::DensityLeaderboard& board) {
  DensityPeaks peaks;
  peaks.peak_score = board.peak_score();
  peaks.peak_soft = board.peak_soft();
  peaks.peak_acc = board.peak_acc();
  peaks.peak_thru = board.peak_thru();
  peaks.peak_avail = board.peak_avail();
  peaks.fast_thru = board.fast_thru();
  peaks.best_avail = board.best_avail();
  peaks.champ_ram_kib = board.acc_champ().ram_kib();
  return peaks;
}

v1::DensityRawRun RawOf(const v1::DensityRun& run) {
  v1::DensityRawRun raw;
  raw.set_id(run.id());
  raw.set_mode(run.mode());
  raw.set_dtype(run.dtype());
  raw.set_format(run.format());
  raw.set_arch(run.arch());
  raw.set_score(run.score());
  raw.set_soft_acc(run.soft_acc());
  raw.set_avg_accuracy(run.avg_accuracy());
  raw.set_throughput(run.throughput());
  raw.set_availability(run.availability());
  raw.set_ram_kib(run.ram_kib());
  return raw;
}

v1::DensityRun DeriveDensityRun(const v1::DensityRawRun& raw,
                                const DensityPeaks& peaks) {
  v1::DensityRun run;
  run.set_id(raw.id());
  run.set_mode(raw.mode());
  run.set_dtype(raw.dtype());
  run.set_format(raw.format());
  run.set_arch(raw.arch());
  run.set_score(raw.score());
  run.set_soft_acc(raw.soft_acc());
  run.set_avg_accuracy(raw.avg_accuracy());
  run.set_throughput(raw.throughput());
  run.set_availability(raw.availability());
  run.set_ram_kib(raw.ram_kib());

  const double rel_acc = Ratio(raw.avg_accuracy(), peaks.peak_acc);
  const double rel_thru = Ratio(raw.throughput(), peaks.peak_thru);
  const double rel_avail = Ratio(raw.availability(), peaks.peak_avail);
  run.set_rel_score(Ratio(raw.score(), peaks.peak_score));
  run.set_rel_soft(Ratio(raw.soft_acc(), peaks.peak_soft));
  run.set_rel_acc(rel_acc);
  run.set_rel_thru(rel_thru);
  run.set_rel_avail(rel_avail);
  const double q = std::pow(rel_acc * rel_thru * rel_avail, 1.0 / 3.0);
  run.set_q(q);
  const double ram_frac = raw.ram_kib() / peaks.champ_ram_kib;
  // champ / ram rather than 1 / ram_frac: one rounding instead of two.
  const double shrink = peaks.champ_ram_kib / raw.ram_kib();
  run.set_ram_frac(ram_frac);
  run.set_shrink(shrink);
  run.set_lpd(rel_acc >= kLearnerRelAcc ? q * shrink : 0);
  run.set_rel_fast(Ratio(raw.throughput(), peaks.fast_thru));
  run.set_rel_duty(Ratio(raw.availability(), peaks.best_avail));
  run.set_mspeed(rel_thru);
  run.set_mavail(rel_avail);
  run.set_mix(q);
  run.set_dens_acc(rel_acc * shrink);
  run.set_dens_thru(rel_thru * shrink);
  run.set_dens_avail(rel_avail * shrink);
  const int pillars = (rel_acc >= kPillarRel ? 1 : 0) +
                      (rel_thru >= kPillarRel ? 1 : 0) +
                      (rel_avail >= kPillarRel ? 1 : 0);
  run.set_pillars(pillars);
  if (rel_acc < kPillarRel) {
    run.set_band(kBandNone);
  } else {
    run.set_band(pillars >= 2 ? kBandKeep : kBandAcc);
  }
  run.set_gold(pillars == 3 && ram_frac <= kGoldRamFrac);
  return run;
}

v1::DensityLeaderboard RankAgainstPeaks(
    const std::vector<v1::DensityRawRun>& runs, const DensityPeaks& peaks,
    const DensityListLengths& lengths) {
  v1::DensityLeaderboard board;
  board.set_n(static_cast<int32_t>(runs.size()));
  std::vector<v1::DensityRun> derived;
  derived.reserve(runs.size());
  for (const v1::DensityRawRun& raw : runs) {
    derived.push_back(DeriveDensityRun(raw, peaks));
  }
  std::vector<const v1::DensityRun*> all;
  std::vector<const v1::DensityRun*> learners;
  std::vector<const v1::DensityRun*> keep;
  for (const v1::DensityRun& run : derived) {
    all.push_back(&run);
    if (run.rel_acc() >= kLearnerRelAcc) learners.push_back(&run);
    if (run.band() == kBandKeep) keep.push_back(&run);
  }

  for (const v1::DensityRun* run : learners) {
    board.set_peak_dens_acc(std::max(board.peak_dens_acc(), run->dens_acc()));
    board.set_peak_dens_thru(
        std::max(board.peak_dens_thru(), run->dens_thru()));
    board.set_peak_dens_avail(
        std::max(board.peak_dens_avail(), run->dens_avail()));
  }

  AppendTop(
      all, [](const v1::DensityRun& r) { return r.lpd(); }, lengths.top,
      board.mutable_top());
  AppendTop(
      learners, [](const v1::DensityRun& r) { return r.rel_thru(); },
      lengths.top_speed, board.mutable_top_speed());
  AppendTop(
      learners, [](const v1::DensityRun& r) { return r.rel_avail(); },
      lengths.top_avail, board.mutable_top_avail());
  AppendTop(
      learners, [](const v1::DensityRun& r) { return r.q(); }, lengths.top_mix,
      board.mutable_top_mix());

  if (keep.empty()) return board;
  const v1::DensityRun* gold_std =
      *std::min_element(keep.begin(), keep.end(),
                        [](const v1::DensityRun* a, const v1::DensityRun* b) {
                          return SmallerThenFaster(*a, *b);
                        });
  *board.mutable_gold_std() = *gold_std;

  std::map<std::string, std::vector<const v1::DensityRun*>> by_mode;
  for (const v1::DensityRun* run : keep) by_mode[run->mode()].push_back(run);
  std::vector<v1::DensityModeGroup> groups;
  for (const auto& [mode, members] : by_mode) {
    v1::DensityModeGroup group;
    group.set_mode(mode);
    group.set_n(static_cast<int32_t>(members.size()));
    const v1::DensityRun* smallest = members.front();
    const v1::DensityRun* fastest = members.front();
    group.set_best_acc(members.front()->avg_accuracy());
    group.set_min_ram_kib(members.front()->ram_kib());
    group.set_max_thru(members.front()->throughput());
    group.set_best_q(members.front()->q());
    for (const v1::DensityRun* run : members) {
      group.set_best_acc(std::max(group.best_acc(), run->avg_accuracy()));
      group.set_min_ram_kib(std::min(group.min_ram_kib(), run->ram_kib()));
      group.set_max_thru(std::max(group.max_thru(), run->throughput()));
      group.set_best_q(std::max(group.best_q(), run->q()));
      if (SmallerThenFaster(*run, *smallest)) smallest = run;
      if (FasterThenSmaller(*run, *fastest)) fastest = run;
    }
    group.set_smallest(smallest->id());
    group.set_fastest(fastest->id());
    groups.push_back(std::move(group));
  }
  // Ties in n and best_q keep the modes' alphabetical order (stable sort).
  std::stable_sort(
      groups.begin(), groups.end(),
      [](const v1::DensityModeGroup& a, const v1::DensityModeGroup& b) {
        if (a.n() != b.n()) return a.n() > b.n();
        return a.best_q() > b.best_q();
      });
  for (v1::DensityModeGroup& group : groups) {
    *board.add_gold_modes() = std::move(group);
  }
  return board;
}

namespace {

// The list lengths the request asks for (INVALID_ARGUMENT naming a negative
// one), the defaults where it names none.
absl::StatusOr<DensityListLengths> ListLengths(
    const v1::RankDensityRequest& request) {
  RETURN_IF_ERROR(CheckLength("top_n", request.has_top_n(), request.top_n()));
  RETURN_IF_ERROR(CheckLength("top_speed_n", request.has_top_speed_n(),
                              request.top_speed_n()));
  RETURN_IF_ERROR(CheckLength("top_avail_n", request.has_top_avail_n(),
                              request.top_avail_n()));
  RETURN_IF_ERROR(
      CheckLength("top_mix_n", request.has_top_mix_n(), request.top_mix_n()));
  DensityListLengths lengths;
  if (request.has_top_n()) lengths.top = request.top_n();
  if (request.has_top_speed_n()) lengths.top_speed = request.top_speed_n();
  if (request.has_top_avail_n()) lengths.top_avail = request.top_avail_n();
  if (request.has_top_mix_n()) lengths.top_mix = request.top_mix_n();
  return lengths;
}

// The runs that lead on one measure each; ties break on the id.
struct Champions {
  const v1::DensityRawRun* champ = nullptr;  // score
  const v1::DensityRawRun* acc_champ =
      nullptr;  // avg_accuracy, soft_acc, less RAM
  const v1::DensityRawRun* soft_champ = nullptr;  // soft_acc
  const v1::DensityRawRun* fast = nullptr;        // throughput, less RAM
  const v1::DensityRawRun* avail = nullptr;       // availability, less RAM
};

// `runs` is not empty.
Champions ChampionsOf(const std::vector<v1::DensityRawRun>& runs) {
  Champions c;
  const auto any = [](const v1::DensityRawRun&) { return true; };
  c.champ = BestOf(runs, any,
                   [](const v1::DensityRawRun& a, const v1::DensityRawRun& b) {
                     if (a.score() != b.score()) return a.score() > b.score();
                     return a.id() < b.id();
                   });
  c.acc_champ = BestOf(
      runs, any, [](const v1::DensityRawRun& a, const v1::DensityRawRun& b) {
        if (a.avg_accuracy() != b.avg_accuracy()) {
          return a.avg_accuracy() > b.avg_accuracy();
        }
        if (a.soft_acc() != b.soft_acc()) return a.soft_acc() > b.soft_acc();
        if (a.ram_kib() != b.ram_kib()) return a.ram_kib() < b.ram_kib();
        return a.id() < b.id();
      });
  c.soft_champ = BestOf(
      runs, any, [](const v1::DensityRawRun& a, const v1::DensityRawRun& b) {
        if (a.soft_acc() != b.soft_acc()) return a.soft_acc() > b.soft_acc();
        return a.id() < b.id();
      });
  c.fast = BestOf(runs, any,
                  [](const v1::DensityRawRun& a, const v1::DensityRawRun& b) {
                    if (a.throughput() != b.throughput()) {
                      return a.throughput() > b.throughput();
                    }
                    if (a.ram_kib() != b.ram_kib())
                      return a.ram_kib() < b.ram_kib();
                    return a.id() < b.id();
                  });
  c.avail = BestOf(runs, any,
                   [](const v1::DensityRawRun& a, const v1::DensityRawRun& b) {
                     if (a.availability() != b.availability()) {
                       return a.availability() > b.availability();
                     }
                     if (a.ram_kib() != b.ram_kib())
                       return a.ram_kib() < b.ram_kib();
                     return a.id() < b.id();
                   });
  return c;
}

// The leaderboard's champions and peaks.
void SetChampions(const Champions& c, const DensityPeaks& peaks,
                  const v1::DensityRawRun* live_champ,
                  v1::DensityLeaderboard* board) {
  board->set_formula(kFormula);
  *board->mutable_champ() = *c.champ;
  *board->mutable_acc_champ() = *c.acc_champ;
  *board->mutable_soft_champ() = *c.soft_champ;
  if (live_champ != nullptr) *board->mutable_live_champ() = *live_champ;
  board->set_peak_score(peaks.peak_score);
  board->set_peak_soft(peaks.peak_soft);
  board->set_peak_acc(peaks.peak_acc);
  board->set_peak_thru(peaks.peak_thru);
  board->set_peak_avail(peaks.peak_avail);
  board->set_fast_thru(peaks.fast_thru);
  board->set_fast_id(c.fast->id());
  board->set_best_avail(peaks.best_avail);
  board->set_avail_id(c.avail->id());
}

}  // namespace

absl::StatusOr<v1::RankDensityResponse> RankDensity(
    const v1::RankDensityRequest& request) {
  ASSIGN_OR_RETURN(const DensityListLengths lengths, ListLengths(request));

  const std::vector<v1::DensityRawRun> submitted(request.runs().begin(),
                                                 request.runs().end());
  RETURN_IF_ERROR(ValidateDensityRuns(submitted));
  std::vector<v1::DensityRawRun> runs;
  for (const v1::DensityRawRun& run : submitted) {
    if (Matches(request, run)) runs.push_back(run);
  }

  v1::RankDensityResponse response;
  if (runs.empty()) {
    v1::DensityLeaderboard* board = response.mutable_leaderboard();
    board->set_formula(kFormula);
    const std::string filter = FilterText(request);
    response.set_empty_reason(submitted.empty() || filter.empty()
                                  ? "no runs to rank"
                                  : absl::StrCat("no run matches ", filter,
                                                 " (of ", submitted.size(),
                                                 " runs)"));
    return response;
  }

  const Champions c = ChampionsOf(runs);

  DensityPeaks peaks;
  peaks.peak_score = c.champ->score();
  peaks.peak_soft = c.soft_champ->soft_acc();
  peaks.peak_acc = c.acc_champ->avg_accuracy();
  peaks.fast_thru = c.fast->throughput();
  peaks.best_avail = c.avail->availability();
  peaks.champ_ram_kib = c.acc_champ->ram_kib();
  const auto learns = [&peaks](const v1::DensityRawRun& run) {
    return Ratio(run.avg_accuracy(), peaks.peak_acc) >= kLearnerRelAcc;
  };
  const v1::DensityRawRun* live_champ = nullptr;
  if (peaks.peak_acc > 0) {
    for (const v1::DensityRawRun& run : runs) {
      if (!learns(run)) continue;
      peaks.peak_thru = std::max(peaks.peak_thru, run.throughput());
      peaks.peak_avail = std::max(peaks.peak_avail, run.availability());
    }
    live_champ =
        BestOf(runs, learns,
               [](const v1::DensityRawRun& a, const v1::DensityRawRun& b) {
                 if (a.score() != b.score()) {
                   return a.score() > b.score();
                 }
                 return a.id() < b.id();
               });
    *response.mutable_leaderboard() = RankAgainstPeaks(runs, peaks, lengths);
  } else {
    response.mutable_leaderboard()->set_n(static_cast<int32_t>(runs.size()));
    response.set_empty_reason(absl::StrCat(
        "every one of the ", runs.size(),
        " runs has avg_accuracy 0: no run learns, so there is no peak_acc "
        "to rank against"));
  }

  SetChampions(c, peaks, live_champ, response.mutable_leaderboard());
  return response;
}

}  // namespace headroom
