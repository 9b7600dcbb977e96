#include "core/microbatch/select.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "core/catalog/gpu_catalog.h"

namespace headroom {
namespace {

using CandidateKey = std::pair<std::string, uint32_t>;  // mode, microbatch

absl::Status CheckPositive(double value, absl::string_view field) {
  if (!(std::isfinite(value) && value > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " = ", value, " must be a positive number"));
  }
  return absl::OkStatus();
}

// The modes a record tried, in listing order.
std::vector<std::string> ModesOf(const v1::AutotuneSettings& settings) {
  std::vector<std::string> modes = {std::string(kEagerMode)};
  if (settings.compile_model()) modes.emplace_back(kCompiledMode);
  return modes;
}

// True when `a` is the better choice than `b` under `policy`.
bool Better(const v1::MicrobatchMeasurement& a,
            const v1::MicrobatchMeasurement& b, absl::string_view policy) {
  const bool a_compiled = a.mode() == kCompiledMode;
  const bool b_compiled = b.mode() == kCompiledMode;
  if (policy == kMaxThroughputPolicy &&
      a.input_tokens_per_second() != b.input_tokens_per_second()) {
    return a.input_tokens_per_second() > b.input_tokens_per_second();
  }
  if (a.microbatch() != b.microbatch()) return a.microbatch() > b.microbatch();
  return a_compiled && !b_compiled;
}

// The settings' microbatch candidates, sorted; INVALID_ARGUMENT naming the
// field for a zero context or global batch, or candidates empty, zero or
// repeated.
absl::StatusOr<std::vector<uint32_t>> SortedCandidates(
    const v1::AutotuneSettings& settings) {
  if (settings.context() == 0) {
    return absl::InvalidArgumentError(
        "cache_key.settings.context = 0; must be positive");
  }
  if (settings.global_batch() == 0) {
    return absl::InvalidArgumentError(
        "cache_key.settings.global_batch = 0; must be positive");
  }
  if (settings.microbatch_candidates().empty()) {
    return absl::InvalidArgumentError(
        "cache_key.settings.microbatch_candidates is empty; list at least one");
  }
  std::vector<uint32_t> candidates(settings.microbatch_candidates().begin(),
                                   settings.microbatch_candidates().end());
  std::sort(candidates.begin(), candidates.end());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i] == 0 || (i > 0 && candidates[i] == candidates[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cache_key.settings.microbatch_candidates has ", candidates[i],
          "; allowed distinct positive microbatches"));
    }
  }
  return candidates;
}

using Measured = std::map<CandidateKey, const v1::MicrobatchMeasurement*>;

// The record's measurements by (mode, microbatch); INVALID_ARGUMENT naming
// the measurement for a mode the record did not try, a microbatch not among
// the candidates, a time or peak out of range, or a repeat.
absl::StatusOr<Measured> MeasuredCandidates(
    const v1::AutotuneRecord& record, const std::vector<std::string>& modes,
    const std::vector<uint32_t>& candidates) {
  const v1::AutotuneSettings& settings = record.cache_key().settings();
  Measured measured;
  for (int i = 0; i < record.measurements_size(); ++i) {
    const v1::MicrobatchMeasurement& m = record.measurements(i);
    const std::string field = absl::StrCat("measurements[", i, "]");
    if (std::find(modes.begin(), modes.end(), m.mode()) == modes.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".mode = '", m.mode(), "' is not a mode this record tried; ",
          "allowed eager",
          settings.compile_model() ? ", compiled" : " (compile_model is off)"));
    }
    if (!std::binary_search(candidates.begin(), candidates.end(),
                            m.microbatch())) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ".microbatch = ", m.microbatch(),
                       " is not in cache_key.settings.microbatch_candidates"));
    }
    const absl::Status seconds_ok = CheckPositive(
        m.microbatch_seconds(), absl::StrCat(field, ".microbatch_seconds"));
    if (!seconds_ok.ok()) return seconds_ok;
    if (!(std::isfinite(m.peak_gb()) && m.peak_gb() >= 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".peak_gb = ", m.peak_gb(), " must be a number >= 0"));
    }
    if (!measured.emplace(CandidateKey(m.mode(), m.microbatch()), &m).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, " repeats microbatch ", m.microbatch(), " in ",
                       m.mode(), " mode"));
    }
  }
  return measured;
}

}  // namespace

