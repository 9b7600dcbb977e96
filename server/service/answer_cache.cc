#include "server/service/answer_cache.h"

#include <utility>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace headroom {

std::string AnswerCache::KeyOf(const v1::CheckFitRequest& request) const {
  const size_t bytes = request.ByteSizeLong();
  if (bytes == 0 || bytes > limits_.max_request_bytes) return "";
  std::string key;
  key.reserve(bytes);
  {
    // Deterministic: map fields in key order, so equal requests give equal
    // keys whatever order their maps were filled in.
    google::protobuf::io::StringOutputStream stream(&key);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    request.SerializeWithCachedSizes(&out);
  }
  return key;
}

bool AnswerCache::Holds(const PlannerState::Answering& from) const {
  return from_.planner == from.planner && from_.evidence == from.evidence;
}

void AnswerCache::SwitchTo(const PlannerState::Answering& from) {
  if (Holds(from)) return;
  recent_.clear();
  older_.clear();
  recent_bytes_ = 0;
  from_ = from;
}

std::shared_ptr<const v1::CheckFitResponse> AnswerCache::Find(
    const PlannerState::Answering& from, const std::string& key) {
  if (key.empty()) return nullptr;
  absl::MutexLock lock(&mu_);
  SwitchTo(from);
  if (auto it = recent_.find(key); it != recent_.end()) return it->second;
  auto it = older_.find(key);
  if (it == older_.end()) return nullptr;
  std::shared_ptr<const v1::CheckFitResponse> answer = it->second;
  std::string moved = key;
  older_.erase(it);
  Keep(std::move(moved), answer);
  return answer;
}

void AnswerCache::Insert(const PlannerState::Answering& from, std::string key,
                         std::shared_ptr<const v1::CheckFitResponse> answer) {
  if (key.empty() || answer == nullptr) return;
  absl::MutexLock lock(&mu_);
  if (!Holds(from)) return;
  Keep(std::move(key), std::move(answer));
}

void AnswerCache::Keep(std::string key,
                       std::shared_ptr<const v1::CheckFitResponse> answer) {
  // The answer's size in memory, estimated from its wire size: the catalog
  // answer of bench/load_gen.cc holds 11,117 bytes (SpaceUsedLong) for 4,643
  // on the wire, and SpaceUsedLong itself costs 9 µs a call against 1 µs.
  constexpr size_t kMemoryPerWireByte = 3;
  const size_t bytes = key.size() + kMemoryPerWireByte * answer->ByteSizeLong();
  if (bytes > limits_.max_bytes) return;
  if (recent_.size() >= limits_.max_entries ||
      recent_bytes_ + bytes > limits_.max_bytes) {
    older_ = std::move(recent_);
    recent_.clear();
    recent_bytes_ = 0;
  }
  if (recent_.try_emplace(std::move(key), std::move(answer)).second) {
    recent_bytes_ += bytes;
  }
}

size_t AnswerCache::size() const {
  absl::MutexLock lock(&mu_);
  return recent_.size() + older_.size();
}

}  // namespace headroom
