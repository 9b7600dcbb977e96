#ifndef HEADROOM_SERVER_SERVICE_CHECK_FIT_MESSAGES_H_
#define HEADROOM_SERVER_SERVICE_CHECK_FIT_MESSAGES_H_

// The messages of each CheckFit call, made by the service rather than by
// gRPC, so that a handler may send an answer kept from an earlier call
// (AnswerCache) as it is, without copying it into the call's response and
// freeing the copy afterwards: for the 4.6 KB catalog answer of
// bench/load_gen.cc that copy and its destruction cost about as much CPU as
// the rest of the handler.
//
// gRPC sends the response its MessageHolder points to when the handler
// finishes the call, and releases the holder when the call is done:
// grpc/grpc include/grpcpp/impl/codegen/server_callback_handlers.h
// @ 2c2dd5c04701899abc560126d68b2de3646e3f8a (ServerCallbackUnaryImpl::
// Finish sends finish_ops_.SendMessagePtr(response()), and response()
// reads allocator_state_->response(); CallOnDone calls
// allocator_state_->Release()); the same in the 1.51.1 this builds against
// (Debian libgrpc++-dev 1.51.1-3+b1, same file). The handler reaches its
// holder through CallbackServerContext::GetRpcAllocatorState ("Get and
// maybe mutate the allocator state associated with the current RPC",
// include/grpcpp/server_context.h). Serializing one kept message from
// several calls at once is safe: protobuf's const methods may run
// concurrently, and the size they cache is a relaxed atomic
// (google/protobuf/generated_message_util.h CachedSize, protobuf 3.21.12).

#include <memory>

#include "grpcpp/server_context.h"
#include "grpcpp/support/message_allocator.h"
#include "headroom/v1/planner.pb.h"

namespace headroom {

class CheckFitMessages final
    : public grpc::MessageAllocator<v1::CheckFitRequest, v1::CheckFitResponse> {
 public:
  grpc::MessageHolder<v1::CheckFitRequest, v1::CheckFitResponse>*
  AllocateMessages() override {
    return new Holder;
  }

  // Makes the call of `context` send `answer` when it finishes OK, instead
  // of the response its handler was given (whatever that holds then is not
  // sent). `answer` is held until the call is done and must not change.
  // Returns false, and changes nothing, when the call's messages were not
  // made here (the allocator is not installed): then copy the answer.
  static bool SendKept(grpc::CallbackServerContext* context,
                       std::shared_ptr<const v1::CheckFitResponse> answer) {
    auto* holder = dynamic_cast<Holder*>(context->GetRpcAllocatorState());
    if (holder == nullptr) return false;
    holder->SendKept(std::move(answer));
    return true;
  }

 private:
  class Holder final
      : public grpc::MessageHolder<v1::CheckFitRequest, v1::CheckFitResponse> {
   public:
    Holder() {
      set_request(&request_);
      set_response(&response_);
    }
    void Release() override { delete this; }
    void SendKept(std::shared_ptr<const v1::CheckFitResponse> answer) {
      kept_ = std::move(answer);
      // gRPC only reads the response it sends (SendMessagePtr takes a
      // const pointer); nothing writes through this one.
      set_response(const_cast<v1::CheckFitResponse*>(kept_.get()));
    }

   private:
    v1::CheckFitRequest request_;
    v1::CheckFitResponse response_;
    std::shared_ptr<const v1::CheckFitResponse> kept_;
  };
};

}  // namespace headroom

#endif  // HEADROOM_SERVER_SERVICE_CHECK_FIT_MESSAGES_H_