double EstimatedUpdateSeconds(uint32_t global_batch, uint32_t microbatch,
                              double microbatch_seconds) {
  return static_cast<double>(global_batch) / microbatch * microbatch_seconds;
}

absl::StatusOr<v1::MicrobatchSelection> SelectMicrobatch(
    const v1::AutotuneRecord& record, absl::string_view policy) {
  if (policy.empty()) policy = record.selection_policy();
  if (policy != kMaxBatchPolicy && policy != kMaxThroughputPolicy) {
    return absl::InvalidArgumentError(
        absl::StrCat("selection_policy = '", policy, "' is unknown; allowed ",
                     kMaxBatchPolicy, ", ", kMaxThroughputPolicy));
  }
  const v1::AutotuneSettings& settings = record.cache_key().settings();
  ASSIGN_OR_RETURN(const std::vector<uint32_t> candidates,
                   SortedCandidates(settings));
  const absl::Status budget_ok = CheckPositive(record.budget_gb(), "budget_gb");
  if (!budget_ok.ok()) return budget_ok;
  const std::vector<std::string> modes = ModesOf(settings);

  ASSIGN_OR_RETURN(const auto measured,
                   MeasuredCandidates(record, modes, candidates));
  std::map<CandidateKey, std::string> recorded_reasons;
  for (const v1::MicrobatchFailure& failure : record.failures()) {
    recorded_reasons[CandidateKey(failure.mode(), failure.microbatch())] =
        failure.reason();
  }

  v1::MicrobatchSelection selection;
  selection.set_selection_policy(std::string(policy));
  selection.set_budget_gb(record.budget_gb());
  bool have_selected = false;
  for (const std::string& mode : modes) {
    for (uint32_t microbatch : candidates) {
      const CandidateKey key(mode, microbatch);
      const auto it = measured.find(key);
      if (it == measured.end() || it->second->peak_gb() > record.budget_gb()) {
        v1::MicrobatchFailure* failure = selection.add_failures();
        failure->set_microbatch(microbatch);
        failure->set_mode(mode);
        if (it != measured.end()) {
          failure->set_reason("over_budget");
        } else {
          const auto reason = recorded_reasons.find(key);
          failure->set_reason(reason != recorded_reasons.end() &&
                                      !reason->second.empty()
                                  ? reason->second
                                  : "oom");
        }
        continue;
      }
      v1::MicrobatchMeasurement candidate = *it->second;
      candidate.set_fits_budget(true);
      candidate.set_estimated_update_seconds(EstimatedUpdateSeconds(
          settings.global_batch(), microbatch, candidate.microbatch_seconds()));
      candidate.set_input_tokens_per_second(static_cast<double>(microbatch) *
                                            settings.context() /
                                            candidate.microbatch_seconds());
      if (!have_selected || Better(candidate, selection.selected(), policy)) {
        *selection.mutable_selected() = std::move(candidate);
        have_selected = true;
      }
    }
  }
  return selection;
}

namespace {

absl::Status CheckGib(double value, const std::string& field, double card_gib,
                      bool positive) {
  const bool low_ok = positive ? value > 0 : value >= 0;
  if (low_ok && value <= card_gib) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " = ", value, " is out of range; allowed ",
                   positive ? "(0, " : "[0, ", card_gib,
                   "] GiB (cache_key.gpu.total_memory)"));
}

}  // namespace

