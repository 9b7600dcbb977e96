#include "core/calibration/fit_inputs.h"

#include <openssl/evp.h>

#include <set>

#include "base/deterministic_bytes.h"

namespace headroom {

std::string FitInputsSha256(const std::vector<v1::MeasuredRun>& runs) {
  std::set<std::string> distinct;
  for (const v1::MeasuredRun& run : runs) {
    distinct.insert(DeterministicBytes(run));
  }
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  for (const std::string& bytes : distinct) {
    // Length-prefixed, so no two lists of runs hash the same bytes.
    const uint64_t size = bytes.size();
    EVP_DigestUpdate(context, &size, sizeof(size));
    EVP_DigestUpdate(context, bytes.data(), bytes.size());
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest, &length);
  EVP_MD_CTX_free(context);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

}  // namespace headroom
