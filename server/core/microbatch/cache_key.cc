#include "server/core/microbatch/cache_key.h"

#include <cstdint>
#include <cstdio>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace headroom {

std::string CacheKeyBytes(const v1::AutotuneCacheKey& key) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    key.SerializeToCodedStream(&coded);
  }
  return bytes;
}

std::string CacheKeyId(const v1::AutotuneCacheKey& key) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : CacheKeyBytes(key)) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx",
                static_cast<unsigned long long>(hash));
  return hex;
}

}  // namespace headroom
