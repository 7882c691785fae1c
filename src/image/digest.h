// SHA-256 digests as OCI writes them ("sha256:" and 64 lowercase hex digits), computed with
// OpenSSL's EVP. The only algorithm the image store keeps; anything else is refused as input.
#pragma once

#include <openssl/evp.h>

#include <memory>
#include <string>
#include <string_view>

namespace sandstream::image {

class Sha256 {
 public:
  Sha256();
  void Update(std::string_view data);
  // "sha256:<hex>" of everything given so far.
  std::string Digest() const;

 private:
  struct Free {
    void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MD_CTX, Free> ctx_;
};

std::string Sha256Of(std::string_view data);

// Whether `digest` is "sha256:" and 64 lowercase hex digits.
bool ValidDigest(std::string_view digest);
// The 64 hex digits of a valid digest.
inline std::string_view DigestHex(std::string_view digest) { return digest.substr(7); }

}  // namespace sandstream::image
