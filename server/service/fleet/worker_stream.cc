#include "server/service/fleet/worker_stream.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace headroom {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

WorkerStream::WorkerStream(WorkerStreamHandler* handler,
                           BackgroundWorker* executor, std::string peer,
                           std::string identity, size_t max_unhandled)
    : identity(std::move(identity)),
      handler_(handler),
      peer_(std::move(peer)),
      max_unhandled_(max_unhandled),
      last_heard_ms_(NowMs()),
      handled_(std::make_shared<SerialQueue>(executor)) {
  StartRead(&incoming_);
}

// Never touches the store: the message is handled on the store executor,
// after the ones before it on this stream, and the next read starts at
// once. What the worker had not had acknowledged it sends again after it
// reconnects.
void WorkerStream::OnReadDone(bool ok) {
  if (!ok) {
    // After the messages read before the end are handled.
    handled_->Add([this] { End(grpc::Status::OK); });
    return;
  }
  last_heard_ms_ = NowMs();
  if (handled_->pending() >= max_unhandled_) {
    End(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                     absl::StrCat("more than ", max_unhandled_,
                                  " messages of this stream wait to be "
                                  "handled; reconnect and send again")));
    return;
  }
  handled_->Add([this, message = std::move(incoming_)] {
    // A message before this one may have ended the stream (a refused
    // hello, a bad result): the rest are not handled.
    if (!ending()) Handle(message);
  });
  incoming_.Clear();
  StartRead(&incoming_);
}

void WorkerStream::OnCancel() {
  End(grpc::Status(grpc::StatusCode::CANCELLED, "stream cancelled"));
}

void WorkerStream::OnDone() {
  handled_->Add([this] {
    handler_->OnStreamDone(this);
    delete this;
  });
}

void WorkerStream::Handle(const v1::WorkerMessage& message) {
  switch (message.kind_case()) {
    case v1::WorkerMessage::kHello:
      handler_->OnHello(this, message.hello());
      break;
    case v1::WorkerMessage::kHeartbeat:
      handler_->OnHeartbeat(this, message.heartbeat());
      break;
    case v1::WorkerMessage::kSamples:
      handler_->OnSamples(this, message.samples());
      break;
    case v1::WorkerMessage::kResult:
      handler_->OnResult(this, message.result());
      break;
    case v1::WorkerMessage::KIND_NOT_SET:
      End(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       "empty WorkerMessage; send hello, heartbeat, "
                       "samples or result"));
      break;
  }
}

}  // namespace headroom
