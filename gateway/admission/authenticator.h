// Who is calling: turns the value of an `Authorization` header (HTTP) or `authorization` metadata
// entry (gRPC), "Bearer <token>", into a Principal. The token is an API key or a JWT; a token with
// exactly two dots is tried as a JWT first when JWTs are configured.
//
// With neither API keys nor JWTs configured every request is allowed as "anonymous"; that is
// only safe on a loopback listener, which IsLoopbackAddress() lets the gateway check at startup.
//
// Thread-safe: Authenticate() may run on any number of threads (the key store reloads safely
// underneath it).

#ifndef LLMSERVE_GATEWAY_ADMISSION_AUTHENTICATOR_H_
#define LLMSERVE_GATEWAY_ADMISSION_AUTHENTICATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gateway/admission/api_key_store.h"
#include "gateway/admission/jwt_verifier.h"

namespace llmserve::gateway {

struct Principal {
  enum class Kind { kAnonymous, kApiKey, kJwt };
  // The key's name in the keys file, the JWT's subject, or "anonymous". API key names and JWT
  // subjects share one namespace (rate limits are per name).
  std::string name;
  Kind kind = Kind::kAnonymous;
  // The only models (base models and LoRA adapters, by the name requests use) it may use,
  // sorted: an API key's models=, a JWT's `models` claim. Empty: every model.
  std::vector<std::string> models;
  // May call the admin endpoints: an API key marked admin, or anyone when neither API keys nor
  // JWTs are configured (the gateway then listens on loopback only). A JWT never is.
  bool admin = false;

  bool MayUseModel(absl::string_view model) const;
};

// PERMISSION_DENIED naming the principal and the model when it may not use `model`.
absl::Status CheckModelAccess(const Principal& principal, absl::string_view model);

// "anonymous", "api_key", "jwt": for logs and metric labels.
absl::string_view PrincipalKindName(Principal::Kind kind);

class Authenticator {
 public:
  // Either may be null; when both are, every request is anonymous.
  Authenticator(std::shared_ptr<const ApiKeyStore> api_keys,
                std::shared_ptr<const JwtVerifier> jwt_verifier);

  // True when neither API keys nor JWTs are configured: the gateway must then listen on a
  // loopback address only.
  bool allows_anonymous() const { return api_keys_ == nullptr && jwt_verifier_ == nullptr; }

  // `authorization` is the header's value ("" when the request has none). UNAUTHENTICATED with a
  // message for the client when it is missing, not "Bearer <token>", or the token is refused.
  absl::StatusOr<Principal> Authenticate(absl::string_view authorization) const {
    return Authenticate(authorization, absl::Now());
  }
  absl::StatusOr<Principal> Authenticate(absl::string_view authorization, absl::Time now) const;

 private:
  const std::shared_ptr<const ApiKeyStore> api_keys_;
  const std::shared_ptr<const JwtVerifier> jwt_verifier_;
};

// True for a listen host that only this machine can reach: "localhost", 127.0.0.0/8, "::1" and
// IPv4-mapped 127.x addresses. Accepts "host", "host:port", "[v6]" and "[v6]:port". The wildcard
// addresses ("", "0.0.0.0", "::") and any name other than localhost are not loopback; no DNS
// lookup is made.
bool IsLoopbackAddress(absl::string_view host);

}  // namespace llmserve::gateway

#endif  // LLMSERVE_GATEWAY_ADMISSION_AUTHENTICATOR_H_
