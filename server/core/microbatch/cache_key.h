#ifndef HEADROOM_SERVER_CORE_MICROBATCH_CACHE_KEY_H_
#define HEADROOM_SERVER_CORE_MICROBATCH_CACHE_KEY_H_

// The autotune cache's key: two keys are the same entry only when every
// field (GPU, versions, packages, settings, source hash) is equal. The
// bytes are the key's deterministic serialization (map entries sorted); the
// id is a short hash of them for people and URLs.

#include <string>

#include "headroom/v1/microbatch.pb.h"

namespace headroom {

std::string CacheKeyBytes(const v1::AutotuneCacheKey& key);

// 16 hex digits (64-bit FNV-1a of CacheKeyBytes), stable across builds.
std::string CacheKeyId(const v1::AutotuneCacheKey& key);

}  // namespace headroom

#endif  // HEADROOM_SERVER_CORE_MICROBATCH_CACHE_KEY_H_