absl::Status CheckCacheableRecord(const v1::AutotuneRecord& record) {
  if (record.ByteSizeLong() > kMaxStoredRecordBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "record is ", record.ByteSizeLong(),
        " bytes; a stored record allows up to ", kMaxStoredRecordBytes));
  }
  const v1::AutotuneCacheKey& key = record.cache_key();
  for (const auto& [field, value] :
       {std::pair<const char*, const std::string&>{"cache_key.kind",
                                                   key.kind()},
        {"cache_key.gpu.name", key.gpu().name()},
        {"cache_key.torch", key.torch()},
        {"cache_key.cuda", key.cuda()},
        {"cache_key.python", key.python()},
        {"cache_key.source", key.source()},
        {"cache_key.settings.batch_selection",
         key.settings().batch_selection()},
        {"cache_key.settings.attention_backend",
         key.settings().attention_backend()},
        {"attention", record.attention()},
        {"selection_policy", record.selection_policy()}}) {
    RETURN_IF_ERROR(CheckLength(value, field, kMaxNameChars));
  }
  RETURN_IF_ERROR(CheckLength(record.note(), "note", kMaxTextChars));
  for (const auto& [name, version] : key.packages()) {
    RETURN_IF_ERROR(CheckLength(name, "cache_key.packages key", kMaxNameChars));
    RETURN_IF_ERROR(CheckLength(
        version, absl::StrCat("cache_key.packages[", Echo(name), "]"),
        kMaxNameChars));
  }
  const double total_gb = static_cast<double>(key.gpu().total_memory()) / 1e9;
  if (!(total_gb > 0 && total_gb <= kMaxCardGb)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cache_key.gpu.total_memory = ", key.gpu().total_memory(),
                     " bytes is out of range; allowed 1..", kMaxCardGb * 1e9,
                     " (the card's memory as CUDA reports it)"));
  }
  const double card_gib = key.gpu().total_memory() / 1073741824.0;
  RETURN_IF_ERROR(CheckGib(record.budget_gb(), "budget_gb", card_gib, true));
  RETURN_IF_ERROR(CheckGib(record.reserve_gb(), "reserve_gb", card_gib, false));
  for (int i = 0; i < record.measurements_size(); ++i) {
    const v1::MicrobatchMeasurement& m = record.measurements(i);
    RETURN_IF_ERROR(CheckLength(
        m.mode(), absl::StrCat("measurements[", i, "].mode"), kMaxNameChars));
    RETURN_IF_ERROR(CheckGib(m.peak_gb(),
                             absl::StrCat("measurements[", i, "].peak_gb"),
                             card_gib, false));
  }
  for (int i = 0; i < record.failures_size(); ++i) {
    RETURN_IF_ERROR(CheckLength(record.failures(i).mode(),
                                absl::StrCat("failures[", i, "].mode"),
                                kMaxNameChars));
    RETURN_IF_ERROR(CheckLength(record.failures(i).reason(),
                                absl::StrCat("failures[", i, "].reason"),
                                kMaxNameChars));
  }
  ASSIGN_OR_RETURN(const v1::MicrobatchSelection selection,
                   SelectMicrobatch(record, ""));
  const v1::MicrobatchMeasurement& mine = record.selected();
  const v1::MicrobatchMeasurement& recomputed = selection.selected();
  // The candidate, not its figures: the reference record's selected entry
  // carries a peak 0.0006 GiB off its own measurement.
  if (!selection.has_selected() || !record.has_selected() ||
      mine.microbatch() != recomputed.microbatch() ||
      mine.mode() != recomputed.mode()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "selected (", Echo(mine.mode()), " microbatch ", mine.microbatch(),
        ") is not what ", record.selection_policy(),
        " selects from the measurements and budget_gb (",
        selection.has_selected()
            ? absl::StrCat(recomputed.mode(), " microbatch ",
                           recomputed.microbatch())
            : "none fits",
        ")"));
  }
  return absl::OkStatus();
}

}  // namespace headroom
