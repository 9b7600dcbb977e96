#ifndef HEADROOM_CORE_MICROBATCH_SEARCH_H_
#define HEADROOM_CORE_MICROBATCH_SEARCH_H_

// Searches for the largest microbatch candidate that fits (README.md,
// "Energy, microbatches and density"), three ways, over candidates ascending
// whose truth is monotone (if one fits, every smaller one does). The caller
// runs the candidates (a worker's executor, a bench's simulated truth) and
// counts the runs; a search never runs a candidate twice unless the caller's
// callback is called again for it, so callers that remember outcomes can
// resume a search without running anything again. Plain C++, no I/O.

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/strings/string_view.h"
#include "headroom/v1/microbatch.pb.h"

namespace headroom {

// How the plan classes a candidate before anything runs.
enum class PlannedFit {
  kPredictedFit,  // verdict FITS: the calibrated upper bound fits the budget
  kOpen,          // the plan measures it (BORDERLINE, or compiled mode)
  kPredictedOom,  // verdict DOES_NOT_FIT in eager mode
};

// The outcome of running one candidate.
enum class RunOutcome {
  kFits,        // ran, and its peak is within the budget
  kDoesNotFit,  // OOM, or a peak over the budget
  kAbort,       // neither (an executor error): the search stops
};

// Runs the candidate at `index` (into the ascending candidates).
using RunCandidate = std::function<RunOutcome(int index)>;

struct SearchResult {
  // Index of the largest candidate found to fit; -1 when none does.
  int best = -1;
  // A run answered kAbort; `best` is the largest fit seen before it.
  bool aborted = false;
};

// The plan's classes of its `mode` candidates ("eager" or "compiled"), in
// the plan's (ascending) order.
std::vector<PlannedFit> PlannedFitsOf(const v1::PlanMicrobatchResponse& plan,
                                      absl::string_view mode);

// Headroom's search: the largest predicted fit runs first, to verify it (a
// wrong prediction must not be selected); when it fits, only the candidates
// above it that the plan did not rule out are bisected; when it does not,
// the candidates below it are. With no predicted fit, every candidate up to
// the last one not ruled out is bisected. Predicted OOMs above the last
// open candidate never run.
SearchResult VerifyThenBisect(const std::vector<PlannedFit>& planned,
                              const RunCandidate& run);

// Lightning's batch-size finder: from the smallest candidate, run the next
// candidate at least twice as large until one does not fit, then bisect
// between the last fit and that one. Knows no prediction.
SearchResult DoublingThenBisect(const std::vector<uint32_t>& candidates,
                                const RunCandidate& run);

// Runs every candidate, ascending; the largest that fits wins (no
// monotonicity assumed).
SearchResult Exhaustive(int count, const RunCandidate& run);

}  // namespace headroom

#endif  // HEADROOM_CORE_MICROBATCH_SEARCH_H_
