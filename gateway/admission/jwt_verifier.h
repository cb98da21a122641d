// Verifies bearer JWTs (RFC 7519, compact JWS) for the gateway: HS256 with a shared secret, or
// RS256 with an RSA public key or a JWKS file (RFC 7517) of them. The algorithm is pinned by
// configuration: a token whose header names any other algorithm (an HS256 token "signed" with the
// RSA public key, `none`) is rejected before its signature is looked at.
//
// Checks, in order: shape and size, header (alg pinned, no `crit`), signature, then claims:
// `exp` (required unless configured otherwise), `nbf`, `iss` and `aud` when configured, each time
// comparison allowing `leeway` of clock skew. Claims are only read once the signature is good, so
// an unauthenticated token learns nothing about why it would have been refused.
//
// cpp-jwt checks RS256 signatures. Parsing, claims and HS256 are done here because cpp-jwt 1.4
// reads the system clock itself (no injectable time for tests), compares HMACs with a
// non-constant-time `==`, accepts `aud` only as a string (RFC 7519 allows an array), matches
// `alg` case-insensitively, and can throw or assert on odd headers (a non-string `alg`).
//
// With a JWKS file, a token whose header names a `kid` is checked against that key only; a token
// without `kid` is checked against every key in the file (at most kMaxJwksKeys signature checks).
//
// Thread-safe: immutable after Create() (a changed key file needs a new verifier); Verify() may
// run on any number of threads.

#ifndef LLMSERVE_GATEWAY_ADMISSION_JWT_VERIFIER_H_
#define LLMSERVE_GATEWAY_ADMISSION_JWT_VERIFIER_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace llmserve::gateway {

enum class JwtAlgorithm { kHs256, kRs256 };

// "HS256" / "RS256" (case-insensitive, as operators type them in flags), INVALID_ARGUMENT else.
absl::StatusOr<JwtAlgorithm> ParseJwtAlgorithm(absl::string_view name);
// "HS256" / "RS256", the spelling tokens carry in their header.
absl::string_view JwtAlgorithmName(JwtAlgorithm algorithm);

// Bounds on a JWKS file, so that a wrong path (a log file, a dump) fails fast instead of costing
// memory at startup and up to one RSA verification per key for every token without `kid`.
inline constexpr size_t kMaxJwksFileBytes = size_t{1} << 20;
inline constexpr size_t kMaxJwksKeys = 64;

struct JwtVerifierOptions {
  JwtAlgorithm algorithm = JwtAlgorithm::kHs256;
  // HS256: a file holding the shared secret (trailing whitespace, such as the newline `echo`
  // writes, is dropped; at least 32 bytes must remain, RFC 7518 section 3.2).
  // RS256: a PEM public key ("-----BEGIN PUBLIC KEY-----"), RSA of at least 2048 bits.
  std::string key_file;
  // RS256 only, instead of key_file: a JWKS file ({"keys": [{"kty": "RSA", "kid": ..., "n": ...,
  // "e": ...}, ...]}, at most kMaxJwksKeys entries and kMaxJwksFileBytes). Keys that are not
  // RSA, or whose `alg` (when present) is not RS256 or `use` (when present) is not "sig", are
  // skipped; RSA keys under 2048 bits are refused, as with key_file.
  std::string jwks_file;
  // When non-empty, the token's `iss` must equal it.
  std::string issuer;
  // When non-empty, the token's `aud` (a string, or an array of strings) must contain it.
  std::string audience;
  // Clock skew allowed for `exp` and `nbf`.
  absl::Duration leeway = absl::Seconds(30);
  // A token without `exp` never expires; refuse such tokens unless told otherwise.
  bool require_expiry = true;
  // The principal name of a token without `sub`; when empty, `sub` is required.
  std::string subject_fallback = "jwt";
};

// Who a verified token names, and what it may use.
struct JwtIdentity {
  // `sub`, or JwtVerifierOptions::subject_fallback.
  std::string subject;
  // The `models` claim (an array of model names, base models or LoRA adapters), sorted; empty
  // when the token has none: every model.
  std::vector<std::string> models;
};

// The most names a token's `models` claim may hold.
inline constexpr size_t kMaxJwtModels = 1024;

class JwtVerifier {
 public:
  // Reads and checks the key: INVALID_ARGUMENT (naming the file) for a short secret, a file that is
  // not a PEM public key, a key that is not RSA or too small; NOT_FOUND for a missing file.
  // A JWKS file is INVALID_ARGUMENT, naming the file and the key's index, when it is not JSON, an
  // entry is malformed (bad base64url, private key material, a duplicate `kid`) or too small, it
  // exceeds the limits above, or no key in it is usable for RS256; so is setting both key_file and
  // jwks_file, or jwks_file with HS256.
  static absl::StatusOr<std::unique_ptr<JwtVerifier>> Create(const JwtVerifierOptions& options);

  JwtVerifier(const JwtVerifier&) = delete;
  JwtVerifier& operator=(const JwtVerifier&) = delete;

  // The token's subject (`sub`, or options.subject_fallback), or UNAUTHENTICATED with a message
  // saying what is wrong ("JWT expired at ...", "JWT signature does not verify", ...). The message
  // never contains the token itself.
  absl::StatusOr<std::string> Verify(absl::string_view token) const {
    return Verify(token, absl::Now());
  }
  absl::StatusOr<std::string> Verify(absl::string_view token, absl::Time now) const;
  // The same, with the `models` claim (UNAUTHENTICATED when it is not an array of 1 to
  // kMaxJwtModels strings of 1-256 printable characters).
  absl::StatusOr<JwtIdentity> VerifyIdentity(absl::string_view token, absl::Time now) const;

 private:
  // An RS256 public key; `kid` is only set for keys from a JWKS file that name one.
  struct RsaKey {
    std::optional<std::string> kid;
    std::string pem;
  };

  // The usable keys of a JWKS file, or INVALID_ARGUMENT naming the file (and key index).
  static absl::StatusOr<std::vector<RsaKey>> LoadJwks(const std::string& path);

  JwtVerifier(JwtVerifierOptions options, std::string secret, std::vector<RsaKey> rsa_keys)
      : options_(std::move(options)), secret_(std::move(secret)), rsa_keys_(std::move(rsa_keys)) {}
  // `kid` is the token header's key id; it narrows the keys tried only with a JWKS file (a single
  // configured key is the issuer's key whatever the token calls it).
  absl::Status CheckSignature(absl::string_view signing_input, absl::string_view signature_b64url,
                              absl::string_view signature,
                              const std::optional<std::string>& kid) const;

  const JwtVerifierOptions options_;
  // HS256 only.
  const std::string secret_;
  // RS256 only: the key of key_file, or the usable keys of jwks_file in file order.
  const std::vector<RsaKey> rsa_keys_;
};

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_JWT_VERIFIER_H_
