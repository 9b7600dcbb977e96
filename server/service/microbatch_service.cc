#include "server/service/microbatch_service.h"

#include "absl/strings/str_cat.h"
#include "base/input_limits.h"
#include "base/status_macros.h"
#include "core/microbatch/cache_key.h"
#include "core/microbatch/plan.h"
#include "core/microbatch/select.h"
#include "server/service/grpc_status.h"
#include "server/service/paging.h"
#include "server/service/reply.h"
#include "spdlog/spdlog.h"

namespace headroom {

namespace {

// A planner built without access rules (tests) treats every caller as
// admin, as an open planner does.
bool CallerIsAdmin(const Access* access,
                   const grpc::CallbackServerContext* context) {
  return access == nullptr ||
         access->Holds(access->Identify(*context), Role::kAdmin);
}

}  // namespace

grpc::ServerUnaryReactor* MicrobatchService::PlanMicrobatch(
    grpc::CallbackServerContext* context,
    const v1::PlanMicrobatchRequest* request,
    v1::PlanMicrobatchResponse* response) {
  if (auto* refused = RefuseUnary(state_.access(), context,
                                  "/headroom.v1.Microbatch/PlanMicrobatch")) {
    return refused;
  }
  if (auto* refused = RefuseOversized(context, *request,
                                      state_.service().max_request_bytes)) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // An inline spec is imported (validated, profiled per candidate) on the
  // import pool, as CheckFit's are.
  if (request->model_case() == v1::PlanMicrobatchRequest::kSpec) {
    return state_.DeferImport(
        reactor,
        [this, reactor, request, response] {
          AnswerPlanMicrobatch(reactor, request, response);
        },
        request->ByteSizeLong());
  }
  // A cache key is looked up in the store: on the store executor.
  if (request->has_cache_key()) {
    return state_.DeferStore(reactor, [this, reactor, request, response] {
      AnswerPlanMicrobatch(reactor, request, response);
    });
  }
  AnswerPlanMicrobatch(reactor, request, response);
  return reactor;
}

void MicrobatchService::AnswerPlanMicrobatch(
    grpc::ServerUnaryReactor* reactor, const v1::PlanMicrobatchRequest* request,
    v1::PlanMicrobatchResponse* response) {
  const std::shared_ptr<const FitPlanner> current = state_.planner();
  absl::StatusOr<v1::PlanMicrobatchResponse> answer = headroom::PlanMicrobatch(
      *request, *state_.catalog(), current->factor_set());
  if (answer.ok() && request->has_cache_key()) {
    // A record under exactly this key (GPU, versions, settings, source)
    // stands: nothing needs measuring.
    absl::StatusOr<std::optional<v1::AutotuneRecord>> cached =
        state_.store()->FindAutotuneRecord(CacheKeyId(request->cache_key()),
                                           CacheKeyBytes(request->cache_key()));
    if (!cached.ok()) {
      answer = cached.status();
    } else if (cached->has_value()) {
      v1::AutotuneRecord& record = **cached;
      record.set_cache_reused(true);
      *answer->mutable_cached() = std::move(record);
      for (v1::PlannedMicrobatch& planned : *answer->mutable_candidates()) {
        planned.set_action(v1::PlannedMicrobatch::SKIP);
        planned.set_reason(absl::StrCat(
            "cached selection ", CacheKeyId(request->cache_key()), " reused"));
      }
      answer->set_skip_count(answer->candidates_size());
      answer->set_measure_count(0);
    }
  }
  Reply(reactor, std::move(answer), response);
}

grpc::ServerUnaryReactor* MicrobatchService::PutAutotuneRecord(
    grpc::CallbackServerContext* context,
    const v1::PutAutotuneRecordRequest* request,
    v1::PutAutotuneRecordResponse* response) {
  if (auto* refused =
          RefuseUnary(state_.access(), context,
                      "/headroom.v1.Microbatch/PutAutotuneRecord")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, context, request, response,
                                     reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::PutAutotuneRecordResponse> {
      RETURN_IF_ERROR(CheckSize(*request, state_.service().max_request_bytes));
      if (request->force() && !CallerIsAdmin(state_.access(), context)) {
        return absl::PermissionDeniedError(
            "force replaces a worker-measured record; only an admin may set "
            "it");
      }
      if (!request->record().has_cache_key()) {
        return absl::InvalidArgumentError(
            "record.cache_key is missing; a cached selection needs the key it "
            "was measured under");
      }
      v1::AutotuneRecord record = request->record();
      // Only the planner says a worker measured a record.
      record.clear_measured_by_probe();
      if (!record.has_selected() || record.selected().microbatch() == 0) {
        return absl::InvalidArgumentError(
            "record.selected is missing; only a record with a selection can be "
            "reused");
      }
      RETURN_IF_ERROR(CheckCacheableRecord(record));
      v1::PutAutotuneRecordResponse out;
      out.set_id(CacheKeyId(record.cache_key()));
      const std::string key_bytes = CacheKeyBytes(record.cache_key());
      ASSIGN_OR_RETURN(std::optional<v1::AutotuneRecord> stored,
                       state_.store()->FindAutotuneRecord(out.id(), key_bytes));
      if (stored.has_value() && !stored->measured_by_probe().empty() &&
          !request->force()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the record stored under ", out.id(), " was measured by probe ",
            stored->measured_by_probe(),
            " on a worker; it is replaced only with force (admins only)"));
      }
      ASSIGN_OR_RETURN(bool replaced, state_.store()->PutAutotuneRecord(
                                          out.id(), key_bytes, record));
      out.set_replaced(replaced);
      spdlog::info("event=autotune_record_stored id={} replaced={} forced={}",
                   out.id(), replaced, request->force());
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* MicrobatchService::ListAutotuneRecords(
    grpc::CallbackServerContext* context,
    const v1::ListAutotuneRecordsRequest* request,
    v1::ListAutotuneRecordsResponse* response) {
  if (auto* refused =
          RefuseUnary(state_.access(), context,
                      "/headroom.v1.Microbatch/ListAutotuneRecords")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  return state_.DeferStore(reactor, [this, request, response, reactor] {
    auto answer = [&]() -> absl::StatusOr<v1::ListAutotuneRecordsResponse> {
      const size_t budget = PageBytes(state_.service().max_request_bytes);
      ASSIGN_OR_RETURN(const PageSpec spec,
                       PageFromRequest("autotune_records", request->page_size(),
                                       request->page_token(), budget));
      ASSIGN_OR_RETURN(Page<v1::AutotuneCacheEntry> entries,
                       state_.store()->ListAutotuneRecords(spec));
      v1::ListAutotuneRecordsResponse out;
      out.set_next_page_token(
          NextPageToken("autotune_records", entries.next_after));
      for (v1::AutotuneCacheEntry& e : entries.entries) {
        BoundEntry(&e, budget);
        *out.add_entries() = std::move(e);
      }
      return out;
    }();
    Reply(reactor, std::move(answer), response);
  });
}

grpc::ServerUnaryReactor* MicrobatchService::DropAutotuneRecord(
    grpc::CallbackServerContext* context,
    const v1::DropAutotuneRecordRequest* request,
    v1::DropAutotuneRecordResponse* response) {
  if (auto* refused =
          RefuseUnary(state_.access(), context,
                      "/headroom.v1.Microbatch/DropAutotuneRecord")) {
    return refused;
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Dropping a worker-measured record and putting another is a replace:
  // admins only, as PutAutotuneRecord's force is.
  const bool admin = CallerIsAdmin(state_.access(), context);
  return state_.DeferStore(reactor, [this, request, response, reactor, admin] {
    auto answer = [&]() -> absl::StatusOr<v1::DropAutotuneRecordResponse> {
      if (request->id().empty() || request->id().size() > 64) {
        return absl::InvalidArgumentError(
            "id must be 1..64 characters (an id from ListAutotuneRecords)");
      }
      if (absl::Status dropped = state_.store()->DropAutotuneRecord(
              request->id(), /*measured_too=*/admin);
          !dropped.ok()) {
        // Refused for the caller's role, not for the record's state.
        if (dropped.code() == absl::StatusCode::kFailedPrecondition) {
          return absl::PermissionDeniedError(dropped.message());
        }
        return dropped;
      }
      spdlog::info("event=autotune_record_dropped id={}", request->id());
      return v1::DropAutotuneRecordResponse();
    }();
    Reply(reactor, std::move(answer), response);
  });
}

}  // namespace headroom
