#include "server/store/store.h"

#include <algorithm>

#include "base/status_macros.h"

namespace headroom {
namespace {

// Every entry `list` pages through, at most `limit` (all when negative).
template <typename Entry, typename List>
absl::StatusOr<std::vector<Entry>> FollowPages(const List& list,
                                               int64_t limit = -1) {
  std::vector<Entry> all;
  PageSpec spec;
  while (true) {
    spec.max_entries = 500;
    if (limit >= 0) {
      const int64_t remaining = limit - static_cast<int64_t>(all.size());
      if (remaining <= 0) break;
      spec.max_entries = static_cast<int>(std::min<int64_t>(500, remaining));
    }
    ASSIGN_OR_RETURN(Page<Entry> page, list(spec));
    for (Entry& entry : page.entries) all.push_back(std::move(entry));
    if (page.next_after.empty()) break;
    spec.after = std::move(page.next_after);
  }
  return all;
}

}  // namespace

absl::StatusOr<std::vector<v1::FactorSet>> FactorSetStore::ListFactorSets() {
  return FollowPages<v1::FactorSet>(
      [this](const PageSpec& spec) { return ListFactorSets(spec); });
}

absl::StatusOr<std::vector<std::string>> FactorSetStore::CurrentHistory() {
  return FollowPages<std::string>(
      [this](const PageSpec& spec) { return CurrentHistory(spec); });
}

absl::StatusOr<std::vector<v1::MeasuredRun>> RunStore::ListRuns() {
  return FollowPages<v1::MeasuredRun>(
      [this](const PageSpec& spec) { return ListRuns(spec); });
}

absl::StatusOr<std::vector<v1::MeasuredRun>> RunStore::ListRunsAfter(
    std::string* after) {
  std::vector<v1::MeasuredRun> runs;
  PageSpec spec;
  spec.after = *after;
  spec.max_entries = 500;
  while (true) {
    ASSIGN_OR_RETURN(Page<v1::MeasuredRun> page, ListRuns(spec));
    for (v1::MeasuredRun& run : page.entries) runs.push_back(std::move(run));
    if (!page.last_key.empty()) *after = page.last_key;
    if (page.next_after.empty()) break;
    spec.after = std::move(page.next_after);
  }
  return runs;
}

absl::StatusOr<std::vector<std::string>>
EnergyCurveStore::EnergyCurveHistory() {
  return FollowPages<std::string>(
      [this](const PageSpec& spec) { return EnergyCurveHistory(spec); });
}

absl::StatusOr<std::vector<v1::EnergyCurveSet>>
EnergyCurveStore::ListEnergyCurveSets(int limit) {
  return FollowPages<v1::EnergyCurveSet>(
      [this](const PageSpec& spec) { return ListEnergyCurveSets(spec); },
      limit);
}

absl::StatusOr<std::vector<v1::EnergyRun>> EnergyRunStore::ListEnergyRuns(
    bool include_simulated, int limit) {
  return FollowPages<v1::EnergyRun>(
      [this, include_simulated](const PageSpec& spec) {
        return ListEnergyRuns(include_simulated, spec);
      },
      limit);
}

absl::StatusOr<std::vector<v1::DensityRawRun>> DensityRunStore::ListDensityRuns(
    const std::string& arch, const std::string& dtype,
    const std::string& mode) {
  return FollowPages<v1::DensityRawRun>([&](const PageSpec& spec) {
    return ListDensityRuns(arch, dtype, mode, spec);
  });
}

absl::StatusOr<std::vector<v1::Probe>> ProbeQueue::ListProbes(
    v1::Probe::State state, int limit) {
  return FollowPages<v1::Probe>(
      [this, state](const PageSpec& spec) { return ListProbes(state, spec); },
      limit);
}

absl::StatusOr<std::vector<v1::Probe>> ProbeQueue::ListExpiredProbes(
    int64_t now_ms, int limit) {
  return FollowPages<v1::Probe>(
      [this, now_ms](const PageSpec& spec) {
        return ListExpiredProbes(now_ms, spec);
      },
      limit);
}

absl::StatusOr<std::vector<v1::AutotuneCacheEntry>>
AutotuneCache::ListAutotuneRecords() {
  return FollowPages<v1::AutotuneCacheEntry>(
      [this](const PageSpec& spec) { return ListAutotuneRecords(spec); });
}

absl::StatusOr<std::vector<v1::WorkerStatus>> WorkerStore::ListWorkers() {
  return FollowPages<v1::WorkerStatus>(
      [this](const PageSpec& spec) { return ListWorkers(spec); });
}

}  // namespace headroom
