#include "server/service/density_service.h"

#include <cstdio>
#include <functional>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "core/density/density_rank.h"
#include "server/service/grpc_status.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {

namespace {

// Runs stored before the length limits existed may carry longer strings:
// they are cut rather than the ranking refused, an id keeping a digest of
// the whole so that ids stay distinct.
bool CutStoredDensityRun(v1::DensityRawRun* run) {
  bool cut = false;
  if (run->id().size() > kMaxNameChars) {
    cut = true;
    char digest[17];
    std::snprintf(digest, sizeof digest, "%016zx",
                  std::hash<std::string>()(run->id()));
    run->set_id(
        absl::StrCat(run->id().substr(0, kMaxNameChars - 20), "...", digest));
  }
  for (std::string* field : {run->mutable_mode(), run->mutable_dtype(),
                             run->mutable_format(), run->mutable_arch()}) {
    if (field->size() > kMaxNameChars) {
      field->resize(kMaxNameChars);
      cut = true;
    }
  }
  return cut;
}

}  // namespace

namespace {

// Keeps a ranking under `max_bytes`, whatever runs it ranked: first the long
// strings of every run are cut, then list entries are dropped from the
// tail of the longest list. `truncated` says what was left out.
void BoundRanking(v1::RankDensityResponse* response, size_t max_bytes) {
  if (response->ByteSizeLong() <= max_bytes) return;
  v1::DensityLeaderboard* board = response->mutable_leaderboard();
  std::vector<std::string> notes;
  // The rules paragraph is ours, not a run's: it stays whole.
  std::string formula = std::move(*board->mutable_formula());
  board->clear_formula();
  if (CutLongStrings(board)) {
    notes.push_back("run fields longer than 1 KiB are cut");
  }
  board->set_formula(std::move(formula));
  using Runs = google::protobuf::RepeatedPtrField<v1::DensityRun>;
  Runs* lists[] = {board->mutable_top(), board->mutable_top_speed(),
                   board->mutable_top_avail(), board->mutable_top_mix()};
  int dropped = 0;
  while (response->ByteSizeLong() > max_bytes) {
    Runs* longest = lists[0];
    for (Runs* list : lists) {
      if (list->size() > longest->size()) longest = list;
    }
    if (board->gold_modes_size() > longest->size()) {
      board->mutable_gold_modes()->RemoveLast();
    } else if (!longest->empty()) {
      longest->RemoveLast();
    } else {
      break;
    }
    ++dropped;
  }
  if (dropped > 0) {
    notes.push_back(absl::StrCat(dropped,
                                 " list entries are left out (the longest "
                                 "lists' tails) to stay under ",
                                 max_bytes, " bytes"));
  }
  response->set_truncated(absl::StrJoin(notes, "; "));
}

}  // namespace

grpc::ServerUnaryReactor* DensityService::RankDensity(
    grpc::CallbackServerContext* context, const v1::RankDensityRequest* request,
    v1::RankDensityResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Density/RankDensity")) {
    return refused;
  }
  if (auto* refused = RefuseOversized(context, *request,
                                      state_.service().max_request_bytes)) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  const size_t budget = PageBytes(state_.service().max_request_bytes);
  if (!request->use_stored()) {
    absl::StatusOr<v1::RankDensityResponse> answer =
        headroom::RankDensity(*request);
    if (answer.ok()) BoundRanking(&*answer, budget);
    return Reply(reactor, std::move(answer), response);
  }
  // The stored runs are read (and ranked) on the store executor.
  return state_.DeferStore(reactor, [this, request, response, reactor, budget] {
    auto answer = [&]() -> absl::StatusOr<v1::RankDensityResponse> {
      if (!request->runs().empty()) {
        return absl::InvalidArgumentError(
            "runs must be empty with use_stored; rank either the request's "
            "runs or the stored ones");
      }
      ASSIGN_OR_RETURN(std::vector<v1::DensityRawRun> stored,
                       state_.store()->ListDensityRuns(
                           request->arch(), request->dtype(), request->mode()));
      v1::RankDensityRequest ranked = *request;
      ranked.set_use_stored(false);
      bool cut = false;
      for (v1::DensityRawRun& run : stored) {
        cut = CutStoredDensityRun(&run) || cut;
        *ranked.add_runs() = std::move(run);
      }
      ASSIGN_OR_RETURN(v1::RankDensityResponse out,
                       headroom::RankDensity(ranked));
      BoundRanking(&out, budget);
      if (cut) {
        out.set_truncated(
            absl::StrCat(out.truncated(), out.truncated().empty() ? "" : "; ",
                         "stored run strings longer than ", kMaxNameChars,
                         " characters are cut (ids keep a digest)"));
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* DensityService::SubmitDensityRuns(
    grpc::CallbackServerContext* context,
    const v1::SubmitDensityRunsRequest* request,
    v1::SubmitDensityRunsResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Density/SubmitDensityRuns")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::SubmitDensityRunsResponse> {
      RETURN_IF_ERROR(CheckSize(*request, state_.service().max_request_bytes));
      if (request->runs_size() > kMaxDensityRunsPerRequest) {
        return absl::InvalidArgumentError(absl::StrCat(
            "runs has ", request->runs_size(), " entries; allowed up to ",
            kMaxDensityRunsPerRequest, " per request"));
      }
      const std::vector<v1::DensityRawRun> runs(request->runs().begin(),
                                                request->runs().end());
      // Nothing is stored unless every run is valid.
      RETURN_IF_ERROR(ValidateDensityRuns(runs));
      ASSIGN_OR_RETURN(int64_t stored, state_.store()->AddDensityRuns(runs));
      v1::SubmitDensityRunsResponse out;
      out.set_stored(static_cast<int32_t>(stored));
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

}  // namespace headroom
