#include "common/prefix_cache/block_hash.h"

#include <openssl/evp.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace llmserve::common {
namespace {

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

}  // namespace

BlockHash HashBlock(const BlockHash* parent, absl::Span<const int32_t> tokens,
                    absl::string_view salt) {
  // Tagged, length-prefixed little-endian fields: no two different inputs share a byte string.
  std::string input;
  input.reserve(32 + salt.size() + 4 * tokens.size());
  if (parent != nullptr) {
    input.push_back('p');
    AppendLittleEndian(parent->high, 8, &input);
    AppendLittleEndian(parent->low, 8, &input);
  } else {
    input.push_back('s');
    AppendLittleEndian(salt.size(), 8, &input);
    input.append(salt.data(), salt.size());
  }
  AppendLittleEndian(tokens.size(), 8, &input);
  for (int32_t token : tokens) AppendLittleEndian(static_cast<uint32_t>(token), 4, &input);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int digest_size = 0;
  LLMSERVE_CHECK(
      EVP_Digest(input.data(), input.size(), digest, &digest_size, EVP_sha256(), nullptr) == 1 &&
      digest_size >= 16)
      << "SHA-256 failed";
  BlockHash hash;
  for (int i = 0; i < 8; ++i) {
    hash.high = (hash.high << 8) | digest[i];
    hash.low = (hash.low << 8) | digest[8 + i];
  }
  return hash;
}

std::vector<BlockHash> HashFullBlocks(absl::Span<const int32_t> tokens, int32_t block_size,
                                      absl::string_view salt) {
  std::vector<BlockHash> hashes;
  const size_t full = tokens.size() / block_size;
  hashes.reserve(full);
  for (size_t b = 0; b < full; ++b) {
    hashes.push_back(HashBlock(b == 0 ? nullptr : &hashes.back(),
                               tokens.subspan(b * block_size, block_size), salt));
  }
  return hashes;
}

std::string LoraCacheSalt(absl::string_view salt, absl::string_view adapter) {
  if (adapter.empty()) return std::string(salt);
  // A NUL cannot occur in an adapter name, so no salt of a base-model request can equal it.
  return absl::StrCat(salt, absl::string_view("\0lora:", 6), adapter);
}

}  // namespace llmserve::common
