#include "image/digest.h"

#include <new>

namespace sandstream::image {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
}

void Sha256::Update(std::string_view data) {
  EVP_DigestUpdate(ctx_.get(), data.data(), data.size());
}

std::string Sha256::Digest() const {
  // A copy, so that hashing may go on after a look at the digest so far.
  std::unique_ptr<EVP_MD_CTX, Free> copy(EVP_MD_CTX_new());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (!copy || EVP_MD_CTX_copy_ex(copy.get(), ctx_.get()) != 1 ||
      EVP_DigestFinal_ex(copy.get(), md, &len) != 1) {
    throw std::bad_alloc();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[md[i] >> 4];
    out += kHex[md[i] & 15];
  }
  return out;
}

std::string Sha256Of(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Digest();
}

bool ValidDigest(std::string_view digest) {
  if (digest.size() != 71 || digest.substr(0, 7) != "sha256:") return false;
  for (char c : DigestHex(digest)) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace sandstream::image
